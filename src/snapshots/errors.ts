import { ERROR_CODES, type ErrorCode } from '../domain/error-codes';
import type { VerificationStatus } from '../domain/schemas';

/**
 * Every error the snapshot layer throws at its callers. The `SnapshotError`s carry a wire `code` (the failure type
 * activities raise); the configuration errors are raised at start-up and never cross the wire.
 */

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

/** Why an object or a wrapped key could not be opened. */
export type CryptoFailureReason =
  /** Authentication failed with the right key, or the header does not name what the reader expected. */
  | 'tampered'
  /** The key supplied is not the one the object or wrapped key was sealed under (or its commitment was altered). */
  | 'wrong-key'
  /** The key needed is not available (never configured, removed, or crypto-shredded). */
  | 'missing-key'
  /** The object is shorter than its header says. */
  | 'truncated'
  /** The bytes are not a sealed object (bad magic, unparseable header, trailing bytes, bad wrapped-key JSON). */
  | 'malformed'
  /** Plaintext mode only: the SHA-256 does not match. Corruption, not proof of tampering (see the module doc). */
  | 'corrupt';

/** What the errors below know about where they happened; empty strings on SnapshotError mean "not known here". */
export interface CryptoErrorContext {
  sessionId?: string;
  checkpointId?: string;
  objectId?: string;
}

/**
 * Thrown when a sealed object or a wrapped data key fails authentication or its integrity checks, or is not the
 * object the reader asked for. No plaintext is ever returned alongside it. `reason` says which check failed.
 */
export class SnapshotTamperedError extends SnapshotError {
  /** Damage (truncated, malformed, a plaintext digest mismatch) is SnapshotCorrupt; failed authentication is tampering. */
  readonly code: ErrorCode;
  readonly objectId: string | undefined;

  constructor(
    message: string,
    readonly reason: Exclude<CryptoFailureReason, 'missing-key'>,
    context: CryptoErrorContext = {},
    options?: { cause?: unknown },
  ) {
    super(message, context.sessionId ?? '', context.checkpointId ?? '', options);
    this.code =
      reason === 'tampered' || reason === 'wrong-key' ? ERROR_CODES.SnapshotTampered : ERROR_CODES.SnapshotCorrupt;
    this.objectId = context.objectId;
  }
}

/**
 * Thrown when a master key or a data key needed to open an object is not available: not configured on this
 * worker, removed from the keyring, or deliberately destroyed (crypto-shredding). Retrying does not help.
 */
export class KeyUnavailableError extends SnapshotError {
  readonly code: ErrorCode = ERROR_CODES.KeyUnavailable;
  readonly reason = 'missing-key' as const;

  constructor(
    message: string,
    readonly keyId: string,
    readonly keyKind: 'master' | 'data',
    context: CryptoErrorContext = {},
    options?: { cause?: unknown },
  ) {
    super(message, context.sessionId ?? '', context.checkpointId ?? '', options);
  }
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

/**
 * Thrown when master keys cannot be loaded: a bad key id, a key that is not 32 bytes of base64 (or raw), a
 * duplicate id, an unknown primary, a key file others can read. Names the key id or file, never key material.
 * Raised at worker start-up, it never crosses the wire.
 */
export class KeyringConfigError extends Error {
  constructor(
    message: string,
    readonly keyId?: string,
  ) {
    super(message);
    this.name = 'KeyringConfigError';
  }
}

/** Thrown when encryption is on and no master key is configured: the worker never falls back to plaintext. */
export class MissingMasterKeyError extends Error {
  constructor() {
    super(
      'snapshot encryption is on but no master key is configured: set DS_MASTER_KEYS (id:base64,...) or ' +
        'DS_MASTER_KEY_DIR (a directory of <id>.key files), or DS_SNAPSHOT_ENCRYPTION=none to store plaintext',
    );
    this.name = 'MissingMasterKeyError';
  }
}
