import { isErrorCode, type ErrorCode } from '../domain/error-codes';
import { DurableSessionsError, isError, messageOf } from '../errors';
import type { CommandName } from './commands';

/**
 * Codes of the CLI's own errors, beside the session error codes (`ERROR_CODES`) in `--json` errors. They never cross
 * the wire: they say what went wrong around a session, not in it.
 */
export const CLI_ERROR_CODES = {
  /** The command line does not match the command (exit code 2). */
  Usage: 'Usage',
  /** The Temporal frontend could not be reached. */
  Unavailable: 'Unavailable',
  /** An environment variable or master key file has a value the CLI cannot use. */
  InvalidConfig: 'InvalidConfig',
  /** Anything untyped (a file the store could not read, say): the message says what. */
  Failed: 'Failed',
} as const;

export type CliErrorCode = (typeof CLI_ERROR_CODES)[keyof typeof CLI_ERROR_CODES];

/** Thrown by the CLI for what went wrong around a session: the base of its own errors, `code` from CLI_ERROR_CODES. */
export class CliError extends DurableSessionsError {
  /** For InvalidConfig: zod's issues, one per environment variable. */
  readonly issues?: readonly unknown[];

  constructor(
    readonly code: CliErrorCode,
    message: string,
    options?: { cause?: unknown; issues?: readonly unknown[] },
  ) {
    super(message, options);
    this.issues = options?.issues;
  }
}

/** Thrown when the command line does not match the command's declaration; the CLI exits 2. */
export class UsageError extends CliError {
  constructor(
    message: string,
    /** The command whose usage to show with the error, when it is known. */
    readonly command?: CommandName,
  ) {
    super(CLI_ERROR_CODES.Usage, message);
  }
}

/** Thrown when the Temporal frontend at `address` does not answer. */
export class TemporalUnavailableError extends CliError {
  constructor(
    readonly address: string,
    options: { cause: unknown },
  ) {
    super(CLI_ERROR_CODES.Unavailable, `cannot reach Temporal at ${address} (${messageOf(options.cause)})`, options);
  }
}

/** Errors of the client and of the snapshot store carry a session error code (and usually the session id). */
export function sessionCodeOf(err: unknown): ErrorCode | undefined {
  const code = isError(err) ? (err as { code?: unknown }).code : undefined;
  return isErrorCode(code) ? code : undefined;
}
