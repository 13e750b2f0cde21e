import { ActivityFailure, ApplicationFailure } from '@temporalio/workflow';
import type { z } from 'zod';
import { ERROR_CODES } from '../domain/error-codes';

/** What zod found wrong, one `path: message` per issue, for failures, refused signals and logs. */
export function issueSummary(error: z.ZodError): string {
  return error.issues.map((i) => `${i.path.join('.') || 'input'}: ${i.message}`).join('; ');
}

/**
 * The input as the schema has it, or a non-retryable InvalidInput naming every issue. Update handlers must throw
 * ApplicationFailures: a plain Error (a ZodError) would fail the workflow task, forever.
 */
export function parse<T>(schema: z.ZodType<T>, raw: unknown): T {
  const result = schema.safeParse(raw);
  if (!result.success) {
    throw ApplicationFailure.create({
      type: ERROR_CODES.InvalidInput,
      message: `invalid input: ${issueSummary(result.error)}`,
      details: [result.error.issues],
      nonRetryable: true,
    });
  }
  return result.data;
}

/** The message of an error, or of the failure an activity reported. */
export function messageOf(err: unknown): string {
  const cause = err instanceof ActivityFailure && err.cause ? err.cause : err;
  return cause instanceof Error ? cause.message : String(cause);
}

/** Controls whose every field is optional may be sent with no input at all (`temporal workflow update` without --input). */
export function parseControl<T>(schema: z.ZodType<T>, raw: unknown): T {
  return parse(schema, raw ?? {});
}
