/**
 * The engine's data path without Temporal: the same runtime and store classes called directly, in this process,
 * on a workspace seeded the same way. What the engine costs by itself, and so what Temporal and the activity
 * around it add.
 */
import type { WorkspaceRuntime } from '../../src/runtimes';
import type { SnapshotStore } from '../../src/snapshots';
import type { Recorder } from './records';
import { seedWorkspace, WORKSPACE_SPEC, type Seed } from './workload';

export interface DirectRoundContext {
  runtime: WorkspaceRuntime;
  store: SnapshotStore;
  recorder: Recorder;
  seed: Seed;
}

/** Capture → store.write, store.open drained, then store.open → restore, each timed as one operation. */
export async function directRound(ctx: DirectRoundContext, round: number): Promise<void> {
  const { runtime, store, recorder, seed } = ctx;
  const sessionId = `direct-${round}`;
  const spec = WORKSPACE_SPEC;
  const started = await runtime.start({ sessionId, instanceId: `${sessionId}-a`, spec });
  try {
    seedWorkspace(seed, started.location);
    const checkpoint = {
      checkpointId: `${sessionId}-1`,
      sessionId,
      sequence: 1,
      parentId: null,
      runtime: { kind: runtime.kind, version: runtime.version },
      trigger: 'manual' as const,
    };
    const manifest = await recorder.time(
      'direct-capture',
      round,
      async () => store.write(checkpoint, await runtime.capture(started.instanceId)),
      (written) => written.size,
    );
    // The engine's open alone, drained without extracting: the part of a restore the runtime cannot speed up.
    await recorder.time(
      'direct-open',
      round,
      async () => {
        const { stream } = await store.open(sessionId, checkpoint.checkpointId);
        for await (const piece of stream) void piece;
      },
      () => manifest.size,
    );
    const restored = await recorder.time(
      'direct-restore',
      round,
      async () => {
        const { stream } = await store.open(sessionId, checkpoint.checkpointId);
        return runtime.restore({
          sessionId,
          instanceId: `${sessionId}-b`,
          spec,
          state: stream,
          checkpointId: checkpoint.checkpointId,
        });
      },
      () => manifest.size,
    );
    await runtime.dispose(restored.instanceId);
    await store.delete(sessionId, checkpoint.checkpointId);
  } finally {
    await runtime.dispose(started.instanceId);
  }
}
