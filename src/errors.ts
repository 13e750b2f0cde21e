/**
 * The one place that recognises errors across realms, beside the shared error base (`src/domain/errors.ts`).
 */
import { types } from 'node:util';

export { DurableSessionsError } from './domain/errors';

/** Node's own errors (fs, child_process) carry a string `code`; this checks it across realms. */
export function isErrnoError(error: unknown, ...codes: string[]): error is NodeJS.ErrnoException {
  const code: unknown = (error as { code?: unknown } | null)?.code;
  return isError(error) && typeof code === 'string' && (codes.length === 0 || codes.includes(code));
}

/** An Error from any realm: `instanceof Error` is false for one made in another vm context (jest) or by Node. */
export function isError(value: unknown): value is Error {
  return value instanceof Error || types.isNativeError(value);
}

/** The error itself when it is one, else an Error whose message is the thrown value. */
export function toError(value: unknown): Error {
  return isError(value) ? value : new Error(String(value));
}

/** The message of anything thrown. */
export function messageOf(value: unknown): string {
  return isError(value) ? value.message : String(value);
}
