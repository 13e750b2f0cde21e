import type { Readable } from 'node:stream';
import type { CheckpointTrigger } from '../domain/schemas';
import type { StateSource } from './state-source';
import type { TimelineLog } from './timeline-log';

/**
 * The immutable description of one checkpoint, written after its data object is durable. A checkpoint
 * exists for readers exactly when its manifest does.
 */
export interface CheckpointManifest {
  formatVersion: number;
  checkpointId: string;
  sessionId: string;
  sequence: number;
  parentId: string | null;
  runtime: { kind: string; version: string };
  /** Bytes of the state stream. */
  size: number;
  /** `sha256:<hex>`: of the state stream (format 1), of the chunk-id list (format 2, which commits to the content). */
  digest: string;
  /** ISO-8601. */
  createdAt: string;
  label?: string;
  trigger: CheckpointTrigger;
  /** How the checkpoint is protected at rest (format 2); absent for format 1, which is plaintext. */
  encryption?: 'aes-256-gcm' | 'none';
  /** The first checkpoint of a fork: the checkpoint of another session it was made from. */
  forkedFrom?: { sessionId: string; checkpointId: string };
}

export type NewCheckpoint = Omit<CheckpointManifest, 'formatVersion' | 'size' | 'digest' | 'createdAt'>;

export interface StoreProgress {
  /** Called with the bytes written or read so far. Throttling is the caller's business. */
  onProgress?: (bytesDone: number) => void;
  signal?: AbortSignal;
}

export interface SnapshotStore {
  /**
   * The store of another tenant than `default` (this one): its own directory, its tenant bound into every object,
   * so one tenant's checkpoints never verify as another's. Absent on a store that keeps one tenant only.
   */
  forTenant?(tenant: string): SnapshotStore & TimelineLog;

  /**
   * Streams `data` into the store and then publishes the manifest. Memory does not grow with the state's
   * size. If `data` errors, or `signal` aborts, nothing becomes visible. Writing a checkpoint id that exists
   * already is an error (checkpoints are immutable). Whatever happens, `data` is consumed or released (destroyed,
   * or closed for a StateSource): a caller whose capture holds a process frozen need not release it again.
   *
   * `data` may be a {@link StateSource}: runs it names as unchanged since its base checkpoint may be stored without
   * being read (the chunked store reuses the base's chunks); the checkpoint holds the same bytes either way.
   */
  write(checkpoint: NewCheckpoint, data: Readable | StateSource, options?: StoreProgress): Promise<CheckpointManifest>;

  /** Reads and checks a manifest (schema, format version). Throws SnapshotNotFound/Corrupt/IncompatibleError. */
  readManifest(sessionId: string, checkpointId: string): Promise<CheckpointManifest>;

  /**
   * Opens the checkpoint's state for reading after checking its manifest. The stream verifies as it goes (the
   * whole-state digest in format 1, each chunk's authentication in format 2) and fails with a typed snapshot error
   * *before* it ends if anything does not verify, so a consumer that waits for 'end' never accepts bad bytes.
   */
  open(
    sessionId: string,
    checkpointId: string,
    options?: StoreProgress,
  ): Promise<{ manifest: CheckpointManifest; stream: Readable }>;

  /** Reads the whole object and checks it against its manifest; returns the manifest if it verifies. */
  verify(sessionId: string, checkpointId: string): Promise<CheckpointManifest>;

  /** Manifests of a session's checkpoints, in sequence order. Unreadable manifests are skipped. */
  list(sessionId: string): Promise<CheckpointManifest[]>;

  /** Removes a checkpoint (manifest first, so it disappears atomically for readers). Missing is not an error. */
  delete(sessionId: string, checkpointId: string): Promise<void>;

  /**
   * Records, atomically and for good, that `owner` (a workflow's first run id) owns `sessionId`: session ids are
   * never reused. Idempotent for the same owner (a retried activity). Throws SessionIdTakenError when another owner
   * claimed it, or when the store already holds anything of the session without a claim (checkpoints, a data key, a
   * fork's lineage pointer: a session from before claims, or made by `fork`). Claims survive deletes, gc and shred.
   */
  claim(sessionId: string, owner: string): Promise<void>;
}
