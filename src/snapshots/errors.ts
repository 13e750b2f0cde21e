import { ERROR_CODES, type ErrorCode } from '../domain/error-codes';
import type { VerificationStatus } from '../domain/schemas';

/** Base of the snapshot store's typed errors. `code` is the wire failure type the activities raise. */
export abstract class SnapshotError extends Error {
  abstract readonly code: ErrorCode;
  constructor(
    message: string,
    readonly sessionId: string,
    readonly checkpointId: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** Thrown when a checkpoint's manifest or data object does not exist in the store. */
export class SnapshotNotFoundError extends SnapshotError {
  readonly code = ERROR_CODES.SnapshotNotFound;
}

/** Thrown when a checkpoint's bytes do not match its manifest (digest, size) or the manifest is unreadable. */
export class SnapshotCorruptError extends SnapshotError {
  readonly code = ERROR_CODES.SnapshotCorrupt;
}

/** Thrown when a checkpoint was written in a format or by a runtime version this reader cannot restore. */
export class SnapshotIncompatibleError extends SnapshotError {
  readonly code = ERROR_CODES.SnapshotIncompatible;
}

/**
 * Thrown when the store cannot take a write: no space, quota exhausted or a read-only filesystem (ENOSPC, EDQUOT,
 * EROFS). Nothing of the checkpoint is visible; retrying will not help until an operator makes room.
 */
export class StoreFullError extends SnapshotError {
  readonly code = ERROR_CODES.StoreFull;
}

/** What a snapshot error means for a verification report (store `verify` and the session's `verify`). */
export function verificationStatusOf(err: SnapshotError): Exclude<VerificationStatus, 'ok'> {
  switch (err.code) {
    case ERROR_CODES.SnapshotNotFound:
      return 'missing';
    case ERROR_CODES.SnapshotTampered:
      return 'tampered';
    case ERROR_CODES.SnapshotIncompatible:
      return 'incompatible';
    case ERROR_CODES.KeyUnavailable:
      return 'key-unavailable';
    default:
      return 'corrupt';
  }
}

/**
 * Thrown when a session id cannot be claimed: another owner claimed it, or the store already holds something of the
 * session from before claims (checkpoints, a data key, a fork's lineage pointer). Session ids are never reused.
 */
export class SessionIdTakenError extends SnapshotError {
  readonly code = ERROR_CODES.SessionAlreadyExists;
  constructor(message: string, sessionId: string, options?: { cause?: unknown }) {
    super(message, sessionId, '', options);
  }
}
