import { ERROR_CODES, type ErrorCode } from '../domain/error-codes';
import {
  type SessionError,
  InvalidInputError,
  InvalidTransitionError,
  SessionNotFoundError,
  SessionAlreadyExistsError,
  SessionClosedError,
  SessionFailedError,
  type SessionFailure,
  type LastKnownSession,
  StoreFullError,
  StoreUnavailableError,
  SnapshotNotFoundError,
  SnapshotCorruptError,
  SnapshotIncompatibleError,
  SnapshotTamperedError,
  KeyUnavailableError,
  RestoreFailedError,
  NoEligibleHostError,
  SessionRuntimeError,
  ConflictError,
  UnsafeMessageIndexError,
  SessionBusyError,
  IdempotencyKeyReusedError,
  WorkerUnavailableError,
} from '../domain/errors';

/** The client throws the session model's error classes; they are exported from here for callers. */
export * from '../domain/errors';

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
    case ERROR_CODES.SessionFailed:
      return new SessionFailedError(message, sessionId, failureOf(details), options);
    case ERROR_CODES.StoreFull:
      return new StoreFullError(message, sessionId, '', options);
    case ERROR_CODES.StoreUnavailable:
      return new StoreUnavailableError(message, sessionId, '', options);
    case ERROR_CODES.SnapshotNotFound:
      return new SnapshotNotFoundError(message, sessionId, '', options);
    case ERROR_CODES.SnapshotCorrupt:
      return new SnapshotCorruptError(message, sessionId, '', options);
    case ERROR_CODES.SnapshotIncompatible:
      return new SnapshotIncompatibleError(message, sessionId, '', options);
    case ERROR_CODES.SnapshotTampered:
      return new SnapshotTamperedError(message, 'tampered', { sessionId }, options);
    case ERROR_CODES.KeyUnavailable:
      return new KeyUnavailableError(message, '', undefined, { sessionId }, options);
    case ERROR_CODES.Busy:
      return new SessionBusyError(message, sessionId, options);
    case ERROR_CODES.Conflict:
      return new ConflictError(message, sessionId, options);
    case ERROR_CODES.IdempotencyKeyReused:
      return new IdempotencyKeyReusedError(message, sessionId, options);
    case ERROR_CODES.UnsafeMessageIndex:
      return new UnsafeMessageIndexError(message, sessionId, nearestSafeOf(details), options);
    case ERROR_CODES.RestoreFailed:
      return new RestoreFailedError(message, sessionId, options);
    case ERROR_CODES.NoEligibleHost:
      return new NoEligibleHostError(message, sessionId, options);
    case ERROR_CODES.WorkerUnavailable:
      return new WorkerUnavailableError(message, sessionId, lastKnownOf(details), options);
    case ERROR_CODES.RuntimeFailed:
    case ERROR_CODES.RuntimeLost:
      return new SessionRuntimeError(code, message, sessionId, options, failureOf(details, code, message));
  }
}

/**
 * The session failure a failure's details carry: the failure itself (SessionFailed, a failed run's result), or how a
 * command ended (a start that failed within its settle window). Undefined when they carry neither.
 */
export function failureOf(details: unknown, type?: string, message?: string): SessionFailure | undefined {
  if (typeof details !== 'object' || details === null || Array.isArray(details)) return undefined;
  const d = details as Partial<SessionFailure>;
  if (typeof d.type === 'string' && typeof d.message === 'string') return d as SessionFailure;
  if (type === undefined || message === undefined || !('exitCode' in d || 'signal' in d)) return undefined;
  return { type, message, ...d };
}

function nearestSafeOf(details: unknown): number | undefined {
  const n = (details as { nearestSafe?: unknown } | undefined)?.nearestSafe;
  return typeof n === 'number' ? n : undefined;
}

/** What Temporal knew of the session, as a WorkerUnavailable failure's details carry it (the gateway's problem). */
function lastKnownOf(details: unknown): LastKnownSession | null {
  const first: unknown = Array.isArray(details) ? details[0] : details;
  return typeof first === 'object' && first !== null && 'workflowStatus' in first ? (first as LastKnownSession) : null;
}
