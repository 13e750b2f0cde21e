import { ApplicationFailure } from '@temporalio/workflow';
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

/** Controls whose every field is optional may be sent with no input at all (`temporal workflow update` without --input). */
export function parseControl<T>(schema: z.ZodType<T>, raw: unknown): T {
  return parse(schema, raw ?? {});
}
