import crypto from 'node:crypto';
import type { LogEntry } from '@temporalio/worker';
import { eventually, installQuietRuntime, runningStatus, startTestSystem } from '../helpers/temporal';

// Before anything uses the SDK's runtime: this file reads what the worker logs.
const logs: LogEntry[] = [];
installQuietRuntime(undefined, (entry) => logs.push(entry));

test('a draining host refuses placements with one log line, not a warning per attempt', async () => {
  const sys = await startTestSystem();
  try {
    const running = await sys.sessions.start({
      sessionId: `drain-log-${crypto.randomUUID().slice(0, 8)}`,
      runtime: { kind: 'workspace', command: ['sleep', '600'] },
    });
    await runningStatus(running);
    // The only host drains and keeps polling: the session's restore elsewhere is refused here, again and again.
    const report = await sys.firstHost.drain({ deadlineMs: 30_000 });
    expect(report.drained).toEqual([running.sessionId]);
    await eventually(async () => {
      const pending = (await running.workflow.describe()).raw.pendingActivities ?? [];
      return pending.some((a) => (a.attempt ?? 0) >= 3 && a.lastFailure?.message?.includes('is draining'));
    });
    await sys.firstHost.stop();
    const refusals = logs.filter((e) => e.message.includes('is draining'));
    expect(refusals).toEqual([expect.objectContaining({ level: 'INFO' })]);
    const warnings = logs.filter((e) => e.level === 'WARN' || e.level === 'ERROR');
    expect(warnings.filter((e) => JSON.stringify(e.meta ?? {}).includes('draining'))).toEqual([]);
    expect(warnings.filter((e) => e.message === 'Activity failed')).toEqual([]);
  } finally {
    await sys.close();
  }
});
