import type { Readable } from 'node:stream';
import type { NewCheckpoint, SnapshotStore, StoreProgress } from '../../src/snapshots';

/**
 * A real filesystem store behind a fault: the first `failures` opens throw a transient I/O error, as a
 * store that is briefly unreachable would. Everything else is the real store.
 */
export class FlakyStore implements SnapshotStore {
  opens = 0;
  constructor(
    private readonly inner: SnapshotStore,
    public failures: number,
  ) {}

  async open(sessionId: string, checkpointId: string, options?: StoreProgress) {
    this.opens++;
    if (this.opens <= this.failures) {
      throw Object.assign(new Error(`snapshot store unavailable (simulated outage ${this.opens}/${this.failures})`), {
        code: 'EIO',
      });
    }
    return this.inner.open(sessionId, checkpointId, options);
  }

  write(checkpoint: NewCheckpoint, data: Readable, options?: StoreProgress) {
    return this.inner.write(checkpoint, data, options);
  }
  readManifest(sessionId: string, checkpointId: string) {
    return this.inner.readManifest(sessionId, checkpointId);
  }
  verify(sessionId: string, checkpointId: string) {
    return this.inner.verify(sessionId, checkpointId);
  }
  list(sessionId: string) {
    return this.inner.list(sessionId);
  }
  delete(sessionId: string, checkpointId: string) {
    return this.inner.delete(sessionId, checkpointId);
  }
  claim(sessionId: string, owner: string) {
    return this.inner.claim(sessionId, owner);
  }
}
