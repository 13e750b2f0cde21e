import { types } from 'node:util';

// Both checks use `types.isNativeError`, not only `instanceof Error`: errors made by Node itself may come from
// another realm, where `instanceof` says no.

/** Whether `error` is a Node system error with a `code` (ENOENT, EEXIST, …). */
export function isErrnoException(error: unknown): error is NodeJS.ErrnoException {
  return types.isNativeError(error) && 'code' in error;
}

/** `error` itself when it is an error, or an error carrying its text: what a message or `destroy()` takes. */
export function toError(error: unknown): Error {
  return types.isNativeError(error) || error instanceof Error ? error : new Error(String(error));
}
