import { ERROR_CODES, type ErrorCode } from '../domain/error-codes';
import {
  InvalidInputError,
  SessionError,
  SessionFailedError,
  SessionRuntimeError,
  WorkerUnavailableError,
  type LastKnownSession,
  type SessionFailure,
} from '../domain/errors';
import { isError } from '../errors';

/**
 * An RFC 9457 problem document. `code` is the closed error code of the domain (or a gateway one: Unauthorized,
 * Forbidden, NotFound, PayloadTooLarge,
 * UnsupportedMediaType, RateLimited, Unavailable, Internal); never a stack trace or a worker's path.
 */
export interface Problem {
  type: string;
  title: string;
  status: number;
  detail: string;
  code: string;
  sessionId?: string;
  /** zod's issues, path by path, for `InvalidInput`. */
  issues?: unknown[];
  /** Which payload of a codec server request could not be decoded (its place in `payloads`). */
  index?: number;
  /** Why the session failed (SessionFailed), or how the command of a start ended (RuntimeFailed). */
  failure?: SessionFailure;
  /** What Temporal knows of a session no worker answers for (WorkerUnavailable). */
  lastKnown?: LastKnownSession;
}

/** Codes of the gateway itself, beside the domain's. */
export const GATEWAY_CODES = {
  Unauthorized: 'Unauthorized',
  Forbidden: 'Forbidden',
  NotFound: 'NotFound',
  PayloadTooLarge: 'PayloadTooLarge',
  UnsupportedMediaType: 'UnsupportedMediaType',
  RateLimited: 'RateLimited',
  Unavailable: 'Unavailable',
  Internal: 'Internal',
  /** The gateway is not set up for this route: export and import without DS_GATEWAY_ARCHIVES=on (501). */
  NotConfigured: 'NotConfigured',
} as const;

/**
 * HTTP status per domain code. A session's data that cannot be used (corrupt, tampered, incompatible, no key) is
 * 422: the request was understood and nothing is wrong with it, but this session's state cannot serve it.
 */
export const STATUS_OF: Record<ErrorCode, number> = {
  [ERROR_CODES.InvalidInput]: 400,
  [ERROR_CODES.InvalidTransition]: 409,
  [ERROR_CODES.SessionNotFound]: 404,
  [ERROR_CODES.SessionAlreadyExists]: 409,
  [ERROR_CODES.SessionClosed]: 409,
  [ERROR_CODES.SessionFailed]: 409,
  [ERROR_CODES.SnapshotNotFound]: 404,
  [ERROR_CODES.SnapshotCorrupt]: 422,
  [ERROR_CODES.SnapshotIncompatible]: 422,
  [ERROR_CODES.SnapshotTampered]: 422,
  [ERROR_CODES.KeyUnavailable]: 422,
  [ERROR_CODES.RuntimeFailed]: 422,
  [ERROR_CODES.RuntimeLost]: 422,
  [ERROR_CODES.RestoreFailed]: 422,
  [ERROR_CODES.StoreFull]: 507,
  [ERROR_CODES.StoreUnavailable]: 503,
  [ERROR_CODES.Conflict]: 409,
  [ERROR_CODES.Busy]: 503,
  [ERROR_CODES.UnsafeMessageIndex]: 422,
  [ERROR_CODES.IdempotencyKeyReused]: 422,
  [ERROR_CODES.NoEligibleHost]: 422,
  [ERROR_CODES.WorkerUnavailable]: 503,
};

export function problem(status: number, code: string, detail: string, extra: Partial<Problem> = {}): Problem {
  return { type: `urn:durable-sessions:problem:${code}`, title: code, status, detail, code, ...extra };
}

/** What a caller sees of an error: typed ones by their code, Temporal being unreachable as 503, the rest as 500. */
export function problemOf(err: unknown): Problem {
  if (err instanceof SessionError) {
    const extra: Partial<Problem> = err.sessionId ? { sessionId: err.sessionId } : {};
    if (err instanceof InvalidInputError)
      extra.issues = err.issues.map(({ code, path, message, ...rest }) => {
        // A refusal that knows a better input says so in `params` (a rewind's nearest checkpoint index).
        const params = (rest as { params?: Record<string, unknown> }).params;
        return { code, path, message, ...(params ? { params } : {}) };
      });
    if ((err instanceof SessionFailedError || err instanceof SessionRuntimeError) && err.failure)
      extra.failure = err.failure;
    if (err instanceof WorkerUnavailableError && err.lastKnown) extra.lastKnown = err.lastKnown;
    return problem(STATUS_OF[err.code] ?? 500, err.code, err.message, extra);
  }
  if (unreachable(err)) {
    return problem(503, GATEWAY_CODES.Unavailable, 'the Temporal server cannot be reached; try again shortly');
  }
  return problem(500, GATEWAY_CODES.Internal, 'the gateway failed to answer; the error is in its log');
}

/** gRPC UNAVAILABLE (14) or DEADLINE_EXCEEDED (4) from the Temporal client, or a refused connection. */
function unreachable(err: unknown): boolean {
  for (let e: unknown = err, depth = 0; isError(e) && depth < 5; e = (e as { cause?: unknown }).cause, depth++) {
    const code = (e as { code?: unknown }).code;
    if (code === 14 || code === 4 || code === 'ECONNREFUSED') return true;
    if (e.name === 'ServiceError' && /UNAVAILABLE|DEADLINE_EXCEEDED/.test(e.message)) return true;
  }
  return false;
}
