import { ActivityFailure, ApplicationFailure, TimeoutFailure } from '@temporalio/workflow';
import { ERROR_CODES, isErrorCode, type ErrorCode } from '../domain/error-codes';
import { RuntimeExitDetails, type FailureInfo } from '../domain/records';

/**
 * The typed, non-retryable failure that handlers and the run end with. A plain Error thrown from workflow code would
 * fail the workflow task instead, and retry it forever.
 */
export function failure(type: ErrorCode, message: string): ApplicationFailure {
  return ApplicationFailure.create({ type, message, nonRetryable: true });
}

export function invalidTransition(reason: string): ApplicationFailure {
  return failure(ERROR_CODES.InvalidTransition, reason);
}

export function closed(): ApplicationFailure {
  return failure(ERROR_CODES.SessionClosed, 'the session has ended: no control can change it');
}

/** The refusal of a control to a session that failed: the failure goes with it, so the caller learns why. */
export function failedSession(sessionId: string, f: FailureInfo | null): ApplicationFailure {
  const why = f ? `${f.type}: ${f.message}` : 'no reason recorded';
  return ApplicationFailure.create({
    type: ERROR_CODES.SessionFailed,
    message: `session ${sessionId} has failed (${why}): no control can change it`,
    nonRetryable: true,
    ...(f ? { details: [f] } : {}),
  });
}

/** How a command that ended a start ended, when the activity's failure says it (RuntimeExitedError on the host). */
export function exitDetailsOf(err: unknown): RuntimeExitDetails | undefined {
  const cause = err instanceof ActivityFailure ? err.cause : err;
  if (!(cause instanceof ApplicationFailure)) return undefined;
  const parsed = RuntimeExitDetails.safeParse(cause.details?.[0]);
  return parsed.success ? parsed.data : undefined;
}

/** The failure type of an activity error, if it is one of ours. */
export function typeOf(err: unknown): ErrorCode | undefined {
  const cause = err instanceof ActivityFailure ? err.cause : err;
  return cause instanceof ApplicationFailure && isErrorCode(cause.type) ? cause.type : undefined;
}

/**
 * The message of an error, or of the failure an activity reported. Workflow code's own: src/errors.ts is Node code and
 * does not unwrap an ActivityFailure.
 */
export function failureMessage(err: unknown): string {
  const cause = err instanceof ActivityFailure && err.cause ? err.cause : err;
  return cause instanceof Error ? cause.message : String(cause);
}

/** An activity that timed out before any worker started it: it did nothing anywhere. */
export function neverStarted(err: unknown): boolean {
  return (
    err instanceof ActivityFailure &&
    err.cause instanceof TimeoutFailure &&
    err.cause.timeoutType === 'SCHEDULE_TO_START'
  );
}

/** Update handlers must throw ApplicationFailures (a plain Error would fail the workflow task, forever). */
export function asFailure(err: unknown, context: string): ApplicationFailure {
  const type = typeOf(err);
  if (err instanceof ApplicationFailure && !(err instanceof ActivityFailure)) return err;
  return ApplicationFailure.create({
    type: type ?? ERROR_CODES.RuntimeFailed,
    message: `${context}: ${failureMessage(err)}`,
    nonRetryable: true,
  });
}
