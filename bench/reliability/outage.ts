/**
 * Scenario 3: the Temporal server goes away (kill -9) and comes back on the same port and SQLite file, while the
 * worker and its sessions' processes stay healthy. Nothing may be lost, and nothing may be rolled back: a session
 * restored from a checkpoint although its process was fine has lost the work done since.
 */
import { setTimeout as delay } from 'node:timers/promises';
import type { Context } from './context';
import type { Subject } from './judge';
import { FAST_LIVENESS } from './workload';

/**
 * After the server is back, how long to keep watching before judging: the longest heartbeat timeout of the sessions
 * (the default, 30 s) and some, so that a watcher the server would time out has had the time to be.
 */
const WATCH_AFTER_MS = 35_000;

export function outageRow(seconds: number): string {
  return `server outage ${seconds} s`;
}

/** `during` runs while the sessions are watched after the server is back (the pause/resume cycles, say). */
export async function outage(ctx: Context, seconds: number, during?: () => Promise<void>): Promise<void> {
  const row = outageRow(seconds);
  const worker = ctx.host.currentWorker ?? (await ctx.host.startWorker());
  const tag = `outage${seconds}`;
  // Default liveness (30 s heartbeats) and the crash scenarios' 3 s: both must ride out the outage.
  const subjects = await Promise.all([
    ctx.runningCounter(row, `${tag}-workspace`),
    ctx.runningCounter(row, `${tag}-workspace-fast`, FAST_LIVENESS),
    ctx.runningMemory(row, `${tag}-memory`),
    ctx.runningMemory(row, `${tag}-memory-fast`, FAST_LIVENESS),
  ]);
  await Promise.all(subjects.filter((s) => !s.isMemory).map(checkpointed));
  for (const subject of subjects) {
    subject.keepInstance = true;
    subject.timelineBefore = (await subject.handle.timeline()).length;
  }

  await ctx.cluster.killServer();
  const down = Date.now();
  for (const subject of subjects) subject.begin('outage', () => delay(seconds * 1_000));
  await delay(seconds * 1_000);
  await ctx.cluster.startServer();
  const back = Date.now();
  ctx.tally.findings.push(`NOTE — ${row}: the server was down ${Math.round((Date.now() - down) / 1000)} s`);
  await Promise.all([delay(WATCH_AFTER_MS), during?.()]);
  if (ctx.host.currentWorker !== worker) {
    ctx.tally.findings.push(`NOTE — ${row}: the worker exited during the outage:\n${worker.output().slice(-2000)}`);
    await ctx.host.startWorker();
  }
  await ctx.aftermath(subjects, row, back);
}

async function checkpointed(subject: Subject): Promise<void> {
  subject.acked.push(await subject.handle.checkpoint());
}
