import crypto from 'node:crypto';
import { z } from 'zod';
import type { RunningGateway } from '../../src/gateway';
import { startAdminGateway } from '../helpers/gateway';
import { eventually, startTestSystem, type TestSystem } from '../helpers/temporal';

/**
 * Every answer of the real gateway (real workers, the run's dev server) against the schema the OpenAPI document it
 * serves gives for that route and status, read from the document itself: a schema that is wrong about a field, its
 * type, whether it may be null or absent, or a field the gateway sends and the document does not name, fails here.
 */
let sys: TestSystem;
let gateway: RunningGateway;
let key: string;
let doc: OpenApiDoc;

interface OpenApiDoc {
  paths: Record<
    string,
    Record<string, { responses: Record<string, { content?: Record<string, { schema: object }> }> }>
  >;
  components: { schemas: Record<string, object> };
}

beforeAll(async () => {
  sys = await startTestSystem();
  ({ gateway, key } = await startAdminGateway(sys));
  doc = (await (await fetch(`${gateway.url}/v1/openapi.json`)).json()) as OpenApiDoc;
}, 60_000);
afterAll(async () => {
  await gateway?.close();
  await sys?.close();
});

const id = (name: string) => `${name}-${crypto.randomUUID().slice(0, 8)}`;

/**
 * The document's schema of an answer, closed: an object refuses fields it does not list (the document leaves them
 * open for clients; here every field the gateway sends must be one it names).
 */
function documented(method: string, route: string, status: number, type: string): z.ZodType {
  const op = doc.paths[route]?.[method.toLowerCase()];
  const schema = op?.responses[String(status)]?.content?.[type]?.schema;
  if (!schema) throw new Error(`the document has no ${status} ${type} answer for ${method} ${route}`);
  const closed = (value: unknown): unknown => {
    if (Array.isArray(value)) return value.map(closed);
    if (typeof value !== 'object' || value === null) return value;
    const out = Object.fromEntries(Object.entries(value).map(([k, v]) => [k, closed(v)]));
    return 'properties' in out ? { ...out, additionalProperties: false } : out;
  };
  // zod reads local references under $defs only.
  const text = JSON.stringify(closed({ ...schema, $defs: doc.components.schemas }));
  return z.fromJSONSchema(JSON.parse(text.replaceAll('#/components/schemas/', '#/$defs/')) as never);
}

/** Calls a route and checks the answer against the document (`route` is the documented path, `{id}` filled in). */
async function call<T = Record<string, unknown>>(
  method: string,
  route: string,
  params: { id?: string; index?: number; query?: string; body?: unknown; noKey?: boolean } = {},
): Promise<{ status: number; json: T }> {
  const url = route.replace('{id}', params.id ?? '').replace('{index}', String(params.index ?? ''));
  const res = await fetch(`${gateway.url}${url}${params.query ? `?${params.query}` : ''}`, {
    method,
    headers: {
      ...(params.noKey ? {} : { authorization: `Bearer ${key}` }),
      ...(params.body !== undefined ? { 'content-type': 'application/json' } : {}),
    },
    body: params.body === undefined ? undefined : JSON.stringify(params.body),
  });
  const type = (res.headers.get('content-type') ?? '').split(';')[0]!;
  const json = (await res.json()) as T;
  const checked = documented(method, route, res.status, type).safeParse(json);
  if (!checked.success) {
    throw new Error(`${method} ${url} ${res.status}: ${z.prettifyError(checked.error)}\n${JSON.stringify(json)}`);
  }
  return { status: res.status, json };
}

interface Ref {
  checkpointId: string;
  index: number;
}

test('health and readiness', async () => {
  expect((await call('GET', '/healthz', { noKey: true })).status).toBe(200);
  expect((await call('GET', '/readyz', { noKey: true })).status).toBe(200);
});

test('a memory session through every control: each answer is the one the document describes', async () => {
  const sessionId = id('answers');
  const s = { id: sessionId };
  const started = await call('POST', '/v1/sessions', { body: { sessionId, runtime: { kind: 'memory' } } });
  expect(started.status).toBe(201);
  expect((await call('POST', '/v1/sessions/{id}/touch', s)).json).toEqual({});

  const first = await call<Ref>('POST', '/v1/sessions/{id}/checkpoint', { ...s, body: { label: 'first' } });
  expect(first.status).toBe(200);
  const verified = await call<{ results: unknown[] }>('POST', '/v1/sessions/{id}/verify', s);
  expect(verified.json.results).toHaveLength(1);
  const paused = await call<Ref>('POST', '/v1/sessions/{id}/pause', { ...s, body: { reason: 'lunch' } });
  expect((await call('GET', '/v1/sessions/{id}', s)).json).toMatchObject({ phase: 'paused', head: paused.json });
  expect((await call('POST', '/v1/sessions/{id}/resume', s)).status).toBe(200);
  const configured = await call('POST', '/v1/sessions/{id}/configure', {
    ...s,
    body: { policies: { checkpointEveryMs: 600_000 }, retention: { keepLast: 50 } },
  });
  expect(configured.json).toMatchObject({ policies: { checkpointEveryMs: 600_000 }, retention: { keepLast: 50 } });
  // A running session's rewind takes a safety checkpoint and has a runtime; a fork and a branch, sessions of their own.
  const rewound = await call('POST', '/v1/sessions/{id}/rewind', { ...s, body: { to: first.json.index } });
  expect(rewound.json).toMatchObject({ safetyCheckpoint: { trigger: 'rewind-safety' }, branch: 1 });
  const forked = await call<{ forks: { sessionId: string }[] }>('POST', '/v1/sessions/{id}/fork', {
    ...s,
    body: { from: paused.json.index, paused: true },
  });
  const branched = await call<{ forks: { sessionId: string }[] }>('POST', '/v1/sessions/{id}/branch', {
    ...s,
    body: { paused: true },
  });
  const fork = forked.json.forks[0]!.sessionId;
  expect((await call('GET', '/v1/sessions/{id}', { id: fork })).json).toMatchObject({ forkedFrom: { sessionId } });

  const page = await call<{ entries: { kind: string; index: number }[] }>('GET', '/v1/sessions/{id}/checkpoints', {
    ...s,
    query: 'all=true&limit=1000',
  });
  const kinds = new Set(page.json.entries.map((e) => e.kind));
  for (const kind of ['checkpoint', 'restored', 'verified', 'configured', 'rewound', 'forked'])
    expect(kinds).toContain(kind);
  for (const entry of page.json.entries) {
    expect((await call('GET', '/v1/sessions/{id}/checkpoints/{index}', { ...s, index: entry.index })).status).toBe(200);
  }
  const listed = await call<{ sessions: { sessionId: string }[] }>('GET', '/v1/sessions', { query: 'limit=1000' });
  expect(listed.json.sessions.map((x) => x.sessionId)).toEqual(expect.arrayContaining([sessionId, fork]));

  const stopped = await call('POST', '/v1/sessions/{id}/stop', s);
  expect(stopped.json).toMatchObject({ phase: 'completed', finalCheckpoint: { trigger: 'stop' } });
  expect((await call('GET', '/v1/sessions/{id}', s)).json).toMatchObject({ phase: 'completed', runtime: null });
  for (const other of [fork, branched.json.forks[0]!.sessionId]) {
    expect((await call('POST', '/v1/sessions/{id}/stop', { id: other })).json).toMatchObject({ finalCheckpoint: null });
  }
}, 120_000);

test('a conversation session: append and regenerate', async () => {
  const sessionId = id('talk');
  const s = { id: sessionId };
  await call('POST', '/v1/sessions', { body: { sessionId, runtime: { kind: 'conversation' } } });
  // The last assistant turn starts after the checkpointed user turn: regenerate forks from there.
  const user = { role: 'user', content: 'hello' };
  const appended = await call('POST', '/v1/sessions/{id}/append', {
    ...s,
    body: { messages: [user], checkpoint: true },
  });
  expect(appended.json).toMatchObject({ messageCount: 1, firstIndex: 0, checkpoint: { messageCount: 1 } });
  const answer = { role: 'assistant', content: 'hi' };
  const plain = await call('POST', '/v1/sessions/{id}/append', { ...s, body: { messages: [answer] } });
  expect(plain.json).toMatchObject({ messageCount: 2, firstIndex: 1, checkpoint: null });
  expect((await call('GET', '/v1/sessions/{id}', s)).json).toMatchObject({ messageCount: 2 });
  const regenerated = await call<{ forks: { sessionId: string }[] }>('POST', '/v1/sessions/{id}/regenerate', s);
  expect(regenerated.status).toBe(200);
  for (const other of [sessionId, regenerated.json.forks[0]!.sessionId]) {
    await call('POST', '/v1/sessions/{id}/stop', { id: other });
  }
}, 120_000);

test('a start that does not wait, and problems', async () => {
  const sessionId = id('nowait');
  const sent = await call('POST', '/v1/sessions', {
    query: 'wait=false',
    body: { sessionId, runtime: { kind: 'memory' } },
  });
  expect(sent).toEqual({ status: 202, json: { sessionId } });
  await eventually(async () => (await call('GET', '/v1/sessions/{id}', { id: sessionId })).status === 200, 10_000);
  // Problems: bad input (with its issues), a closed session, none at all, no key.
  const bad = await call('POST', '/v1/sessions/{id}/checkpoint', { id: sessionId, body: { label: 7 } });
  expect(bad.json).toMatchObject({ status: 400, code: 'InvalidInput', issues: [{ path: ['label'] }] });
  await call('POST', '/v1/sessions/{id}/stop', { id: sessionId });
  expect((await call('POST', '/v1/sessions/{id}/pause', { id: sessionId })).status).toBe(409);
  expect((await call('GET', '/v1/sessions/{id}', { id: id('nobody') })).status).toBe(404);
  expect((await call('GET', '/v1/sessions', { noKey: true })).status).toBe(401);
}, 60_000);
