/** The sessions bench through Temporal: a session driven by the SessionClient, the workers in this process. */
import { randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import * as fsp from 'node:fs/promises';
import * as path from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import type { SessionClient, SessionHandle } from '../../src/client';
import { withTimeout, type Cleanup } from './cleanup';
import { historyMarks } from './history-marks';
import type { OpName, Recorder } from './records';
import {
  blobName,
  processState,
  seedWorkspace,
  treeDigest,
  WORKSPACE_SPEC,
  type Seed,
  type TreeDigest,
} from './workload';

async function waitUntilRunning(handle: SessionHandle): Promise<{ location: string; pid: number }> {
  const deadline = Date.now() + 60_000;
  for (;;) {
    const status = await handle.status();
    if (status.phase === 'running' && status.runtime?.pid !== undefined) {
      return { location: status.runtime.location, pid: status.runtime.pid };
    }
    if (status.phase === 'failed') throw new Error(`session failed to start: ${status.failure?.message}`);
    if (Date.now() > deadline) throw new Error(`session still ${status.phase} after 60 s`);
    await delay(50);
  }
}

/** What every round through Temporal shares: the client, the recorder, the seed, the workers' store. */
export interface SessionRoundContext {
  sessions: SessionClient;
  recorder: Recorder;
  cleanup: Cleanup;
  seed: Seed;
  /** The workers' store: each round's checkpoints are removed once it is done. */
  snapshotsDir: string;
  runId: string;
}

export interface RoundCheck {
  round: number;
  original: TreeDigest;
  restored: TreeDigest;
  pidAlive: boolean;
  cwdMatches: boolean;
  stateAfterCheckpoint: string | undefined;
  oldPidGone: boolean;
}

/**
 * One session through the real system: checkpoint, checkpoint after one file changed, pause, resume (its process,
 * cwd and tree checked), checkpoint again, stop.
 */
export async function sessionRound(ctx: SessionRoundContext, round: number): Promise<RoundCheck> {
  const { sessions, recorder, cleanup, seed, snapshotsDir, runId } = ctx;
  const sessionId = `bench-${runId}-${round}`;
  const handle = await sessions.start({
    sessionId,
    runtime: WORKSPACE_SPEC,
    description: 'bench/sessions/run.ts',
  });
  let ended = false;
  cleanup.add(`session ${sessionId}`, async () => {
    if (ended) return;
    // The server is in memory and goes away with the bench: terminating is enough if the stop cannot finish.
    // The session's process is stopped in any case by the workers' cleanup (WorkspaceRuntime.stopAll).
    await withTimeout(handle.stop({ checkpoint: false }), 10_000, 'stop').catch(() => handle.workflow.terminate());
  });
  const started = await waitUntilRunning(handle);
  seedWorkspace(seed, started.location);

  /** Times one control of this round and keeps its record. */
  const op = <T>(name: OpName, fn: () => Promise<T>, bytesOf: (result: T) => number): Promise<T> =>
    recorder.time(name, round, fn, bytesOf);
  const checkpointOp = (name: OpName) =>
    op(
      name,
      () => handle.checkpoint(),
      (ref) => ref.size,
    );

  await checkpointOp('checkpoint');
  // The group must have been thawed when the capture ended (S: sleeping in `sleep 1`, R: running).
  const stateAfterCheckpoint = processState(started.pid);

  // One file rewritten: the runtime names the others as unchanged since the checkpoint just taken.
  const rewritten = path.join(started.location, blobName(0));
  fs.writeFileSync(rewritten, randomBytes(fs.statSync(rewritten).size));
  // What pause captures and resume must bring back.
  const original = await treeDigest(started.location);
  await checkpointOp('checkpointChanged');

  await op(
    'pause',
    () => handle.pause(),
    (ref) => ref.size,
  );
  const oldPidGone = processState(started.pid) === undefined;

  const resumed = await op(
    'resume',
    () => handle.resume(),
    (r) => r.restoredFrom.size,
  );
  const resumeHistory = await historyMarks(handle, 'resume');
  recorder.annotate('resume', resumeHistory.marks, {
    workflowTasks: resumeHistory.workflowTasks,
    activities: resumeHistory.activities,
  });
  const { pid, location } = resumed.runtime;
  const state = pid === undefined ? undefined : processState(pid);
  const pidAlive = state !== undefined && state !== 'Z' && state !== 'X';
  let cwdMatches = false;
  try {
    cwdMatches = pid !== undefined && fs.readlinkSync(`/proc/${pid}/cwd`) === location;
  } catch {
    cwdMatches = false;
  }
  const restored = await treeDigest(location);

  await checkpointOp('checkpoint2');

  await op(
    'stop',
    () => handle.stop({ checkpoint: false }),
    () => 0,
  );
  ended = true;
  // Three checkpoints of the full state per round: free the disk (and its page cache) for the next round.
  await fsp.rm(path.join(snapshotsDir, sessionId), { recursive: true, force: true });
  return { round, original, restored, pidAlive, cwdMatches, stateAfterCheckpoint, oldPidGone };
}
