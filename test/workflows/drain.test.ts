import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { sessionStateKey } from '../../src/api';
import type { SessionHandle } from '../../src/client';
import { eventually, runningStatus, startTestSystem, type TestSystem } from '../helpers/temporal';

let sys: TestSystem;
beforeEach(async () => {
  sys = await startTestSystem();
});
afterEach(async () => {
  await sys?.close();
});

const COUNTER = [
  'sh',
  '-c',
  'n=$(cat n 2>/dev/null || echo 0); while :; do n=$((n+1)); echo $n > n.tmp; mv n.tmp n; sleep 0.1; done',
];

function newId(prefix: string) {
  return `${prefix}-${crypto.randomUUID().slice(0, 8)}`;
}

async function counterSession(): Promise<SessionHandle> {
  const session = await sys.sessions.start({
    sessionId: newId('drain'),
    runtime: { kind: 'workspace', command: COUNTER },
  });
  const { runtime } = await runningStatus(session);
  await eventually(() => Number(fs.readFileSync(path.join(runtime.location, 'n'), 'utf8').trim() || 0) > 3);
  return session;
}

async function phaseOf(session: SessionHandle): Promise<string | undefined> {
  return (await session.workflow.describe()).typedSearchAttributes.get(sessionStateKey);
}

function counterOf(location: string): number {
  return Number(fs.readFileSync(path.join(location, 'n'), 'utf8').trim());
}

test('a graceful stop moves a session with no checkpoint to another worker, with its files', async () => {
  const session = await counterSession();
  const before = await runningStatus(session);
  const second = await sys.addHost();
  const counted = counterOf(before.runtime.location);

  const report = await sys.firstHost.stop();
  expect(report).toMatchObject({ sessions: 1, drained: [session.sessionId], notDrained: [] });
  // The process on the stopped host is gone, and so is its directory.
  expect(() => process.kill(before.runtime.pid!, 0)).toThrow();
  expect(fs.existsSync(before.runtime.location)).toBe(false);

  const after = await runningStatus(session, 30_000);
  expect(after.runtime.hostTaskQueue).toBe(second.hostTaskQueue);
  expect(after.head).toMatchObject({ trigger: 'drain', sequence: 1 });
  const drainedAt = after.head!;
  // It counts on from where the drain checkpointed it: no work before the drain is lost.
  expect(counterOf(after.runtime.location)).toBeGreaterThanOrEqual(counted);
  const timeline = await session.timeline();
  expect(timeline.map((e) => e.kind)).toEqual(['checkpoint', 'restored']);
  expect(timeline[1]).toMatchObject({ kind: 'restored', checkpointId: drainedAt.checkpointId, cause: 'drain' });
  await session.stop({ checkpoint: false });
});

test('with no other worker, a drained session waits and comes back on the next worker that starts', async () => {
  const session = await counterSession();
  const memory = await sys.sessions.start({ sessionId: newId('drain-mem'), runtime: { kind: 'memory' } });
  const { runtime } = await runningStatus(memory);
  sys.memory.write(runtime.instanceId, 'kept across the drain');
  const counted = counterOf((await runningStatus(session)).runtime.location);

  const report = await sys.firstHost.stop({ deadlineMs: 20_000 });
  expect(report.drained.sort()).toEqual([session.sessionId, memory.sessionId].sort());
  // No worker runs now, so nothing answers queries: the phase is read from the search attribute.
  expect(await phaseOf(session)).toBe('resuming');

  const next = await sys.addHost();
  const after = await runningStatus(session, 30_000);
  expect(after.runtime.hostTaskQueue).toBe(next.hostTaskQueue);
  expect(counterOf(after.runtime.location)).toBeGreaterThanOrEqual(counted);
  const memAfter = await runningStatus(memory, 30_000);
  expect(next.memory.read(memAfter.runtime.instanceId).toString('utf8')).toBe('kept across the drain');
  await Promise.all([session.stop({ checkpoint: false }), memory.stop({ checkpoint: false })]);
});

test('a paused session is left alone by a drain', async () => {
  const session = await counterSession();
  await session.pause();
  const report = await sys.firstHost.stop();
  expect(report).toMatchObject({ sessions: 0, drained: [] });
  expect(await phaseOf(session)).toBe('paused');
});

test('a session whose start is under way when the drain begins is drained too, or placed elsewhere', async () => {
  const sessionId = newId('drain-starting');
  const session = await sys.sessions.start(
    { sessionId, runtime: { kind: 'workspace', command: COUNTER } },
    { wait: false },
  );
  const report = await sys.firstHost.stop({ deadlineMs: 20_000 });
  // Either its start finished on the draining host (then it was drained), or the host refused to take it.
  expect(report.notDrained).toEqual([]);
  const next = await sys.addHost();
  const after = await runningStatus(session, 30_000);
  expect(after.runtime.hostTaskQueue).toBe(next.hostTaskQueue);
  await session.stop({ checkpoint: false });
});
