/**
 * The freeze of a workspace capture with pre-copy (the default) and without it (`precopy: false`: frozen for the
 * whole capture, as before pre-copy), on the same seed in the same run, without Temporal: each a first checkpoint
 * (no base), once as it is and once with 1 % of the bytes rewritten between the pre-copy and the freeze.
 */
import { randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import type { SnapshotStore } from '../../src/snapshots';
import type { ProbedWorkspaceRuntime } from './probes';
import type { OpName, Recorder } from './records';
import { blobName, seedWorkspace, WORKSPACE_SPEC, type Seed } from './workload';

export interface FreezeRoundContext {
  precopy: ProbedWorkspaceRuntime;
  /** The same runtime with `precopy: false`: the baseline. */
  whole: ProbedWorkspaceRuntime;
  store: SnapshotStore;
  recorder: Recorder;
  seed: Seed;
  /** Bytes of the big files. */
  totalBytes: number;
}

/** Overwrites the first 1 % of the big files' bytes in place, file after file, sizes and names kept. */
function changeOnePercent(dir: string, seed: Seed, totalBytes: number): void {
  let left = Math.ceil(totalBytes / 100);
  for (let i = 0; i < seed.blobCount && left > 0; i++) {
    const file = path.join(dir, blobName(i));
    const length = Math.min(left, fs.statSync(file).size);
    const fd = fs.openSync(file, 'r+');
    try {
      fs.writeSync(fd, randomBytes(length), 0, length, 0);
    } finally {
      fs.closeSync(fd);
    }
    left -= length;
  }
}

export async function freezeRound(ctx: FreezeRoundContext, round: number): Promise<void> {
  const { store, recorder, seed, totalBytes } = ctx;
  const runtimes: Array<[ProbedWorkspaceRuntime, string, OpName, OpName]> = [
    [ctx.precopy, 'precopy', 'freeze-first', 'freeze-changed'],
    [ctx.whole, 'whole', 'freeze-first-whole', 'freeze-changed-whole'],
  ];
  for (const [runtime, name, firstOp, changedOp] of runtimes) {
    const sessionId = `freeze-${name}-${round}`;
    const started = await runtime.start({ sessionId, instanceId: `${sessionId}-a`, spec: WORKSPACE_SPEC });
    const written: string[] = [];
    try {
      seedWorkspace(seed, started.location);
      // Each a first checkpoint: never reported stored, so the next capture has no base either.
      const checkpoint = (op: OpName, sequence: number) =>
        recorder.time(
          op,
          round,
          async () => {
            const state = await runtime.captureState(started.instanceId);
            const checkpointId = `${sessionId}-${sequence}`;
            written.push(checkpointId);
            return store.write(
              {
                checkpointId,
                sessionId,
                sequence,
                parentId: null,
                runtime: { kind: runtime.kind, version: runtime.version },
                trigger: 'manual',
              },
              state,
            );
          },
          (manifest) => manifest.size,
        );
      await checkpoint(firstOp, 1);
      runtime.beforeFreeze = async () => changeOnePercent(started.location, seed, totalBytes);
      try {
        await checkpoint(changedOp, 2);
      } finally {
        runtime.beforeFreeze = async () => undefined;
      }
    } finally {
      await runtime.dispose(started.instanceId);
      for (const checkpointId of written) await store.delete(sessionId, checkpointId);
    }
  }
}
