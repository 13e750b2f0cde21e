/**
 * Round trips of the controls on a small memory session, and of the bare baseline: a no-op Update on a trivial
 * workflow of the same server, sent by the same client.
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import type { SessionHandle } from '../../src/client';
import { bareActivityUpdate, bareDoneSignal, bareNoopUpdate, bareUpdateWorkflow } from './bare-workflow';
import { summarize, timed, type Latency } from './stats';
import type { ControlsSystem } from './system';

/** Untimed calls before each measured series: the first calls of a fresh worker pay its warm-up. */
const WARMUP = 10;

export interface LatencyResults {
  bare: Latency;
  /** An update that runs one no-op activity on the same bare workflow. */
  bareActivity: Latency;
  checkpoint: Latency;
  pause: Latency;
  resume: Latency;
  rewind: Latency;
  /** fork({ from, paused: true }): answered once the fork exists, paused at its first checkpoint. */
  forkPaused: Latency;
  /** fork({ from }) and then status() until the fork runs. */
  forkRunning: Latency;
  /** Runs of the session's workflow by the end (continue-as-new may hand over mid-series). */
  sessionRuns: number;
}

/** A few KiB of text: the state of a small memory session. */
export function smallState(): string {
  return randomBytes(3 * 1024).toString('base64');
}

async function series(runs: number, fn: () => Promise<unknown>): Promise<number[]> {
  for (let i = 0; i < WARMUP; i++) await fn();
  const samples: number[] = [];
  for (let i = 0; i < runs; i++) samples.push((await timed(fn)).ms);
  return samples;
}

export async function measureBare(
  sys: ControlsSystem,
  runs: number,
): Promise<Pick<LatencyResults, 'bare' | 'bareActivity'>> {
  const handle = await sys.client.workflow.start(bareUpdateWorkflow, {
    taskQueue: sys.bareTaskQueue,
    workflowId: `bare-${sys.runId}`,
  });
  const bare = await series(runs, () => handle.executeUpdate(bareNoopUpdate));
  const bareActivity = await series(runs, () => handle.executeUpdate(bareActivityUpdate));
  await handle.signal(bareDoneSignal);
  return { bare: summarize(bare), bareActivity: summarize(bareActivity) };
}

/** Polls the fork's status until it runs. */
async function untilRunning(fork: SessionHandle): Promise<void> {
  for (;;) {
    if ((await fork.status()).phase === 'running') return;
    await delay(2);
  }
}

export async function measureControls(
  sys: ControlsSystem,
  runs: number,
): Promise<Omit<LatencyResults, 'bare' | 'bareActivity'>> {
  const session = await sys.sessions.start({
    sessionId: `small-${sys.runId}`,
    runtime: { kind: 'memory', initialState: smallState() },
  });
  const checkpoint = await series(runs, () => session.checkpoint());

  const pause: number[] = [];
  const resume: number[] = [];
  for (let i = 0; i < WARMUP + runs; i++) {
    const p = await timed(() => session.pause());
    const r = await timed(() => session.resume());
    if (i >= WARMUP) {
      pause.push(p.ms);
      resume.push(r.ms);
    }
  }

  // Each rewind goes back to the newest checkpoint: the one its predecessor took for safety.
  let target = (await session.checkpoint()).index!;
  const rewind = await series(runs, async () => {
    const result = await session.rewind({ to: target });
    target = result.safetyCheckpoint!.index!;
  });

  const from = (await session.checkpoint()).index!;
  const forkPaused = await series(runs, () => session.fork({ from, paused: true }));
  // A running fork holds a runtime instance: a few are enough, and each is stopped once measured.
  const forkRunning = await series(Math.min(runs, 20), async () => {
    const result = await session.fork({ from });
    const fork = sys.sessions.get(result.forks[0]!.sessionId);
    await untilRunning(fork);
    void fork.stop({ checkpoint: false }).catch(() => undefined);
  });

  const { runs: sessionRuns } = await session.status();
  await session.stop({ checkpoint: false });
  return {
    checkpoint: summarize(checkpoint),
    pause: summarize(pause),
    resume: summarize(resume),
    rewind: summarize(rewind),
    forkPaused: summarize(forkPaused),
    forkRunning: summarize(forkRunning),
    sessionRuns,
  };
}
