/**
 * Probes inside the engine: the real runtime and store, wrapped (a subclass, a delegate) to timestamp the steps of
 * the one operation in flight. The engine itself is untouched.
 */
import { performance } from 'node:perf_hooks';
import type { Readable } from 'node:stream';
import type { WorkspaceRuntimeSpec } from '../../src/domain/schemas';
import {
  WorkspaceRuntime,
  type CapturedState,
  type ExitInfo,
  type RestoreRequest,
  type RuntimeInstanceInfo,
  type WorkspaceRuntimeOptions,
} from '../../src/runtimes';
import type { WorkspaceInstance } from '../../src/runtimes/workspace/process-group';
import {
  type CheckpointManifest,
  type NewCheckpoint,
  type SnapshotStore,
  type StateSource,
  type StoreProgress,
} from '../../src/snapshots';

export class Probe {
  events = new Map<string, number>();
  progressCalls = 0;
  progressMs = 0;

  reset(): void {
    this.events = new Map();
    this.progressCalls = 0;
    this.progressMs = 0;
  }

  mark(name: string): void {
    this.events.set(name, performance.now());
  }

  /** Wraps a store's progress callback (called once per chunk) to count calls and the time spent in them. */
  wrapProgress(options: StoreProgress, firstByte: string): StoreProgress {
    const inner = options.onProgress;
    return {
      ...options,
      onProgress: (bytesDone) => {
        if (this.progressCalls++ === 0) this.mark(firstByte);
        const t = performance.now();
        try {
          inner?.(bytesDone);
        } finally {
          this.progressMs += performance.now() - t;
        }
      },
    };
  }
}

/** The real runtime, with timestamps around the calls the activities make. */
export class ProbedWorkspaceRuntime extends WorkspaceRuntime {
  constructor(
    options: WorkspaceRuntimeOptions,
    private readonly probe: Probe,
  ) {
    super(options);
  }

  /** Called by restore once the tree is complete (written, modes set, indexed), and by start. */
  protected override async launch(
    ...args: Parameters<WorkspaceRuntime['launch']>
  ): ReturnType<WorkspaceRuntime['launch']> {
    this.probe.mark('restore.launch');
    return super.launch(...args);
  }

  override async capture(instanceId: string): Promise<Readable> {
    this.probe.mark('capture.call');
    const stream = await super.capture(instanceId);
    // 'end' comes after the last packed byte was read.
    stream.once('end', () => this.probe.mark('capture.packed'));
    return stream;
  }

  override async captureState(instanceId: string): Promise<CapturedState> {
    this.probe.mark('capture.call');
    const captured = await super.captureState(instanceId);
    const probe = this.probe;
    return {
      ...captured,
      stored: (checkpointId) => captured.stored(checkpointId),
      close: () => captured.close(),
      pieces: (async function* () {
        yield* captured.pieces;
        probe.mark('capture.packed');
      })(),
    };
  }

  /** Runs just before each capture's freeze (after its pre-copy): what the freeze rounds change "meanwhile". */
  beforeFreeze: () => Promise<void> = async () => undefined;

  /** The freeze itself: SIGSTOP sent (`capture.freeze`), group stopped (`capture.frozen`), SIGCONT (`capture.thawed`). */
  protected override async freezeForCapture(instance: WorkspaceInstance): Promise<() => void> {
    await this.beforeFreeze();
    this.probe.mark('capture.freeze');
    const thaw = await super.freezeForCapture(instance);
    this.probe.mark('capture.frozen');
    let thawed = false;
    return () => {
      thaw();
      if (!thawed) this.probe.mark('capture.thawed');
      thawed = true;
    };
  }

  override async restore(request: RestoreRequest<WorkspaceRuntimeSpec>): Promise<RuntimeInstanceInfo> {
    this.probe.mark('restore.call');
    const info = await super.restore(request);
    this.probe.mark('restore.started');
    return info;
  }

  override async stop(instanceId: string, options: { graceMs?: number } = {}): Promise<ExitInfo> {
    this.probe.mark('stop.call');
    try {
      return await super.stop(instanceId, options);
    } finally {
      this.probe.mark('stop.done');
    }
  }

  override async dispose(instanceId: string): Promise<void> {
    this.probe.mark('dispose.call');
    try {
      await super.dispose(instanceId);
    } finally {
      this.probe.mark('dispose.done');
    }
  }
}

/** The real store, with timestamps and a count of progress callbacks (one per chunk). */
export class ProbedStore implements SnapshotStore {
  constructor(
    private readonly inner: SnapshotStore,
    private readonly probe: Probe,
  ) {}

  async write(
    checkpoint: NewCheckpoint,
    data: Readable | StateSource,
    options: StoreProgress = {},
  ): Promise<CheckpointManifest> {
    this.probe.mark('write.call');
    const manifest = await this.inner.write(checkpoint, data, this.probe.wrapProgress(options, 'write.firstByte'));
    this.probe.mark('write.done');
    return manifest;
  }

  async open(sessionId: string, checkpointId: string, options: StoreProgress = {}) {
    this.probe.mark('open.call');
    const opened = await this.inner.open(sessionId, checkpointId, this.probe.wrapProgress(options, 'open.firstByte'));
    // The verifying stream ends only after size and digest matched: every byte was read and hashed.
    opened.stream.once('end', () => this.probe.mark('open.verified'));
    return opened;
  }

  readManifest(sessionId: string, checkpointId: string): Promise<CheckpointManifest> {
    this.probe.mark('manifest.call');
    return this.inner.readManifest(sessionId, checkpointId);
  }

  verify(sessionId: string, checkpointId: string): Promise<CheckpointManifest> {
    return this.inner.verify(sessionId, checkpointId);
  }

  list(sessionId: string): Promise<CheckpointManifest[]> {
    return this.inner.list(sessionId);
  }

  delete(sessionId: string, checkpointId: string): Promise<void> {
    return this.inner.delete(sessionId, checkpointId);
  }

  claim(sessionId: string, owner: string): Promise<void> {
    return this.inner.claim(sessionId, owner);
  }
}
