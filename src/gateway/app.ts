import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { OpenAPIHono, z } from '@hono/zod-openapi';
import type { Context, MiddlewareHandler } from 'hono';
import { bodyLimit } from 'hono/body-limit';
import type { ZodType } from 'zod';
import type { SessionStatus } from '../api';
import { SessionListFilter, type SessionClient, type SessionHandle, type TimelinePage } from '../client';
import { ERROR_CODES } from '../domain/error-codes';
import { InvalidInputError } from '../domain/errors';
import { CONTROL_NAMES, CONTROLS as REGISTRY, type ControlName, type ControlSpec } from '../api/controls';
import { ExportSessionInput, SESSION_OPERATIONS } from '../api/archives';
import { ARCHIVE_MEDIA_TYPE } from '../snapshots/archive';
import { IdempotencyKey, SessionId, StartSessionInput, TimelinePageInput, type VerifyInput } from '../domain/schemas';
import { messageOf } from '../errors';
import { CoalescedReads } from './coalesce';
import { CODEC_BASE_PATH, codecServer, type CodecServerOptions } from './codec-server';
import { PollClock, SessionEvent, sessionEvents, type EventStreamOptions } from './events';
import { bearerKey, type ApiKeys, type Principal, type Role } from './keys';
import { ClientClosedError, strictJsonBody, UnsupportedBodyError } from './json-body';
import { GATEWAY_CODES, problem, problemOf, type Problem } from './problems';
import { RateLimiter } from './rate-limit';
import { referencePage } from './reference';
import {
  AppendResultAnswer,
  CheckpointRefAnswer,
  FailureInfoAnswer,
  ForkResultAnswer,
  HealthAnswer,
  ResumeResultAnswer,
  RewindResultAnswer,
  SessionPageAnswer,
  SessionStatusAnswer,
  StartedAnswer,
  StopResultAnswer,
  TimelineEntryAnswer,
  TimelinePageAnswer,
  TouchAnswer,
  VerifyResultAnswer,
} from './responses';

export interface GatewayOptions {
  sessions: SessionClient;
  keys: ApiKeys;
  /** Whether Temporal answers, for `/readyz`. */
  ready: () => Promise<boolean>;
  /** Largest request body (default 4 MiB: a start spec with seed files). */
  maxBodyBytes?: number;
  /** Requests a second per API key (bursts of twice that); over it, 429 with `Retry-After`. Default 100. */
  ratePerKey?: number;
  /**
   * Requests with a missing or wrong key a second per client address (bursts of twice that). Over it, every request
   * of that address that is not yet authenticated is 429 with `Retry-After`, its key unchecked. Default 5.
   */
  authFailuresPerSecond?: number;
  /** How the event streams read sessions. */
  events?: EventStreamOptions;
  /** Where unexpected errors go (default console.error); callers only see a problem without details. */
  logError?: (err: unknown) => void;
  /** Where expected events go, one line each with no stack: a client that went away mid-request (default console.warn). */
  logNote?: (line: string) => void;
  /**
   * Where an import's archive waits while it is verified and then stored (it is read twice): a file of its own under
   * this directory, removed once the import answers. Default os.tmpdir().
   */
  spoolDir?: string;
  /** Serve Temporal's remote codec protocol under `/v1/codec` (for the Web UI and `temporal` CLI); else 404 there. */
  codec?: CodecServerOptions;
}

type Env = { Variables: { principal: Principal } };

/**
 * What each control's route answers (`POST /v1/sessions/{id}/<control>`): its schema, and how the handle's result
 * becomes it when it is not the result as it is. One per control of the registry (the compiler holds it to that);
 * the input schema, summary and operation id come from the registry.
 */
const ANSWERS: { [N in ControlName]: { schema: ZodType; run?: (h: SessionHandle, input: never) => Promise<unknown> } } =
  {
    checkpoint: { schema: CheckpointRefAnswer },
    pause: { schema: CheckpointRefAnswer },
    resume: { schema: ResumeResultAnswer },
    stop: { schema: StopResultAnswer },
    verify: { schema: VerifyResultAnswer, run: async (h, x: VerifyInput) => ({ results: await h.verify(x) }) },
    rewind: { schema: RewindResultAnswer },
    fork: { schema: ForkResultAnswer },
    branch: { schema: ForkResultAnswer },
    configure: { schema: SessionStatusAnswer },
    touch: { schema: TouchAnswer, run: (h) => h.touch().then(() => ({})) },
    append: { schema: AppendResultAnswer },
    regenerate: { schema: ForkResultAnswer },
  };

/** The controls the gateway serves: every control of the registry, each run by the handle's method of its name. */
const CONTROLS = CONTROL_NAMES.map((name) => {
  const { input, summary } = REGISTRY[name] as ControlSpec;
  const answer = ANSWERS[name];
  const run =
    (answer.run as ((h: SessionHandle, x: unknown) => Promise<unknown>) | undefined) ??
    ((h: SessionHandle, x: unknown) => (h[name] as (x: unknown) => Promise<unknown>).call(h, x));
  return { name, input, output: answer.schema, summary, run };
});

const RANK: Record<Role, number> = { viewer: 0, operator: 1, admin: 2 };

const ProblemSchema = z
  .object({
    type: z.string(),
    title: z.string(),
    status: z.number().int(),
    detail: z.string(),
    code: z.enum([...Object.values(ERROR_CODES), ...Object.values(GATEWAY_CODES)]),
    sessionId: z.string().optional(),
    /** zod's issues, for `InvalidInput`: where (`path`), which rule (`code`), and what is wrong. */
    issues: z
      .array(
        z.object({
          code: z.string(),
          path: z.array(z.union([z.string(), z.number()])),
          message: z.string(),
          /** What the refusal knows of a better input, e.g. `nearest`: the checkpoint index nearest the one asked. */
          params: z.record(z.string(), z.unknown()).optional(),
        }),
      )
      .optional(),
    /**
     * For `SessionFailed`, and `RuntimeFailed` of a command that exited within its settle window: the failure (its
     * code and message; exit code, last lines of output, where its directory and log are kept).
     */
    failure: FailureInfoAnswer.optional(),
    /**
     * For `WorkerUnavailable`: what Temporal itself knows of the session (no worker answered for it): the execution's
     * status, the search attributes it last upserted, its task queue and when a worker last polled it.
     */
    lastKnown: z
      .object({
        workflowStatus: z.string(),
        phase: z.string().nullable(),
        runtimeKind: z.string().nullable(),
        host: z.string().nullable(),
        checkpointCount: z.number().int().nullable(),
        headCheckpointId: z.string().nullable(),
        lastCheckpointAt: z.string().nullable(),
        failureCode: z.string().nullable(),
        taskQueue: z.string(),
        lastPollAt: z.string().nullable(),
      })
      .optional(),
  })
  .openapi('Problem');
const problemResponses = {
  400: { description: 'Bad input (`InvalidInput`, with zod `issues`)' },
  401: { description: 'No valid API key' },
  403: { description: 'The key’s role may not do this' },
  404: { description: 'Unknown session or checkpoint' },
  409: { description: 'Illegal transition, conflict, id already used, session ended or failed (`failure`)' },
  413: { description: 'Body over the limit' },
  415: { description: 'A body that is not `application/json` in UTF-8' },
  429: { description: 'Over the key’s request rate (`Retry-After`)' },
  422: { description: 'The session’s data cannot serve the request (corrupt, tampered, incompatible…)' },
  501: { description: 'The gateway is not set up for this (export and import need DS_GATEWAY_ARCHIVES=on)' },
  503: {
    description:
      'Temporal unreachable, the session busy handing over, or no worker serving it (`WorkerUnavailable`, with `lastKnown`) (`Retry-After`)',
  },
};
type ProblemStatus = keyof typeof problemResponses;
const errorResponses = (statuses: readonly ProblemStatus[]) =>
  Object.fromEntries(
    statuses.map((status) => [
      status,
      { ...problemResponses[status], content: { 'application/problem+json': { schema: ProblemSchema } } },
    ]),
  );
const EVERY_PROBLEM = (Object.keys(problemResponses).map(Number) as ProblemStatus[]).filter((s) => s !== 501);

const DOCUMENT_INFO = {
  openapi: '3.1.0',
  info: { title: 'durable-sessions', version: '1', description: 'Sessions on Temporal: start, steer, inspect.' },
  security: [{ bearer: [] }],
};

/** The OpenAPI document the gateway serves at `/v1/openapi.json` (and `docs/openapi.json` holds, checked by a test). */
export function openApiDocument(): unknown {
  const unused = () => {
    throw new Error('the document needs no session client');
  };
  const app = createGateway({
    sessions: new Proxy({}, { get: unused }) as SessionClient,
    keys: new Proxy({}, { get: unused }) as ApiKeys,
    ready: unused,
  });
  return app.getOpenAPI31Document(DOCUMENT_INFO);
}

/**
 * The HTTP gateway: every session verb over JSON, in front of SessionClient, which checks every input with the
 * workflow's own schemas (the gateway adds no rule of its own). Errors are RFC 9457 problem documents.
 */
export function createGateway(options: GatewayOptions): OpenAPIHono<Env> {
  const { sessions, keys } = options;
  const logError = options.logError ?? ((err: unknown) => console.error('gateway:', err));
  const logNote = options.logNote ?? ((line: string) => console.warn(`gateway: ${line}`));
  const app = new OpenAPIHono<Env>();
  // One client per tenant: a key reaches its own tenant's sessions only, so another's look like none at all (404).
  const tenants = new Map<string, SessionClient>();
  const sessionsOf = (c: Context<Env>): SessionClient => {
    const { tenant } = c.get('principal');
    if (tenant === sessions.tenant) return sessions;
    let client = tenants.get(tenant);
    if (!client) tenants.set(tenant, (client = sessions.forTenant(tenant)));
    return client;
  };
  // Status reads of one session (GETs, event streams) that come together share one query; the workflow id is the
  // tenant's session key, so two tenants' reads never share.
  const statusReads = new CoalescedReads<SessionStatus>();
  const statusOf = (handle: SessionHandle) => statusReads.read(handle.workflow.workflowId, () => handle.status());
  // And the event streams of one session read its timeline together: streams at the same index share one read.
  const timelineReads = new CoalescedReads<TimelinePage>();
  const timelineOf = (handle: SessionHandle, from: number) =>
    timelineReads.read(`${handle.workflow.workflowId}#${from}`, () =>
      handle.timelinePage({ from, limit: 100, all: true }),
    );
  // Reads coalesce only when they come together: every stream polls on this one clock, so they do.
  const pollClock = new PollClock(options.events?.pollMs);

  const send = (c: Context, p: Problem, extra: Record<string, string> = {}) => {
    const headers: Record<string, string> = { 'content-type': 'application/problem+json', ...extra };
    if (p.status === 401) headers['www-authenticate'] = 'Bearer';
    if (p.code === 'Busy') headers['retry-after'] = '1';
    if (p.code === 'WorkerUnavailable') headers['retry-after'] = '5';
    return c.body(JSON.stringify(p), p.status as 400, headers);
  };

  app.onError((err, c) => {
    // A client that went away mid-request is no fault of the gateway: one line, and an answer nobody reads.
    if (err instanceof ClientClosedError || c.req.raw.signal.aborted) {
      logNote(`client closed ${c.req.method} ${c.req.path} before its answer (${messageOf(err)})`);
      return c.body(null, 400);
    }
    const p = err instanceof UnsupportedBodyError ? err.problem : problemOf(err);
    if (p.status >= 500 && p.code !== 'Busy') logError(err);
    return send(c, p);
  });
  app.notFound((c) => send(c, problem(404, GATEWAY_CODES.NotFound, `no route ${c.req.method} ${c.req.path}`)));

  document(app, 'get', '/healthz', 'Whether the gateway answers', {
    operationId: 'health',
    answers: { 200: HealthAnswer },
    probe: [],
  });
  app.get('/healthz', (c) => c.json({ ok: true }));
  document(app, 'get', '/readyz', 'Whether the gateway reaches Temporal', {
    operationId: 'readiness',
    answers: { 200: HealthAnswer },
    probe: [503],
  });
  app.get('/readyz', async (c) =>
    (await options.ready().catch(() => false))
      ? c.json({ ok: true })
      : send(c, problem(503, GATEWAY_CODES.Unavailable, 'the Temporal server cannot be reached')),
  );
  app.doc31('/v1/openapi.json', DOCUMENT_INFO);
  // The routes are all registered by the first request: the page is rendered once.
  let reference: string | undefined;
  app.get('/docs', (c) =>
    c.html(
      (reference ??= referencePage(app.getOpenAPI31Document(DOCUMENT_INFO) as Parameters<typeof referencePage>[0])),
    ),
  );
  app.openAPIRegistry.registerComponent('securitySchemes', 'bearer', { type: 'http', scheme: 'bearer' });

  const ratePerKey = options.ratePerKey ?? 100;
  // Not in the OpenAPI document (see codecServer): plain routes, not registered with the document's registry.
  if (options.codec) app.route(CODEC_BASE_PATH, codecServer(options.codec, { keys, ratePerKey, send }));
  const limiter = new RateLimiter(ratePerKey);
  const failuresPerSecond = options.authFailuresPerSecond ?? 5;
  const failures = new RateLimiter(failuresPerSecond);
  const throttled = problem(
    429,
    GATEWAY_CODES.RateLimited,
    `over ${failuresPerSecond} failed authentications a second from this address`,
  );
  const authenticate: MiddlewareHandler<Env> = async (c, next) => {
    // Guessing keys is throttled per address: over the rate, no key is even looked at until the address waits.
    const address = clientAddress(c);
    const blocked = failures.waitOf(address);
    if (blocked > 0) return send(c, throttled, { 'retry-after': String(blocked) });
    const key = bearerKey(c.req.header('authorization'));
    const principal = key === undefined ? undefined : keys.authenticate(key);
    if (!principal) {
      failures.take(address);
      return send(c, problem(401, GATEWAY_CODES.Unauthorized, 'a valid API key is required (Bearer)'));
    }
    // HEAD is a GET without the body: it reads, so it needs what GET needs.
    const needed: Role = c.req.method === 'GET' || c.req.method === 'HEAD' ? 'viewer' : 'operator';
    if (RANK[principal.role] < RANK[needed]) {
      return send(c, problem(403, GATEWAY_CODES.Forbidden, `the key's role (${principal.role}) may not do this`));
    }
    const wait = limiter.take(principal.keyId);
    if (wait > 0) {
      const p = problem(429, GATEWAY_CODES.RateLimited, `over ${ratePerKey} requests a second for this key`);
      return send(c, p, { 'retry-after': String(wait) });
    }
    c.set('principal', principal);
    await next();
  };
  const limit = bodyLimit({
    maxSize: options.maxBodyBytes ?? 4 * 1024 * 1024,
    onError: (c) => send(c, problem(413, GATEWAY_CODES.PayloadTooLarge, 'the request body is over the limit')),
  });
  // In hono, `/v1/sessions/*` matches `/v1/sessions` too: one registration, so each request is counted once.
  app.use('/v1/sessions/*', authenticate, limit);

  document(app, 'post', '/v1/sessions', 'Start a session (`wait=false`: 202 at once, not yet running)', {
    operationId: 'startSession',
    body: StartSessionInput,
    query: z.object({ wait: z.enum(['true', 'false']).optional() }),
    answers: {
      201: { schema: SessionStatusAnswer, description: 'Started: the session runs' },
      202: { schema: StartedAnswer, description: 'Started, not yet running (`wait=false`)' },
    },
  });
  app.post('/v1/sessions', async (c) => {
    const spec = await strictJsonBody(c, '');
    const wait = c.req.query('wait') !== 'false';
    const handle = await sessionsOf(c).start(spec as StartSessionInput, { wait });
    if (!wait) return c.json({ sessionId: handle.sessionId }, 202);
    return c.json(await handle.status(), 201);
  });

  document(app, 'get', '/v1/sessions', 'Sessions, newest first', {
    operationId: 'listSessions',
    query: SessionListFilter,
    answers: { 200: SessionPageAnswer },
  });
  app.get('/v1/sessions', async (c) => {
    const q = c.req.query();
    const filter: Record<string, unknown> = { ...q };
    if (q.limit !== undefined) filter.limit = /^\d+$/.test(q.limit) ? Number(q.limit) : q.limit;
    const page = await sessionsOf(c).listPage(filter);
    return c.json({
      sessions: page.sessions.map((s) => ({ ...s, startedAt: s.startedAt.toISOString() })),
      next: page.next,
    });
  });

  document(app, 'get', '/v1/sessions/{id}', 'A session’s status', {
    operationId: 'getSession',
    answers: { 200: SessionStatusAnswer },
  });
  app.get('/v1/sessions/:id', async (c) => c.json(await statusOf(sessionsOf(c).get(c.req.param('id')))));

  document(app, 'get', '/v1/sessions/{id}/checkpoints', 'The timeline, in index order', {
    operationId: 'getTimeline',
    query: TimelinePageInput,
    answers: { 200: TimelinePageAnswer },
  });
  app.get('/v1/sessions/:id/checkpoints', async (c) => {
    const handle = sessionsOf(c).get(c.req.param('id'));
    return c.json(await handle.timelinePage(timelineQuery(c, handle.sessionId)));
  });

  document(app, 'get', '/v1/sessions/{id}/checkpoints/{index}', 'One timeline entry, with its verification state', {
    operationId: 'getTimelineEntry',
    answers: { 200: TimelineEntryAnswer },
  });
  app.get('/v1/sessions/:id/checkpoints/:index', async (c) => {
    const handle = sessionsOf(c).get(c.req.param('id'));
    const index = Number(c.req.param('index'));
    if (!Number.isSafeInteger(index) || index < 1) {
      throw new InvalidInputError('index must be a positive integer', handle.sessionId, []);
    }
    const { entries } = await handle.timelinePage({ from: index, limit: 1, all: true });
    const entry = entries[0];
    if (entry?.index !== index) {
      return send(
        c,
        problem(404, GATEWAY_CODES.NotFound, `no timeline entry ${index}`, { sessionId: handle.sessionId }),
      );
    }
    return c.json(entry);
  });

  document(app, 'get', '/v1/sessions/{id}/events', 'Phase, progress and timeline entries as Server-Sent Events', {
    operationId: 'sessionEvents',
    answers: { 200: { schema: SessionEvent, type: 'text/event-stream' } },
  });
  app.get('/v1/sessions/:id/events', (c) => {
    const opened = c.get('principal');
    const key = bearerKey(c.req.header('authorization'))!;
    const authorized = () => {
      const now = keys.authenticate(key);
      return now?.keyId === opened.keyId && now.tenant === opened.tenant && now.role === opened.role;
    };
    return sessionEvents(c, sessionsOf(c).get(c.req.param('id')), options.events, {
      status: statusOf,
      timeline: timelineOf,
      authorized,
      clock: pollClock,
    });
  });

  archiveRoutes(app, { sessionsOf, authenticate, send, spoolDir: options.spoolDir ?? os.tmpdir() });

  for (const control of CONTROLS) {
    document(app, 'post', `/v1/sessions/{id}/${control.name}`, control.summary, {
      body: control.input,
      answers: { 200: control.output },
      // The control's wire name: one name for it in the document, generated clients and the workflow.
      operationId: control.name,
    });
    app.post(`/v1/sessions/:id/${control.name}`, async (c) => {
      const handle = sessionsOf(c).get(c.req.param('id'));
      const input = withIdempotencyKey(c, await strictJsonBody(c, handle.sessionId), handle.sessionId);
      return c.json(await control.run(handle, input));
    });
  }
  return app;
}

/** The peer's address (behind a proxy, the proxy's: the proxy is the client to throttle). */
function clientAddress(c: Context): string {
  return (
    (c.env as { incoming?: { socket?: { remoteAddress?: string } } } | undefined)?.incoming?.socket?.remoteAddress ?? ''
  );
}

/** The `Idempotency-Key` header is the control's key; a body that names another one is refused. */
function withIdempotencyKey(c: Context, body: unknown, sessionId: string): unknown {
  const key = c.req.header('idempotency-key');
  if (key === undefined) return body;
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return body;
  const given = (body as { idempotencyKey?: unknown }).idempotencyKey;
  if (given !== undefined && given !== key) {
    throw new InvalidInputError('the Idempotency-Key header and the body name different keys', sessionId, []);
  }
  return { ...body, idempotencyKey: key };
}

function timelineQuery(c: Context, sessionId: string): TimelinePageInput {
  const out: Record<string, unknown> = {};
  for (const name of ['from', 'limit', 'branch'] as const) {
    const v = c.req.query(name);
    if (v === undefined) continue;
    const n = Number(v);
    if (!Number.isSafeInteger(n)) throw new InvalidInputError(`${name} must be an integer`, sessionId, []);
    out[name] = n;
  }
  const all = c.req.query('all');
  if (all !== undefined) out.all = all === 'true';
  return out;
}

/** The path parameters of the routes, with the rules the gateway checks them by. */
const PATH_PARAMS: Record<string, ZodType> = {
  id: SessionId,
  index: z.int().min(1).max(Number.MAX_SAFE_INTEGER),
};

const ImportQuery = z.strictObject({
  sessionId: SessionId.optional(),
  paused: z.enum(['true', 'false']).optional(),
});

const ImportResultAnswer = z
  .object({
    sessionId: z.string(),
    importedFrom: z.object({ sessionId: z.string(), checkpointId: z.string() }),
    checkpoints: z.array(z.object({ checkpointId: z.string(), size: z.number().int() })),
  })
  .openapi('ImportResult');

/** The archive as the document describes it: bytes of ARCHIVE_MEDIA_TYPE. */
const ArchiveBody = z.string().openapi({ type: 'string', format: 'binary' });

/** Headers that carry an import's key: base64, so that a PEM's line breaks and any passphrase fit in a header. */
const KEY_HEADERS = { passphrase: 'archive-passphrase', privateKey: 'archive-private-key' } as const;

/**
 * Export (`POST /v1/sessions/{id}/export`: JSON in, the archive streamed out) and import (`POST /v1/imports`: the
 * archive streamed in, outside the JSON body limit; options in the query, the key in a header, never in a URL).
 */
function archiveRoutes(
  app: OpenAPIHono<Env>,
  {
    sessionsOf,
    authenticate,
    send,
    spoolDir,
  }: {
    sessionsOf: (c: Context<Env>) => SessionClient;
    authenticate: MiddlewareHandler<Env>;
    send: (c: Context, p: Problem) => Response;
    spoolDir: string;
  },
): void {
  const notConfigured = (c: Context<Env>) =>
    send(
      c,
      problem(501, GATEWAY_CODES.NotConfigured, 'this gateway does not export or import: set DS_GATEWAY_ARCHIVES=on'),
    );

  document(app, 'post', '/v1/sessions/{id}/export', SESSION_OPERATIONS.export.summary, {
    operationId: 'exportSession',
    body: ExportSessionInput,
    answers: { 200: { schema: ArchiveBody, type: ARCHIVE_MEDIA_TYPE, description: 'The archive, streamed' } },
    moreProblems: [501],
  });
  app.post('/v1/sessions/:id/export', async (c) => {
    const sessions = sessionsOf(c);
    if (!sessions.movesArchives) return notConfigured(c);
    const id = c.req.param('id');
    const input = await strictJsonBody(c, id);
    // Checkpoints and spec are looked up before the answer starts: a missing one is still a problem document. A
    // failure later (a chunk that does not verify) cuts the stream, and an archive without its end never imports.
    const archive = await sessions.export(id, input as ExportSessionInput);
    c.req.raw.signal.addEventListener('abort', () => archive.destroy(), { once: true });
    return new Response(Readable.toWeb(archive) as ReadableStream, {
      headers: { 'content-type': ARCHIVE_MEDIA_TYPE, 'content-disposition': `attachment; filename="${id}.dsa"` },
    });
  });

  app.use('/v1/imports', authenticate);
  document(app, 'post', '/v1/imports', SESSION_OPERATIONS.import.summary, {
    operationId: 'importSession',
    query: ImportQuery,
    binaryBody: ARCHIVE_MEDIA_TYPE,
    headers: z.object({
      [KEY_HEADERS.passphrase]: z.string().optional().openapi({ description: 'the passphrase, base64 of its UTF-8' }),
      [KEY_HEADERS.privateKey]: z
        .string()
        .optional()
        .openapi({ description: 'the X25519 private key, base64 of its PEM' }),
    }),
    answers: { 201: { schema: ImportResultAnswer, description: 'Imported: the new session exists' } },
    moreProblems: [501],
  });
  app.post('/v1/imports', async (c) => {
    const sessions = sessionsOf(c);
    if (!sessions.movesArchives) return notConfigured(c);
    const query = ImportQuery.safeParse(c.req.query());
    if (!query.success) {
      throw new InvalidInputError(`invalid query: ${z.prettifyError(query.error)}`, '', query.error.issues);
    }
    const [type = ''] = (c.req.header('content-type') ?? '').split(';').map((p) => p.trim().toLowerCase());
    if (type !== ARCHIVE_MEDIA_TYPE) {
      return send(c, problem(415, GATEWAY_CODES.UnsupportedMediaType, `the body must be ${ARCHIVE_MEDIA_TYPE}`));
    }
    const base64 = (name: string) => {
      const value = c.req.header(name);
      return value === undefined ? undefined : Buffer.from(value, 'base64').toString('utf8');
    };
    const passphrase = base64(KEY_HEADERS.passphrase);
    const privateKey = base64(KEY_HEADERS.privateKey);
    const input = {
      ...(query.data.sessionId !== undefined ? { sessionId: query.data.sessionId } : {}),
      ...(query.data.paused === 'true' ? { paused: true } : {}),
      ...(passphrase !== undefined ? { passphrase } : {}),
      ...(privateKey !== undefined ? { privateKey } : {}),
    };
    const body = c.req.raw.body;
    if (!body) throw new InvalidInputError('the request has no archive', query.data.sessionId ?? '', []);
    const file = path.join(spoolDir, `ds-import-${randomUUID()}.dsa`);
    try {
      try {
        await pipeline(Readable.fromWeb(body), fs.createWriteStream(file, { flags: 'wx', mode: 0o600 }));
      } catch (err) {
        throw new ClientClosedError(messageOf(err), { cause: err });
      }
      const { sessionId, importedFrom, checkpoints } = await sessions.import(file, input);
      return c.json({ sessionId, importedFrom, checkpoints }, 201);
    } finally {
      await fs.promises.rm(file, { force: true });
    }
  });
}

/** A success answer: its schema, JSON unless `type` says otherwise. */
type Answer = ZodType | { schema: ZodType; description?: string; type?: string };

interface RouteDoc {
  /** The operation's name in the document (generated clients name their methods by it): stable, never renamed. */
  operationId: string;
  body?: ZodType;
  /** A body of bytes of this media type, streamed (instead of a JSON `body`). */
  binaryBody?: string;
  /** Request headers the operation reads. */
  headers?: z.ZodObject;
  /** The query parameters, by the schema the route checks them with (their values are strings on the wire). */
  query?: z.ZodObject;
  /** The answers that are not problems, by status. */
  answers: Record<number, Answer>;
  /** A probe for load balancers: no key, and only these problems. */
  probe?: ProblemStatus[];
  /** Problems beside every route's (501 of a route that needs setting up). */
  moreProblems?: ProblemStatus[];
}

/** Puts a route in the OpenAPI document; the handler is registered beside it. */
function document(
  app: OpenAPIHono<Env>,
  method: 'get' | 'post',
  path: string,
  summary: string,
  { operationId, body, binaryBody, headers, query, answers, probe, moreProblems = [] }: RouteDoc,
): void {
  const params = [...path.matchAll(/\{(\w+)\}/g)].map((m) => m[1]!);
  // Only a control whose input has a key takes the header (withIdempotencyKey puts it in the input).
  const keyed = body instanceof z.ZodObject && 'idempotencyKey' in body.shape;
  app.openAPIRegistry.registerPath({
    method,
    path,
    operationId,
    summary,
    ...(operationId ? { operationId } : {}),
    ...(probe ? { security: [] } : {}),
    request: {
      ...(params.length ? { params: z.object(Object.fromEntries(params.map((p) => [p, PATH_PARAMS[p]!]))) } : {}),
      ...(body ? { body: { content: { 'application/json': { schema: body as never } }, required: false } } : {}),
      ...(binaryBody ? { body: { content: { [binaryBody]: { schema: ArchiveBody as never } }, required: true } } : {}),
      ...(keyed ? { headers: z.object({ 'idempotency-key': IdempotencyKey.optional() }) } : {}),
      ...(headers ? { headers } : {}),
      ...(query ? { query } : {}),
    },
    responses: {
      ...Object.fromEntries(
        Object.entries(answers).map(([status, answer]) => {
          const {
            schema,
            description = 'OK',
            type = 'application/json',
          } = answer instanceof z.ZodType ? { schema: answer } : answer;
          return [status, { description, content: { [type]: { schema: schema as never } } }];
        }),
      ),
      ...errorResponses(probe ?? [...EVERY_PROBLEM, ...moreProblems]),
    },
  });
}
