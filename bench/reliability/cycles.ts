/**
 * Scenario 4: a counter workspace through many checkpoint/pause/resume cycles. Every resume must continue the
 * state its pause checkpointed, and at the end the counter's log — which every tick appends to, and every restore
 * brings back — must be 1, 2, 3, … with no gap, and hold every checkpoint's log as its beginning: no value restored
 * ever went back behind a checkpoint.
 */
import { setTimeout as delay } from 'node:timers/promises';
import type { Context } from './context';
import type { Subject } from './judge';
import { checkpointFiles, liveFiles } from './workload';

/** Ticks of the counter (every 100 ms) between two controls: each checkpoint holds new values. */
const BETWEEN_MS = 150;

export function cyclesRow(count: number): string {
  return `${count} checkpoint/pause/resume cycles`;
}

export async function cycles(ctx: Context, count: number, sessions: number): Promise<void> {
  const row = cyclesRow(count);
  if (!ctx.host.currentWorker) await ctx.host.startWorker();
  const subjects = await Promise.all(
    Array.from({ length: sessions }, (_, i) => ctx.runningCounter(row, `cycles-${i}`, undefined, false)),
  );
  for (const s of subjects) {
    // Nothing faults here: a control that fails is a finding.
    s.begin('cycles', () =>
      run(ctx, s, count).catch((error: unknown) =>
        s.problems.push({
          verdict: 'lost',
          detail: `a control failed: ${error instanceof Error ? error.message : String(error)}`,
        }),
      ),
    );
  }
  await Promise.all(subjects.map((s) => s.operation!.done));
  await ctx.aftermath(subjects, row);
}

async function run(ctx: Context, subject: Subject, count: number): Promise<void> {
  const store = ctx.store;
  for (let cycle = 1; cycle <= count; cycle++) {
    await delay(BETWEEN_MS);
    subject.acked.push(await subject.handle.checkpoint());
    await delay(BETWEEN_MS);
    const paused = await subject.handle.pause();
    subject.acked.push(paused);
    const atPause = await checkpointFiles(store, paused);
    const resumed = await subject.handle.resume();
    if (resumed.restoredFrom.checkpointId !== paused.checkpointId) {
      subject.problems.push({
        verdict: 'lost',
        detail: `cycle ${cycle}: resumed from ${resumed.restoredFrom.checkpointId}, not the pause's ${paused.checkpointId}`,
      });
    }
    const now = await liveFiles(resumed.runtime.location);
    if (!now.log.startsWith(atPause.log)) {
      subject.problems.push({
        verdict: 'lost',
        detail: `cycle ${cycle}: the resumed counter log does not continue the one paused at ${atPause.n}`,
      });
    }
  }
  // Every checkpoint's history is the beginning of today's: nothing restored went back behind any of them.
  const status = await subject.handle.status();
  if (!status.runtime) return;
  const final = await liveFiles(status.runtime.location);
  for (const ref of subject.acked) {
    const files = await checkpointFiles(store, ref);
    if (!final.log.startsWith(files.log)) {
      subject.problems.push({
        verdict: 'lost',
        detail: `the final counter log does not begin with checkpoint ${ref.checkpointId}'s (counter ${files.n})`,
      });
    }
  }
}
