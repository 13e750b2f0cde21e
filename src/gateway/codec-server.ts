import crypto from 'node:crypto';
import type { Payload } from '@temporalio/common';
import { temporal } from '@temporalio/proto';
import { Hono, type Context, type MiddlewareHandler } from 'hono';
import { bodyLimit } from 'hono/body-limit';
import { deleteCookie, getCookie, setCookie } from 'hono/cookie';
import { z } from 'zod';
import { ERROR_CODES } from '../domain/error-codes';
import { DEFAULT_TENANT } from '../domain/names';
import { PayloadKeyUnavailableError, PayloadTamperedError, type PayloadEncryptionCodec } from '../payloads';
import { bearerKey, hashKey, type ApiKeys, type Principal } from './keys';
import { GATEWAY_CODES, problem, type Problem } from './problems';
import { RateLimiter } from './rate-limit';
import { escapeHtml } from './reference';

/** What the gateway needs to serve Temporal's remote codec protocol (`GatewayOptions.codec`). */
export interface CodecServerOptions {
  /** The payload codec of the deployment's workers and clients. */
  codec: PayloadEncryptionCodec;
  /** Browser origins allowed to call `encode` and `decode` (the Temporal Web UI's), exactly as sent in `Origin`. */
  corsOrigins: string[];
  /** The Temporal namespace the deployment runs in: a request naming another one (`X-Namespace`) is refused. */
  namespace: string;
}

/** Where the codec server lives: `<base>/encode`, `<base>/decode`, `<base>/login`, `<base>/logout`. */
export const CODEC_BASE_PATH = '/v1/codec';

/** Codes only the codec server answers with, beside the gateway's and the payload codec's own. */
export const CODEC_CODES = { UnsupportedMediaType: 'UnsupportedMediaType' } as const;

export const CODEC_MAX_BODY_BYTES = 4 * 1024 * 1024;
export const CODEC_MAX_PAYLOADS = 1_000;
export const CODEC_SESSION_COOKIE = 'ds_codec_session';
const SESSION_SECONDS = 8 * 60 * 60;
const MAX_SESSIONS = 1_000;
const LOGIN_MAX_BODY_BYTES = 16 * 1024;

/** Proto3 JSON bytes: base64, standard or URL-safe alphabet, padding optional (as protobufjs reads it). */
const Base64 = z
  .string()
  .regex(/^[A-Za-z0-9+/_-]*={0,2}$/, 'expected base64')
  .refine((s) => s.replace(/=+$/, '').length % 4 !== 1, 'expected base64 (its length is impossible)');

/** One `temporal.api.common.v1.Payload` in proto3 JSON; null is a field's default, as proto3 JSON has it. */
export const CodecPayload = z.strictObject({
  metadata: z.record(z.string(), Base64).nullish(),
  data: Base64.nullish(),
  externalPayloads: z
    .array(z.strictObject({ sizeBytes: z.union([z.string().regex(/^\d+$/), z.int().min(0)]).nullish() }))
    .nullish(),
});

/** The body of `encode` and `decode`, and their answer: `temporal.api.common.v1.Payloads` in proto3 JSON. */
export const CodecPayloads = z.strictObject({ payloads: z.array(CodecPayload).max(CODEC_MAX_PAYLOADS).nullish() });
export type CodecPayloads = z.infer<typeof CodecPayloads>;

interface Dependencies {
  keys: ApiKeys;
  /** Requests a second per key; the codec's own bucket holds ten times that (see below). */
  ratePerKey: number;
  /** Answers a problem the way every gateway route does. */
  send: (c: Context, p: Problem, extra?: Record<string, string>) => Response;
}

/**
 * Temporal's remote codec protocol (`POST /encode`, `POST /decode` with Payloads as proto3 JSON), so the Web UI and the
 * `temporal` CLI show decrypted payloads. Payloads carry no tenant and the UI shows the whole namespace, so only an
 * admin key of the default tenant may use it: as `Authorization: Bearer`, or, for a browser, through a session cookie
 * that `POST /login` sets.
 *
 * Not in the OpenAPI document: the protocol is Temporal's, not the gateway's, and the routes exist only where the
 * deployment serves them; the document is one for every deployment (`docs/openapi.json`).
 */
export function codecServer(options: CodecServerOptions, deps: Dependencies): Hono {
  const { codec, namespace } = options;
  const { keys, send } = deps;
  const corsOrigins = new Set(options.corsOrigins);
  const sessions = new CodecSessions();
  // A history page of the Web UI decodes each event's payloads in a request of its own, hundreds at once: the codec
  // has a bucket per key apart from the API's, so neither starves the other.
  const codecRate = deps.ratePerKey * 10;
  const limiter = new RateLimiter(codecRate);
  const app = new Hono();

  /** The request's origin when a browser sent it from somewhere this server answers: its own pages or the UI's. */
  const originAllowed = (c: Context): boolean => {
    const origin = c.req.header('origin');
    return origin === undefined || corsOrigins.has(origin) || origin === new URL(c.req.url).origin;
  };

  app.use('*', async (c, next) => {
    c.header('vary', 'Origin');
    const origin = c.req.header('origin');
    if (origin !== undefined && corsOrigins.has(origin)) {
      c.header('access-control-allow-origin', origin);
      c.header('access-control-allow-credentials', 'true');
    }
    await next();
  });

  const preflight = (c: Context) => {
    const origin = c.req.header('origin');
    if (origin === undefined || !corsOrigins.has(origin)) {
      return send(c, problem(403, GATEWAY_CODES.Forbidden, 'this origin may not call the codec server'));
    }
    return c.body(null, 204, {
      'access-control-allow-methods': 'POST',
      'access-control-allow-headers': 'X-Namespace, Content-Type, Authorization',
      'access-control-max-age': '600',
    });
  };

  /** Whom the request speaks for: the bearer key if one is sent, else the session cookie. */
  const principalOf = (c: Context): Principal | Problem => {
    const header = c.req.header('authorization');
    let key: string | undefined;
    if (header !== undefined) {
      key = bearerKey(header);
    } else {
      const token = getCookie(c, CODEC_SESSION_COOKIE);
      key = token === undefined ? undefined : sessions.keyOf(token);
    }
    const principal = key === undefined ? undefined : keys.authenticate(key);
    if (!principal) {
      return problem(401, GATEWAY_CODES.Unauthorized, 'an admin API key is required (Bearer, or sign in at login)');
    }
    return mayDecode(principal)
      ? principal
      : problem(403, GATEWAY_CODES.Forbidden, `only an admin key of tenant ${DEFAULT_TENANT} may use the codec server`);
  };

  const guard: MiddlewareHandler = async (c, next) => {
    if (!originAllowed(c)) {
      return send(c, problem(403, GATEWAY_CODES.Forbidden, 'this origin may not call the codec server'));
    }
    const principal = principalOf(c);
    if (!('keyId' in principal)) return send(c, principal);
    const wait = limiter.take(principal.keyId);
    if (wait > 0) {
      const p = problem(429, GATEWAY_CODES.RateLimited, `over ${codecRate} codec requests a second for this key`);
      return send(c, p, { 'retry-after': String(wait) });
    }
    const asked = c.req.header('x-namespace');
    if (asked !== undefined && asked !== namespace) {
      const detail = `this codec server serves namespace ${namespace}, not ${asked}`;
      return send(c, problem(400, ERROR_CODES.InvalidInput, detail));
    }
    if (!isJson(c.req.header('content-type'))) {
      const detail = 'the body must be application/json (Payloads as proto3 JSON)';
      return send(c, problem(415, CODEC_CODES.UnsupportedMediaType, detail));
    }
    await next();
  };
  // Counted as it arrives: a body over the limit is refused before it is held whole.
  const limit = bodyLimit({
    maxSize: CODEC_MAX_BODY_BYTES,
    onError: (c) => send(c, problem(413, GATEWAY_CODES.PayloadTooLarge, 'the request body is over 4 MiB')),
  });

  for (const [name, run] of [
    ['encode', (p: Payload[]) => codec.encode(p)],
    ['decode', (p: Payload[]) => codec.decode(p)],
  ] as const) {
    app.options(`/${name}`, preflight);
    app.post(`/${name}`, guard, limit, async (c) => {
      const parsed = await payloadsOf(c);
      if (!Array.isArray(parsed)) return send(c, parsed);
      const out: Payload[] = [];
      // One at a time, so a failure names the payload it is about.
      for (const [index, payload] of parsed.entries()) {
        try {
          out.push(...(await run([payload])));
        } catch (err) {
          if (!(err instanceof PayloadTamperedError || err instanceof PayloadKeyUnavailableError)) throw err;
          return send(c, problem(422, err.code, `payload ${index}: ${err.message}`, { index }));
        }
      }
      return c.json(answerOf(out));
    });
  }

  app.get('/login', (c) => page(c, 200, 'Sign in to decode payloads in the Temporal Web UI.'));
  app.post(
    '/login',
    bodyLimit({
      maxSize: LOGIN_MAX_BODY_BYTES,
      onError: (c) => page(c, 413, 'That form is too large.'),
    }),
    async (c) => {
      if (!originAllowed(c)) return page(c, 403, 'Sign in from this page.');
      const type = c.req.header('content-type') ?? '';
      if (!/^(application\/x-www-form-urlencoded|multipart\/form-data)\b/i.test(type)) {
        return page(c, 415, 'Send the form (application/x-www-form-urlencoded).');
      }
      const form = await c.req.parseBody();
      const key = typeof form.key === 'string' ? form.key.trim() : '';
      const principal = key === '' ? undefined : keys.authenticate(key);
      if (!principal) return page(c, 401, 'That is not a valid API key.', { 'www-authenticate': 'Bearer' });
      if (!mayDecode(principal)) {
        return page(c, 403, `Only an admin key of tenant ${DEFAULT_TENANT} may use the codec server.`);
      }
      const previous = getCookie(c, CODEC_SESSION_COOKIE);
      if (previous !== undefined) sessions.end(previous);
      setCookie(c, CODEC_SESSION_COOKIE, sessions.start(key), {
        httpOnly: true,
        sameSite: 'Strict',
        path: CODEC_BASE_PATH,
        maxAge: SESSION_SECONDS,
        secure: new URL(c.req.url).protocol === 'https:',
      });
      return page(
        c,
        200,
        `Signed in as ${principal.keyId} for 8 hours. In the Web UI’s Codec Server settings, unless the UI is set up ` +
          `to send credentials, choose “Use my browser setting”, enter ${new URL(CODEC_BASE_PATH, c.req.url).href} ` +
          'and switch on “Include cross-origin credentials”.',
      );
    },
  );
  app.post('/logout', (c) => {
    if (!originAllowed(c)) return page(c, 403, 'Sign out from this page.');
    const token = getCookie(c, CODEC_SESSION_COOKIE);
    if (token !== undefined) sessions.end(token);
    deleteCookie(c, CODEC_SESSION_COOKIE, { path: CODEC_BASE_PATH });
    return page(c, 200, 'Signed out.');
  });
  return app;
}

/** Payloads hold no tenant, and the Web UI shows the whole namespace: only the deployment's own admins decode. */
function mayDecode(principal: Principal): boolean {
  return principal.role === 'admin' && principal.tenant === DEFAULT_TENANT;
}

function isJson(contentType: string | undefined): boolean {
  return /^application\/json\s*(;|$)/i.test(contentType ?? '');
}

/** The body as payloads, or the problem with it: checked by shape before protobufjs reads it. */
async function payloadsOf(c: Context): Promise<Payload[] | Problem> {
  let json: unknown;
  try {
    json = JSON.parse(await c.req.text());
  } catch {
    return problem(400, ERROR_CODES.InvalidInput, 'the request body is not JSON');
  }
  const parsed = CodecPayloads.safeParse(json);
  if (!parsed.success) {
    return problem(400, ERROR_CODES.InvalidInput, 'the body is not Payloads in proto3 JSON', {
      issues: parsed.error.issues.map(({ code, path, message }) => ({ code, path, message })),
    });
  }
  const message = temporal.api.common.v1.Payloads.fromObject(parsed.data);
  return message.payloads;
}

function answerOf(payloads: Payload[]): CodecPayloads {
  const message = temporal.api.common.v1.Payloads.fromObject({ payloads });
  const json = temporal.api.common.v1.Payloads.toObject(message, { bytes: String }) as CodecPayloads;
  return { payloads: json.payloads ?? [] };
}

/** A page of the sign-in form with a line of news; no script, nothing from elsewhere, never framed. */
function page(c: Context, status: 200 | 401 | 403 | 413 | 415, news: string, extra: Record<string, string> = {}) {
  const html = `<!doctype html>
<html lang="en">
<meta charset="utf-8">
<title>durable-sessions codec server</title>
<style>body{font:16px system-ui,sans-serif;max-width:40em;margin:3em auto;padding:0 1em}input{width:24em}</style>
<h1>Codec server</h1>
<p>${escapeHtml(news)}</p>
<form method="post" action="login">
<label>Admin API key of tenant ${DEFAULT_TENANT} <input name="key" type="password" autocomplete="off" required></label>
<button>Sign in</button>
</form>
<form method="post" action="logout"><button>Sign out</button></form>
</html>
`;
  return c.html(html, status, {
    'cache-control': 'no-store',
    'content-security-policy':
      "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'",
    'x-frame-options': 'DENY',
    ...extra,
  });
}

/**
 * Browser sign-ins: an opaque random token (in the cookie) for a key, for 8 hours. Held in memory, at most 1,000 (the
 * oldest goes first), so a restart signs everyone out. The key itself is kept and checked again on each use: a key
 * revoked, demoted or moved to another tenant in the keys file stops its sessions at once.
 */
class CodecSessions {
  /** By the token's SHA-256: a lookup compares no secret byte by byte. */
  private readonly byHash = new Map<string, { key: string; expiresAt: number }>();

  start(key: string): string {
    const now = Date.now();
    for (const [hash, s] of this.byHash) if (s.expiresAt <= now) this.byHash.delete(hash);
    while (this.byHash.size >= MAX_SESSIONS) this.byHash.delete(this.byHash.keys().next().value!);
    const token = crypto.randomBytes(32).toString('base64url');
    this.byHash.set(hashKey(token), { key, expiresAt: now + SESSION_SECONDS * 1000 });
    return token;
  }

  keyOf(token: string): string | undefined {
    const hash = hashKey(token);
    const session = this.byHash.get(hash);
    if (session === undefined) return undefined;
    if (session.expiresAt > Date.now()) return session.key;
    this.byHash.delete(hash);
    return undefined;
  }

  end(token: string): void {
    this.byHash.delete(hashKey(token));
  }
}
