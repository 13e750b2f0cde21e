import type { Context } from 'hono';
import type { z } from 'zod';
import { InvalidInputError } from '../domain/errors';
import { messageOf } from '../errors';
import { GATEWAY_CODES, problem, type Problem } from './problems';

/** Thrown when a request body is not `application/json` in UTF-8: the answer is this problem (415). */
export class UnsupportedBodyError extends Error {
  constructor(readonly problem: Problem) {
    super(problem.detail);
  }
}

/** Thrown when the client went away before its body was read whole: nobody is left to answer. */
export class ClientClosedError extends Error {}

/** Keys that would reach an object's prototype in code that copies a body naively: refused wherever they appear. */
const FORBIDDEN_KEYS = new Set(['__proto__', 'constructor', 'prototype']);

type Issue = z.core.$ZodIssue;

/**
 * The body as JSON, read strictly: a body must say `Content-Type: application/json` (a `charset` other than UTF-8 is
 * refused, 415), its bytes must be UTF-8 and its strings well formed (no escaped lone surrogate), and no object in it
 * may repeat a key or use `__proto__`, `constructor` or `prototype` as one (400 `InvalidInput`, with the path). What
 * JSON.parse would do silently (the last duplicate wins, U+FFFD for a bad byte) is never what the caller meant.
 * An empty body is `{}` (controls without input), whatever its type.
 */
export async function strictJsonBody(c: Context, sessionId: string): Promise<unknown> {
  let bytes: Uint8Array;
  try {
    bytes = new Uint8Array(await c.req.arrayBuffer());
  } catch (err) {
    // The only way a body read fails once the headers are in: the client went away (or took too long) mid-body.
    throw new ClientClosedError(messageOf(err), { cause: err });
  }
  if (bytes.every((b) => b === 0x20 || b === 0x0a || b === 0x0d || b === 0x09)) return {};
  checkContentType(c.req.header('content-type'));
  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true, ignoreBOM: false }).decode(bytes);
  } catch {
    throw invalid('the request body is not valid UTF-8', sessionId, []);
  }
  let value: unknown;
  try {
    value = JSON.parse(text) as unknown;
  } catch {
    throw invalid('the request body is not JSON', sessionId, []);
  }
  const issues = [...keyIssues(text), ...stringIssues(value, [])];
  if (issues.length > 0) throw invalid(`the request body: ${issues[0]!.message}`, sessionId, issues);
  return value;
}

function checkContentType(header: string | undefined): void {
  const [type = '', ...params] = (header ?? '').split(';').map((p) => p.trim());
  if (type.toLowerCase() !== 'application/json') {
    throw new UnsupportedBodyError(
      problem(415, GATEWAY_CODES.UnsupportedMediaType, 'the request body must be application/json'),
    );
  }
  for (const param of params) {
    const [name, raw = ''] = param.split('=');
    if (name?.trim().toLowerCase() !== 'charset') continue;
    const charset = raw.trim().replace(/^"|"$/g, '').toLowerCase();
    if (charset !== 'utf-8' && charset !== 'utf8') {
      throw new UnsupportedBodyError(
        problem(415, GATEWAY_CODES.UnsupportedMediaType, `the request body must be UTF-8, not ${charset}`),
      );
    }
  }
}

function invalid(message: string, sessionId: string, issues: Issue[]): InvalidInputError {
  return new InvalidInputError(message, sessionId, issues);
}

function issue(path: (string | number)[], message: string): Issue {
  return { code: 'custom', path, message, input: undefined };
}

/** No lone surrogate (String.prototype.isWellFormed, which the compiler's library target does not declare). */
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
const wellFormed = (s: string) => !LONE_SURROGATE.test(s);

/** Strings (keys included) with a lone surrogate, which JSON.parse lets through from a `\ud800` escape. */
function stringIssues(value: unknown, path: (string | number)[]): Issue[] {
  if (typeof value === 'string') {
    return wellFormed(value) ? [] : [issue(path, 'a string holds a lone surrogate (not Unicode text)')];
  }
  if (Array.isArray(value)) return value.flatMap((v, i) => stringIssues(v, [...path, i]));
  if (value !== null && typeof value === 'object') {
    return Object.entries(value).flatMap(([k, v]) =>
      wellFormed(k) ? stringIssues(v, [...path, k]) : [issue(path, 'a key holds a lone surrogate')],
    );
  }
  return [];
}

/**
 * Repeated and forbidden keys, found by scanning text that JSON.parse has accepted (so only its structure matters
 * here). Keys are compared decoded: `"a"` and `"\u0061"` are the same key.
 */
function keyIssues(text: string): Issue[] {
  const issues: Issue[] = [];
  // One frame per open object or array: its keys so far, and where in the body it is.
  const stack: { keys?: Set<string>; path: (string | number)[]; index: number; key?: string }[] = [];
  const top = () => stack[stack.length - 1];
  const childPath = (): (string | number)[] => {
    const frame = top();
    if (!frame) return [];
    return frame.keys ? [...frame.path, frame.key ?? ''] : [...frame.path, frame.index];
  };
  for (let i = 0; i < text.length; i++) {
    const ch = text[i];
    if (ch === '{' || ch === '[') {
      stack.push({ path: childPath(), index: 0, ...(ch === '{' ? { keys: new Set<string>() } : {}) });
    } else if (ch === '}' || ch === ']') {
      stack.pop();
    } else if (ch === ',') {
      const frame = top();
      if (frame && !frame.keys) frame.index++;
    } else if (ch === '"') {
      let end = i + 1;
      while (text[end] !== '"') end += text[end] === '\\' ? 2 : 1;
      const literal = text.slice(i, end + 1);
      i = end;
      const frame = top();
      if (!frame?.keys) continue;
      // A string in an object is a key when a colon follows it.
      let j = i + 1;
      while (/\s/.test(text[j] ?? '')) j++;
      if (text[j] !== ':') continue;
      const key = JSON.parse(literal) as string;
      const path = [...frame.path, key];
      if (FORBIDDEN_KEYS.has(key)) issues.push(issue(path, `the key "${key}" is not allowed`));
      else if (frame.keys.has(key)) issues.push(issue(path, `the key "${key}" appears twice in one object`));
      frame.keys.add(key);
      frame.key = key;
    }
  }
  return issues;
}
