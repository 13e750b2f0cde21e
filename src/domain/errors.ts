/**
 * The error classes of the session model, one per failure code, shared by the client and the layers that raise
 * them. A layer may raise a more specific class of its own for a code (SessionIdTakenError, RuntimeNotFoundError,
 * ArchiveRejectedError); the client raises these. Each has a one-line "Thrown when…" doc, a closed `code`, the ids it
 * concerns and `{ cause }`; whether a retry may help is said by `retryable`, never implied by throwing a plain `Error`.
 */
import type { z } from 'zod';
import { ERROR_CODES, type ErrorCode } from './error-codes';

const tagOf = (className: string): symbol => Symbol.for(`durable-sessions.error.${className}`);

/**
 * Base of the project's error classes. `instanceof` is symbol-based, like the Temporal SDK's errors: it holds when
 * the class was loaded more than once (jest's module registries, a bundled copy beside an installed one), where a
 * prototype check would say no. It goes by class name, so names are unique across the project (a test checks).
 */
export abstract class DurableSessionsError extends Error {
  /** A stable, machine-readable code from the layer's closed set. */
  abstract readonly code: string;
  /** True when trying again may succeed; permanent errors say false. */
  readonly retryable: boolean = false;

  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
    for (let c: unknown = new.target; typeof c === 'function' && c !== Error; c = Object.getPrototypeOf(c)) {
      Object.defineProperty(this, tagOf((c as { name: string }).name), { value: true });
    }
  }

  static override [Symbol.hasInstance](value: unknown): boolean {
    return typeof value === 'object' && value !== null && (value as Record<symbol, unknown>)[tagOf(this.name)] === true;
  }
}

/** Thrown for a session (by the client, or by a layer on its behalf): the base of the session errors. `code` is the wire failure type. */
export class SessionError extends DurableSessionsError {
  constructor(
    readonly code: ErrorCode,
    message: string,
    readonly sessionId: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/** Thrown when the input does not match its schema; `issues` are zod's, path by path. Nothing was sent. */
export class InvalidInputError extends SessionError {
  constructor(
    message: string,
    sessionId: string,
    readonly issues: readonly z.core.$ZodIssue[],
    options?: { cause?: unknown },
  ) {
    super(ERROR_CODES.InvalidInput, message, sessionId, options);
  }
}

/** What Temporal knows of a session without a worker: its execution and the search attributes it last upserted. */
export interface LastKnownSession {
  /** The workflow execution's status (`RUNNING`, `COMPLETED`, `FAILED`, …). */
  workflowStatus: string;
  /** The phase the session last published (`SessionState`), if any. */
  phase: string | null;
  runtimeKind: string | null;
  /** The task queue of the worker host its runtime lived on (`SessionHost`). */
  host: string | null;
  checkpointCount: number | null;
  headCheckpointId: string | null;
  lastCheckpointAt: string | null;
  failureCode: string | null;
  /** The task queue whose workers run the session, and the newest poll any worker made of it (null: none known). */
  taskQueue: string;
  lastPollAt: string | null;
}

/**
 * Thrown when no worker answers for the session within the client's bound (`statusTimeoutMs`): none polls its task
 * queue, or none that does answers. `lastKnown` is what Temporal itself knows. Retryable: a worker may come back.
 */
export class WorkerUnavailableError extends SessionError {
  override readonly retryable = true;
  constructor(
    message: string,
    sessionId: string,
    readonly lastKnown: LastKnownSession | null,
    options?: { cause?: unknown },
  ) {
    super(ERROR_CODES.WorkerUnavailable, message, sessionId, options);
  }
}

/** Thrown when a control is not legal in the session's state (pause while paused, anything after stop). */
export class InvalidTransitionError extends SessionError {
  constructor(message: string, sessionId: string, options?: { cause?: unknown }) {
    super(ERROR_CODES.InvalidTransition, message, sessionId, options);
  }
}

/** Thrown when no session with that id exists. */
export class SessionNotFoundError extends SessionError {
  constructor(message: string, sessionId: string, options?: { cause?: unknown }) {
    super(ERROR_CODES.SessionNotFound, message, sessionId, options);
  }
}

/** Thrown when starting a session whose id is (or was) in use. */
export class SessionAlreadyExistsError extends SessionError {
  constructor(message: string, sessionId: string, options?: { cause?: unknown }) {
    super(ERROR_CODES.SessionAlreadyExists, message, sessionId, options);
  }
}

/** Thrown when a control reaches a session that has ended (stopped, or failed for good). */
export class SessionClosedError extends SessionError {
  constructor(message: string, sessionId: string, options?: { cause?: unknown }) {
    super(ERROR_CODES.SessionClosed, message, sessionId, options);
  }
}

/**
 * Thrown when a control reaches a session that has failed: `failure` is why it failed (its code and message and, for
 * a command that exited, its exit code, last lines of output and where its directory and log are kept).
 */
export class SessionFailedError extends SessionError {
  constructor(
    message: string,
    sessionId: string,
    readonly failure: SessionFailure | undefined,
    options?: { cause?: unknown },
  ) {
    super(ERROR_CODES.SessionFailed, message, sessionId, options);
  }
}

/** Thrown when a control names a stale head (`ifHead`, `ifIndex`) or conflicts with one in flight. Nothing changed. */
export class ConflictError extends SessionError {
  constructor(message: string, sessionId: string, options?: { cause?: unknown }) {
    super(ERROR_CODES.Conflict, message, sessionId, options);
  }
}

/** Thrown when an idempotency key is sent again with other input than it was first used with; nothing was done. */
export class IdempotencyKeyReusedError extends SessionError {
  constructor(message: string, sessionId: string, options?: { cause?: unknown }) {
    super(ERROR_CODES.IdempotencyKeyReused, message, sessionId, options);
  }
}

/** Thrown when the session is handing over to its next run; nothing changed, and a retry soon succeeds. */
export class SessionBusyError extends SessionError {
  override readonly retryable = true;
  constructor(message: string, sessionId: string, options?: { cause?: unknown }) {
    super(ERROR_CODES.Busy, message, sessionId, options);
  }
}

/** Thrown when a message index would split a tool call from its result; `nearestSafe` is the closest index that does not. */
export class UnsafeMessageIndexError extends SessionError {
  constructor(
    message: string,
    sessionId: string,
    readonly nearestSafe: number | undefined,
    options?: { cause?: unknown },
  ) {
    super(ERROR_CODES.UnsafeMessageIndex, message, sessionId, options);
  }
}

/** Thrown when no live worker host satisfies the session's placement (`placement.host`, `placement.workerLabels`). */
export class NoEligibleHostError extends SessionError {
  constructor(message: string, sessionId: string, options?: { cause?: unknown }) {
    super(ERROR_CODES.NoEligibleHost, message, sessionId, options);
  }
}

/** Thrown when a resume could restore no checkpoint (the message lists each one tried and why). */
export class RestoreFailedError extends SessionError {
  constructor(message: string, sessionId: string, options?: { cause?: unknown }) {
    super(ERROR_CODES.RestoreFailed, message, sessionId, options);
  }
}

/**
 * Why a session failed, as status shows it and SessionFailedError and SessionRuntimeError carry it. For a command that
 * exited: its exit code or signal, the last lines of its output, and its directory and log on its host, kept until
 * `keptUntil` (DS_FAILED_RETENTION_MS).
 */
export interface SessionFailure {
  type: string;
  message: string;
  at?: string;
  exitCode?: number | null;
  signal?: string | null;
  outputTail?: string[];
  location?: string;
  output?: string;
  host?: string;
  keptUntil?: string;
}

/**
 * Thrown when the session's runtime failed to start, capture or stop, or was lost with its host. A command that
 * exited within its settle window carries `failure`: exit code, last lines of output, where its directory is kept.
 */
export class SessionRuntimeError extends SessionError {
  constructor(
    code: typeof ERROR_CODES.RuntimeFailed | typeof ERROR_CODES.RuntimeLost,
    message: string,
    sessionId: string,
    options?: { cause?: unknown },
    readonly failure?: SessionFailure,
  ) {
    super(code, message, sessionId, options);
  }
}

/**
 * Thrown for one checkpoint of a session, or one object of the snapshot store: the base of the snapshot errors,
 * raised by the store and, for a failure of that type, by the client. An empty `checkpointId` means "not known here".
 */
export abstract class SnapshotError extends SessionError {
  constructor(
    code: ErrorCode,
    message: string,
    sessionId: string,
    readonly checkpointId: string,
    options?: { cause?: unknown },
  ) {
    super(code, message, sessionId, options);
  }
}

/** Thrown when a checkpoint's manifest or data object does not exist in the store. */
export class SnapshotNotFoundError extends SnapshotError {
  constructor(message: string, sessionId: string, checkpointId = '', options?: { cause?: unknown }) {
    super(ERROR_CODES.SnapshotNotFound, message, sessionId, checkpointId, options);
  }
}

/** Thrown when a checkpoint's bytes do not match its manifest (digest, size) or the manifest is unreadable. */
export class SnapshotCorruptError extends SnapshotError {
  constructor(message: string, sessionId: string, checkpointId = '', options?: { cause?: unknown }) {
    super(ERROR_CODES.SnapshotCorrupt, message, sessionId, checkpointId, options);
  }
}

/** Thrown when a checkpoint was written in a format or by a runtime version this reader cannot restore. */
export class SnapshotIncompatibleError extends SnapshotError {
  constructor(message: string, sessionId: string, checkpointId = '', options?: { cause?: unknown }) {
    super(ERROR_CODES.SnapshotIncompatible, message, sessionId, checkpointId, options);
  }
}

/**
 * Thrown when the store cannot take a write: no space, quota exhausted or a read-only filesystem (ENOSPC, EDQUOT,
 * EROFS). Nothing of the checkpoint is visible; retrying will not help until an operator makes room.
 */
export class StoreFullError extends SnapshotError {
  constructor(message: string, sessionId: string, checkpointId = '', options?: { cause?: unknown }) {
    super(ERROR_CODES.StoreFull, message, sessionId, checkpointId, options);
  }
}

/**
 * Thrown when the snapshot store did not answer, or answered only with errors a retry may cure (5xx, throttling, a
 * dropped connection), for longer than its backend's retry bound. Nothing half-written is visible; trying again later
 * may succeed.
 */
export class StoreUnavailableError extends SnapshotError {
  override readonly retryable = true;
  constructor(message: string, sessionId = '', checkpointId = '', options?: { cause?: unknown }) {
    super(ERROR_CODES.StoreUnavailable, message, sessionId, checkpointId, options);
  }
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
  readonly objectId: string | undefined;

  constructor(
    message: string,
    readonly reason: Exclude<CryptoFailureReason, 'missing-key'>,
    context: CryptoErrorContext = {},
    options?: { cause?: unknown },
  ) {
    // Damage (truncated, malformed, a plaintext digest mismatch) is SnapshotCorrupt; failed authentication is tampering.
    const code =
      reason === 'tampered' || reason === 'wrong-key' ? ERROR_CODES.SnapshotTampered : ERROR_CODES.SnapshotCorrupt;
    super(code, message, context.sessionId ?? '', context.checkpointId ?? '', options);
    this.objectId = context.objectId;
  }
}

/**
 * Thrown when a master key or a data key needed to open an object is not available: not configured on this
 * worker, removed from the keyring, or deliberately destroyed (crypto-shredding). Retrying does not help.
 */
export class KeyUnavailableError extends SnapshotError {
  readonly reason = 'missing-key' as const;

  constructor(
    message: string,
    /** The missing key's id; empty when the raiser does not know it (the client, from a failure). */
    readonly keyId: string,
    readonly keyKind: 'master' | 'data' | undefined,
    context: CryptoErrorContext = {},
    options?: { cause?: unknown },
  ) {
    super(ERROR_CODES.KeyUnavailable, message, context.sessionId ?? '', context.checkpointId ?? '', options);
  }
}
