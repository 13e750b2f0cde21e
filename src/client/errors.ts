import type { z } from 'zod';
import { ERROR_CODES, type ErrorCode } from '../domain/error-codes';
import { DurableSessionsError } from '../errors';

/** Thrown by the SessionClient for a session: the base of its errors. `code` is the wire failure type. */
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

/** Builds the typed error for a wire failure type. */
export function sessionErrorFor(
  code: ErrorCode,
  message: string,
  sessionId: string,
  cause?: unknown,
  details?: unknown,
): SessionError {
  const options = { cause };
  switch (code) {
    case ERROR_CODES.InvalidInput:
      return new InvalidInputError(message, sessionId, Array.isArray(details) ? details : [], options);
    case ERROR_CODES.InvalidTransition:
      return new InvalidTransitionError(message, sessionId, options);
    case ERROR_CODES.SessionNotFound:
      return new SessionNotFoundError(message, sessionId, options);
    case ERROR_CODES.SessionAlreadyExists:
      return new SessionAlreadyExistsError(message, sessionId, options);
    case ERROR_CODES.SessionClosed:
      return new SessionClosedError(message, sessionId, options);
    case ERROR_CODES.StoreFull:
      return new StoreFullError(message, sessionId, options);
    case ERROR_CODES.SnapshotNotFound:
      return new SnapshotNotFoundError(message, sessionId, options);
    case ERROR_CODES.SnapshotCorrupt:
      return new SnapshotCorruptError(message, sessionId, options);
    case ERROR_CODES.SnapshotIncompatible:
      return new SnapshotIncompatibleError(message, sessionId, options);
    case ERROR_CODES.SnapshotTampered:
      return new SnapshotTamperedError(message, sessionId, options);
    case ERROR_CODES.KeyUnavailable:
      return new KeyUnavailableError(message, sessionId, options);
    case ERROR_CODES.RestoreFailed:
      return new RestoreFailedError(message, sessionId, options);
    case ERROR_CODES.RuntimeFailed:
    case ERROR_CODES.RuntimeLost:
      return new SessionRuntimeError(code, message, sessionId, options);
  }
}
