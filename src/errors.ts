/**
 * What every error class of the project shares, and the one place that recognises errors across realms.
 *
 * Error classes follow one style: a one-line "Thrown when…" doc, a closed `code`, the ids the error concerns as
 * readonly fields, and `{ cause }`. Whether a failure is retried is said by its class (`retryable`), never implied
 * by throwing a plain `Error`.
 */
import { types } from 'node:util';

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
