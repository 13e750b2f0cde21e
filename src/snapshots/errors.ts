import { ERROR_CODES } from '../domain/error-codes';
import { DurableSessionsError, SnapshotError } from '../domain/errors';
import type { VerificationStatus } from '../domain/schemas';

/**
 * Every error the snapshot layer throws at its callers. The `SnapshotError`s carry a wire `code` (the failure type
 * activities raise); the configuration errors are raised at start-up and never cross the wire.
 */

export {
  SnapshotError,
  SnapshotNotFoundError,
  SnapshotCorruptError,
  SnapshotIncompatibleError,
  StoreFullError,
  StoreUnavailableError,
  SnapshotTamperedError,
  KeyUnavailableError,
  type CryptoFailureReason,
  type CryptoErrorContext,
} from '../domain/errors';

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
  constructor(message: string, sessionId: string, options?: { cause?: unknown }) {
    super(ERROR_CODES.SessionAlreadyExists, message, sessionId, '', options);
  }
}

/**
 * Thrown when a timeline append names an index the session's timeline holds already with other content. Nothing of
 * the append is written: a retried append of the same entries is a no-op, a different entry at a stored index a bug.
 */
export class TimelineConflictError extends SnapshotError {
  constructor(
    message: string,
    sessionId: string,
    /** The index that is stored with other content. */
    readonly index: number,
    options?: { cause?: unknown },
  ) {
    super(ERROR_CODES.Conflict, message, sessionId, '', options);
  }
}

/**
 * Thrown when an object of a checkpoint cannot be read for a reason that is not the checkpoint's fault (this worker
 * lacks the codec another one wrote with, an I/O error while opening). Retryable: a restore is not failed over to an
 * older checkpoint, nor the session failed, because of this worker.
 */
export class SnapshotReadError extends DurableSessionsError {
  readonly code = 'SnapshotRead';
  override readonly retryable = true;
  constructor(
    message: string,
    readonly sessionId: string,
    readonly checkpointId: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/**
 * Thrown when master keys cannot be loaded: a bad key id, a key that is not 32 bytes of base64 (or raw), a
 * duplicate id, an unknown primary, a key file others can read. Names the key id or file, never key material.
 * Raised at worker start-up, it never crosses the wire.
 */
export class KeyringConfigError extends DurableSessionsError {
  readonly code = 'InvalidConfig';
  constructor(
    message: string,
    readonly keyId?: string,
  ) {
    super(message);
  }
}

/** Thrown when encryption is on and no master key is configured: the worker never falls back to plaintext. */
export class MissingMasterKeyError extends DurableSessionsError {
  readonly code = 'InvalidConfig';
  constructor() {
    super(
      'snapshot encryption is on but no master key is configured: set DS_MASTER_KEYS (id:base64,...) or ' +
        'DS_MASTER_KEY_DIR (a directory of <id>.key files), or DS_SNAPSHOT_ENCRYPTION=none to store plaintext',
    );
  }
}
