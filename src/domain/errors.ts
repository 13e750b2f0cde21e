/**
 * The error classes of the session model, one per failure code, shared by the client and the layers that raise
 * them. Each has a one-line "Thrown when…" doc, a closed `code`, the ids it concerns and `{ cause }`; whether a
 * retry may help is said by `retryable`, never implied by throwing a plain `Error`.
 */
import type { z } from 'zod';
import { ERROR_CODES, type ErrorCode } from './error-codes';

const tagOf = (className: string): symbol => Symbol.for(`durable-sessions.error.${className}`);

/**
 * Base of the project's error classes. `instanceof` is symbol-based, like the Temporal SDK's errors: it holds when
 * the class was loaded more than once (jest's module registries, a bundled copy beside an installed one), where a
 * prototype check would say no.
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

/** Thrown when the snapshot store has no room or is read-only: the checkpoint was not written, nothing changed. */
export class StoreFullError extends SessionError {
  constructor(message: string, sessionId: string, options?: { cause?: unknown }) {
    super(ERROR_CODES.StoreFull, message, sessionId, options);
  }
}

/** Thrown when a checkpoint's objects are missing from the snapshot store. */
export class SnapshotNotFoundError extends SessionError {
  constructor(message: string, sessionId: string, options?: { cause?: unknown }) {
    super(ERROR_CODES.SnapshotNotFound, message, sessionId, options);
  }
}

/** Thrown when a checkpoint's bytes do not verify against its manifest. */
export class SnapshotCorruptError extends SessionError {
  constructor(message: string, sessionId: string, options?: { cause?: unknown }) {
    super(ERROR_CODES.SnapshotCorrupt, message, sessionId, options);
  }
}

/** Thrown when a checkpoint's format or runtime version cannot be restored by the workers. */
export class SnapshotIncompatibleError extends SessionError {
  constructor(message: string, sessionId: string, options?: { cause?: unknown }) {
    super(ERROR_CODES.SnapshotIncompatible, message, sessionId, options);
  }
}

/** Thrown when a checkpoint failed authentication: altered, swapped between sessions or checkpoints, or forged. */
export class SnapshotTamperedError extends SessionError {
  constructor(message: string, sessionId: string, options?: { cause?: unknown }) {
    super(ERROR_CODES.SnapshotTampered, message, sessionId, options);
  }
}

/** Thrown when a key needed to read a checkpoint is not available (not configured, or destroyed on purpose). */
export class KeyUnavailableError extends SessionError {
  constructor(message: string, sessionId: string, options?: { cause?: unknown }) {
    super(ERROR_CODES.KeyUnavailable, message, sessionId, options);
  }
}

/** Thrown when a resume could restore no checkpoint (the message lists each one tried and why). */
export class RestoreFailedError extends SessionError {
  constructor(message: string, sessionId: string, options?: { cause?: unknown }) {
    super(ERROR_CODES.RestoreFailed, message, sessionId, options);
  }
}

/** Thrown when the session's runtime failed to start, capture or stop, or was lost with its host. */
export class SessionRuntimeError extends SessionError {
  constructor(
    code: typeof ERROR_CODES.RuntimeFailed | typeof ERROR_CODES.RuntimeLost,
    message: string,
    sessionId: string,
    options?: { cause?: unknown },
  ) {
    super(code, message, sessionId, options);
  }
}
