import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import type { ForkResult, RewindResult, SessionStatus, TimelineEntry } from '../../src/api';
import type { CheckpointRef } from '../../src/domain/schemas';
import type { TimelinePage } from '../../src/client/session-client';
import { ApiKeys, generateKey, hashKey, startGateway, type Problem, type RunningGateway } from '../../src/gateway';
import { eventually, startTestSystem, type TestSystem } from '../helpers/temporal';

/** The real gateway on a free loopback port, in front of real workers on the run's Temporal dev server. */
let sys: TestSystem;
let gateway: RunningGateway;
let keysFile: string;
const admin = generateKey();
const viewer = generateKey();

function writeKeys(keys: { id: string; key: string; role: string }[]): void {
  const records = keys.map(({ id, key, role }) => ({ id, sha256: hashKey(key), tenant: 'default', role }));
  // A new file under a new name, then renamed: a reader never sees half of it.
  fs.writeFileSync(`${keysFile}.tmp`, JSON.stringify({ keys: records }));
  fs.renameSync(`${keysFile}.tmp`, keysFile);
}

beforeAll(async () => {
  sys = await startTestSystem();
  keysFile = path.join(sys.dir, 'keys.json');
  writeKeys([
    { id: 'admin', key: admin, role: 'admin' },
    { id: 'viewer', key: viewer, role: 'viewer' },
  ]);
  gateway = await startGateway({
    port: 0,
    sessions: sys.sessions,
    keys: new ApiKeys(keysFile),
    ready: async () => {
      await sys.client.connection.workflowService.getSystemInfo({});
      return true;
    },
    maxBodyBytes: 64 * 1024,
    logError: () => undefined,
  });
}, 60_000);
afterAll(async () => {
  await gateway?.close();
  await sys?.close();
});

const id = (name: string) => `${name}-${crypto.randomUUID().slice(0, 8)}`;

/** A response's JSON, typed as the route's result (`Problem & T` covers error bodies in the same assertions). */
type Body<T> = T & Partial<Problem>;

async function call<T = Record<string, unknown>>(
  method: string,
  route: string,
  { key = admin, body, headers = {} }: { key?: string | null; body?: unknown; headers?: Record<string, string> } = {},
): Promise<{ status: number; type: string | null; json: Body<T>; headers: Headers }> {
  const res = await fetch(`${gateway.url}${route}`, {
    method,
    headers: {
      ...(key ? { authorization: `Bearer ${key}` } : {}),
      ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
      ...headers,
    },
    body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await res.text();
  return {
    status: res.status,
    type: res.headers.get('content-type'),
    json: (text ? JSON.parse(text) : null) as Body<T>,
    headers: res.headers,
  };
}

interface OpenApiDoc {
  openapi: string;
  paths: Record<string, { post?: { requestBody: { content: Record<string, { schema: unknown }> } } }>;
}

/** What must never be in an error body: a stack trace or a path of the worker's machine. */
function expectClean(body: unknown): void {
  const text = JSON.stringify(body);
  expect(text).not.toMatch(/\n\s+at |\.ts:\d+|node_modules|\/tmp\//);
}

test('health, readiness and the OpenAPI document, which names every route', async () => {
  expect(await call('GET', '/healthz', { key: null })).toMatchObject({ status: 200, json: { ok: true } });
  expect(await call('GET', '/readyz', { key: null })).toMatchObject({ status: 200, json: { ok: true } });
  const doc = await call<OpenApiDoc>('GET', '/v1/openapi.json', { key: null });
  expect(doc.status).toBe(200);
  expect(doc.json.openapi).toBe('3.1.0');
  const paths = Object.keys(doc.json.paths).sort();
  for (const control of ['checkpoint', 'pause', 'resume', 'stop', 'verify', 'rewind', 'fork', 'branch', 'configure']) {
    expect(paths).toContain(`/v1/sessions/{id}/${control}`);
  }
  expect(paths).toEqual(expect.arrayContaining(['/v1/sessions', '/v1/sessions/{id}', '/v1/sessions/{id}/checkpoints']));
  // And as a page for people: every route, self-contained.
  const page = await fetch(`${gateway.url}/docs`);
  expect(page.headers.get('content-type')).toContain('text/html');
  const html = await page.text();
  for (const p of paths) expect(html).toContain(`<code>${p}</code>`);
  expect(html).not.toMatch(/<script|https?:\/\/(?!127\.0\.0\.1)/);
  // The start body is the workflow's own schema: strict, with the session id's pattern.
  const start = doc.json.paths['/v1/sessions']!.post!.requestBody.content['application/json']!.schema;
  expect(JSON.stringify(start)).toContain('sessionId');
});

test('a session end to end over HTTP: start, checkpoint once per key, pause, resume, timeline, rewind, fork, stop', async () => {
  const sessionId = id('http');
  const started = await call<SessionStatus>('POST', '/v1/sessions', {
    body: { sessionId, runtime: { kind: 'memory', initialState: 'v1' } },
  });
  expect(started).toMatchObject({ status: 201, json: { sessionId, phase: 'running' } });
  const instance = started.json.runtime!.instanceId;

  const key = crypto.randomUUID();
  const first = await call<CheckpointRef>('POST', `/v1/sessions/${sessionId}/checkpoint`, {
    body: { label: 'v1' },
    headers: { 'idempotency-key': key },
  });
  expect(first.status).toBe(200);
  const again = await call<CheckpointRef>('POST', `/v1/sessions/${sessionId}/checkpoint`, {
    body: { label: 'v1' },
    headers: { 'idempotency-key': key },
  });
  expect(again.json.checkpointId).toBe(first.json.checkpointId);

  sys.memory.write(instance, 'v2');
  const paused = await call<CheckpointRef>('POST', `/v1/sessions/${sessionId}/pause`, { body: { reason: 'lunch' } });
  expect(paused).toMatchObject({ status: 200, json: { trigger: 'pause' } });
  expect((await call<SessionStatus>('GET', `/v1/sessions/${sessionId}`)).json.phase).toBe('paused');
  const twice = await call('POST', `/v1/sessions/${sessionId}/pause`);
  expect(twice).toMatchObject({ status: 409, json: { code: 'InvalidTransition', sessionId } });
  expect((await call('POST', `/v1/sessions/${sessionId}/resume`)).status).toBe(200);

  const page = await call<TimelinePage>('GET', `/v1/sessions/${sessionId}/checkpoints?limit=100`, { key: viewer });
  expect(page.status).toBe(200);
  const checkpoints = page.json.entries.flatMap((e: TimelineEntry) => (e.kind === 'checkpoint' ? [e.checkpoint] : []));
  expect(checkpoints.map((c) => c.checkpointId)).toEqual([first.json.checkpointId, paused.json.checkpointId]);
  const one = await call('GET', `/v1/sessions/${sessionId}/checkpoints/${first.json.index}`, { key: viewer });
  expect(one).toMatchObject({ status: 200, json: { index: first.json.index, kind: 'checkpoint' } });
  expect(await call('GET', `/v1/sessions/${sessionId}/checkpoints/9999`)).toMatchObject({
    status: 404,
    json: { code: 'NotFound', sessionId },
  });

  // The resume's restore entry is no checkpoint: the refusal names the nearest one, for a caller to pass back.
  const restore = page.json.entries.find((e: TimelineEntry) => e.kind === 'restored')!;
  expect(await call('POST', `/v1/sessions/${sessionId}/rewind`, { body: { to: restore.index } })).toMatchObject({
    status: 400,
    json: { code: 'InvalidInput', issues: [{ params: { nearest: paused.json.index, kind: 'restored' } }] },
  });
  const rewound = await call<RewindResult>('POST', `/v1/sessions/${sessionId}/rewind`, {
    body: { to: first.json.index },
  });
  expect(rewound).toMatchObject({ status: 200, json: { restoredFrom: { checkpointId: first.json.checkpointId } } });
  expect(sys.memory.read(rewound.json.runtime!.instanceId).toString('utf8')).toBe('v1');

  const forked = await call<ForkResult>('POST', `/v1/sessions/${sessionId}/fork`, {
    body: { from: paused.json.index, paused: true },
  });
  expect(forked.status).toBe(200);
  const forkId = forked.json.forks[0]!.sessionId;
  expect((await call('GET', `/v1/sessions/${forkId}`)).json).toMatchObject({
    phase: 'paused',
    forkedFrom: { sessionId },
  });

  const listed = await call<{ sessions: { sessionId: string }[] }>('GET', '/v1/sessions?phase=running', {
    key: viewer,
  });
  expect(listed.json.sessions.map((s) => s.sessionId)).toContain(sessionId);

  expect(await call('POST', `/v1/sessions/${sessionId}/stop`, { body: { checkpoint: false } })).toMatchObject({
    status: 200,
    json: { phase: 'completed' },
  });
  expect(await call('POST', `/v1/sessions/${sessionId}/checkpoint`)).toMatchObject({
    status: 409,
    json: { code: 'SessionClosed' },
  });
  await call('POST', `/v1/sessions/${forkId}/stop`);
}, 120_000);

test('bad input is a problem document with zod issues, and changes nothing', async () => {
  // snake_case where the API speaks camelCase: refused by the workflow's strict schema, field by field.
  const snake = await call('POST', '/v1/sessions', { body: { session_id: 'x1', runtime: { kind: 'memory' } } });
  expect(snake.status).toBe(400);
  expect(snake.type).toBe('application/problem+json');
  expect(snake.json).toMatchObject({ code: 'InvalidInput', type: 'urn:durable-sessions:problem:InvalidInput' });
  expect((snake.json.issues as { path: unknown[] }[]).map((i) => i.path.join('.'))).toEqual(
    expect.arrayContaining(['sessionId']),
  );
  expectClean(snake.json);
  expect(snake.json).toMatchInlineSnapshot(`
   {
     "code": "InvalidInput",
     "detail": "invalid input: sessionId: Invalid input: expected string, received undefined; input: unknown field "session_id" (did you mean "sessionId"?)",
     "issues": [
       {
         "code": "invalid_type",
         "message": "Invalid input: expected string, received undefined",
         "path": [
           "sessionId",
         ],
       },
       {
         "code": "unrecognized_keys",
         "message": "unknown field "session_id" (did you mean "sessionId"?)",
         "path": [],
       },
     ],
     "status": 400,
     "title": "InvalidInput",
     "type": "urn:durable-sessions:problem:InvalidInput",
   }
  `);

  const notJson = await call('POST', '/v1/sessions', { body: '{"sessionId":' });
  expect(notJson).toMatchObject({
    status: 400,
    json: { code: 'InvalidInput', detail: 'the request body is not JSON' },
  });

  const traversal = await call('GET', '/v1/sessions/..x');
  expect(traversal).toMatchObject({ status: 400, json: { code: 'InvalidInput' } });
  const unknown = await call('GET', `/v1/sessions/${id('nobody')}`);
  expect(unknown).toMatchObject({ status: 404, json: { code: 'SessionNotFound' } });
  expectClean(unknown.json);

  const big = await call('POST', '/v1/sessions', {
    body: { sessionId: id('big'), runtime: { kind: 'memory', initialState: 'x'.repeat(100_000) } },
  });
  expect(big).toMatchObject({ status: 413, json: { code: 'PayloadTooLarge' } });

  const sessionId = id('dup');
  expect((await call('POST', '/v1/sessions', { body: { sessionId, runtime: { kind: 'memory' } } })).status).toBe(201);
  const dup = await call('POST', '/v1/sessions', { body: { sessionId, runtime: { kind: 'memory' } } });
  expect(dup).toMatchObject({ status: 409, json: { code: 'SessionAlreadyExists', sessionId } });
  const mismatch = await call('POST', `/v1/sessions/${sessionId}/checkpoint`, {
    body: { idempotencyKey: 'a' },
    headers: { 'idempotency-key': 'b' },
  });
  expect(mismatch).toMatchObject({ status: 400, json: { code: 'InvalidInput' } });
  const extra = await call('POST', `/v1/sessions/${sessionId}/pause`, { body: { reason: 'x', force: true } });
  expect(extra).toMatchObject({ status: 400, json: { code: 'InvalidInput' } });
  // Nothing of the refused calls happened.
  const status = (await call('GET', `/v1/sessions/${sessionId}`)).json;
  expect(status).toMatchObject({ phase: 'running', checkpointCount: 0 });
  await call('POST', `/v1/sessions/${sessionId}/stop`, { body: { checkpoint: false } });
  expect(await call('GET', '/v1/nothing-here')).toMatchObject({ status: 404, json: { code: 'NotFound' } });
}, 60_000);

test('a control the runtime kind cannot serve is 400 InvalidInput and leaves no timeline entry', async () => {
  const sessionId = id('wrong-kind');
  await call('POST', '/v1/sessions', { body: { sessionId, runtime: { kind: 'memory' } } });
  const before = await call<TimelinePage>('GET', `/v1/sessions/${sessionId}/checkpoints`);
  for (const [control, body] of [
    ['append', { messages: [{ role: 'user', content: 'hi' }] }],
    ['regenerate', {}],
  ] as const) {
    const refused = await call('POST', `/v1/sessions/${sessionId}/${control}`, { body });
    expect(refused).toMatchObject({
      status: 400,
      json: {
        code: 'InvalidInput',
        detail: `${control} applies to conversation sessions; session ${sessionId} is a memory session`,
      },
    });
  }
  expect((await call<TimelinePage>('GET', `/v1/sessions/${sessionId}/checkpoints`)).json).toEqual(before.json);
  expect((await call('POST', `/v1/sessions/${sessionId}/stop`)).status).toBe(200);
});

test('keys: none or a wrong one is 401, a viewer may only read, and a rotated file applies without a restart', async () => {
  const none = await call('GET', '/v1/sessions', { key: null });
  expect(none).toMatchObject({ status: 401, json: { code: 'Unauthorized' } });
  expect(none.headers.get('www-authenticate')).toBe('Bearer');
  expect(none.json).toMatchInlineSnapshot(`
   {
     "code": "Unauthorized",
     "detail": "a valid API key is required (Bearer)",
     "status": 401,
     "title": "Unauthorized",
     "type": "urn:durable-sessions:problem:Unauthorized",
   }
  `);
  expect((await call('GET', '/v1/sessions', { key: 'dsk_not-a-key' })).status).toBe(401);
  expect((await call('GET', '/v1/sessions', { key: viewer })).status).toBe(200);
  const start = await call('POST', '/v1/sessions', {
    key: viewer,
    body: { sessionId: id('v'), runtime: { kind: 'memory' } },
  });
  expect(start).toMatchObject({ status: 403, json: { code: 'Forbidden' } });

  // Rotation: the viewer's key is revoked and a new one added, by editing the file.
  const rotated = generateKey();
  writeKeys([
    { id: 'admin', key: admin, role: 'admin' },
    { id: 'viewer-2', key: rotated, role: 'viewer' },
  ]);
  await eventually(async () => (await call('GET', '/v1/sessions', { key: viewer })).status === 401, 5_000);
  expect((await call('GET', '/v1/sessions', { key: rotated })).status).toBe(200);

  // A broken file keeps the keys loaded before it: nobody is locked out, nobody let in.
  fs.writeFileSync(keysFile, '{ not json');
  await new Promise((r) => setTimeout(r, 700));
  expect((await call('GET', '/v1/sessions', { key: rotated })).status).toBe(200);
  expect((await call('GET', '/v1/sessions', { key: viewer })).status).toBe(401);
  writeKeys([
    { id: 'admin', key: admin, role: 'admin' },
    { id: 'viewer', key: viewer, role: 'viewer' },
  ]);
  await eventually(async () => (await call('GET', '/v1/sessions', { key: viewer })).status === 200, 5_000);

  // Keys given as JSON (DS_API_KEYS) instead: the same records, fixed; a mistake names the variable.
  const record = { id: 'env', sha256: hashKey(admin), tenant: 'acme', role: 'viewer' };
  const inline = new ApiKeys({ json: JSON.stringify({ keys: [record] }), name: 'DS_API_KEYS' });
  expect(inline.authenticate(admin)).toEqual({ keyId: 'env', tenant: 'acme', role: 'viewer' });
  expect(inline.authenticate(viewer)).toBeUndefined();
  expect(() => new ApiKeys({ json: '{"keys":[{"id":"x"}]}', name: 'DS_API_KEYS' })).toThrow(
    /^DS_API_KEYS: keys\.0\.sha256/,
  );
  expect(() => new ApiKeys({ json: 'keys', name: 'DS_API_KEYS' })).toThrow(/^DS_API_KEYS is not JSON/);
});

test('docs/openapi.json is the document the gateway serves (npm run openapi writes it)', async () => {
  const committed: unknown = JSON.parse(
    fs.readFileSync(path.join(__dirname, '..', '..', 'docs', 'openapi.json'), 'utf8'),
  );
  const served = await call('GET', '/v1/openapi.json', { key: null });
  expect(served.json).toEqual(committed);
});

interface SseEvent {
  event: string;
  id?: string;
  data: unknown;
}

/** Reads a session's event stream until `until` holds (or `timeoutMs` passes), then closes it. */
async function readEvents(
  sessionId: string,
  until: (events: SseEvent[]) => boolean,
  { lastEventId, timeoutMs = 30_000 }: { lastEventId?: string; timeoutMs?: number } = {},
): Promise<SseEvent[]> {
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(), timeoutMs);
  const events: SseEvent[] = [];
  try {
    const res = await fetch(`${gateway.url}/v1/sessions/${sessionId}/events`, {
      headers: { authorization: `Bearer ${viewer}`, ...(lastEventId ? { 'last-event-id': lastEventId } : {}) },
      signal: abort.signal,
    });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toContain('text/event-stream');
    const decoder = new TextDecoder();
    let buffer = '';
    for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
      buffer += decoder.decode(chunk, { stream: true });
      let end: number;
      while ((end = buffer.indexOf('\n\n')) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const fields = Object.fromEntries(
          block
            .split('\n')
            .filter((l) => l && !l.startsWith(':'))
            .map((l) => [l.slice(0, l.indexOf(':')), l.slice(l.indexOf(':') + 1).trimStart()]),
        ) as Record<string, string>;
        if (!fields.event) continue;
        events.push({ event: fields.event, id: fields.id, data: JSON.parse(fields.data ?? 'null') });
      }
      if (until(events)) break;
    }
  } catch (err) {
    if (!abort.signal.aborted) throw err;
  } finally {
    clearTimeout(timer);
    abort.abort();
  }
  return events;
}

const phases = (events: SseEvent[]) =>
  events.filter((e) => e.event === 'phase').map((e) => (e.data as { phase: string }).phase);

test('events: a pause streams its progress, then paused; a reconnect with Last-Event-ID misses no entry', async () => {
  const sessionId = id('events');
  const started = await call<SessionStatus>('POST', '/v1/sessions', {
    body: { sessionId, runtime: { kind: 'memory' } },
  });
  // Incompressible state, large enough that its capture is seen under way.
  sys.memory.write(started.json.runtime!.instanceId, crypto.randomBytes(48 * 1024 * 1024));

  const watching = readEvents(sessionId, (events) => phases(events).includes('paused'));
  await new Promise((r) => setTimeout(r, 500));
  const paused = await call<CheckpointRef>('POST', `/v1/sessions/${sessionId}/pause`);
  expect(paused.status).toBe(200);
  const events = await watching;
  expect(phases(events)).toEqual(['running', 'pausing', 'paused']);
  const progress = events
    .filter((e) => e.event === 'progress')
    .map((e) => e.data as { activity: string; bytesDone: number });
  expect(progress.length).toBeGreaterThan(0);
  expect(progress[0]).toMatchObject({ activity: 'captureCheckpoint' });
  // Progress comes before the pause is done, and the pause's checkpoint is a timeline entry with its index as id.
  expect(events.findIndex((e) => e.event === 'progress')).toBeLessThan(
    events.findIndex((e) => phases([e])[0] === 'paused'),
  );
  const pauseEntry = events.find((e) => e.event === 'timeline' && (e.data as TimelineEntry).kind === 'checkpoint');
  expect(pauseEntry).toMatchObject({
    id: String(paused.json.index),
    data: { checkpoint: { checkpointId: paused.json.checkpointId } },
  });

  // Away while the session resumes and checkpoints twice; back with the last id seen.
  const lastSeen = events.filter((e) => e.id).at(-1)!.id!;
  await call('POST', `/v1/sessions/${sessionId}/resume`);
  const c1 = await call<CheckpointRef>('POST', `/v1/sessions/${sessionId}/checkpoint`);
  const c2 = await call<CheckpointRef>('POST', `/v1/sessions/${sessionId}/checkpoint`);
  const again = await readEvents(sessionId, (es) => es.some((e) => e.id === String(c2.json.index)), {
    lastEventId: lastSeen,
  });
  const ids = again.filter((e) => e.id).map((e) => Number(e.id));
  expect(ids[0]).toBe(Number(lastSeen) + 1);
  ids.forEach((n, i) => expect(n).toBe(ids[0]! + i));
  expect(ids).toEqual(expect.arrayContaining([c1.json.index, c2.json.index]));
  expect(phases(again)[0]).toBe('running');

  // An ended session's stream ends by itself after its last entries.
  await call('POST', `/v1/sessions/${sessionId}/stop`, { body: { checkpoint: false } });
  const ended = await readEvents(sessionId, () => false, { timeoutMs: 10_000 });
  expect(phases(ended)).toEqual(['completed']);
  expect(await call('GET', `/v1/sessions/${id('nobody')}/events`)).toMatchObject({
    status: 404,
    json: { code: 'SessionNotFound' },
  });
}, 120_000);

test('a key over its request rate gets 429 with Retry-After, other keys do not', async () => {
  const limited = await startGateway({
    port: 0,
    sessions: sys.sessions,
    keys: new ApiKeys(keysFile),
    ready: async () => true,
    ratePerKey: 2,
  });
  try {
    const get = (key: string) =>
      fetch(`${limited.url}/v1/sessions?limit=1`, { headers: { authorization: `Bearer ${key}` } });
    // A burst of twice the rate goes through; the next is refused until a token is back.
    const statuses: number[] = [];
    for (let i = 0; i < 5; i++) statuses.push((await get(admin)).status);
    expect(statuses.slice(0, 4)).toEqual([200, 200, 200, 200]);
    const over = await get(admin);
    expect(over.status).toBe(429);
    expect(Number(over.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    expect(await over.json()).toMatchObject({ code: 'RateLimited', status: 429 });
    expect((await get(viewer)).status).toBe(200);
  } finally {
    await limited.close();
  }
});

test('the list filters by fork family and runtime and pages by cursor, each session once', async () => {
  const source = id('family');
  await call('POST', '/v1/sessions', { body: { sessionId: source, runtime: { kind: 'memory' } } });
  const ref = await call<CheckpointRef>('POST', `/v1/sessions/${source}/checkpoint`);
  const forked = await call<ForkResult>('POST', `/v1/sessions/${source}/fork`, {
    body: { from: ref.json.index, count: 2, paused: true },
  });
  const forkIds = forked.json.forks.map((f) => f.sessionId).sort();
  type Listed = { sessions: { sessionId: string; phase: string }[]; next: string | null };
  const family = await eventually(async () => {
    const page = await call<Listed>('GET', `/v1/sessions?forkedFrom=${source}`, { key: viewer });
    return page.json.sessions.length === 2 ? page.json : undefined;
  }, 15_000);
  expect(family.sessions.map((s) => s.sessionId).sort()).toEqual(forkIds);
  expect(family.sessions.every((s) => s.phase === 'paused')).toBe(true);

  // One at a time through the memory sessions: every page's cursor leads to the next, no session twice.
  const seen: string[] = [];
  let cursor: string | null = '';
  while (cursor !== null) {
    const page: { json: Listed } = await call<Listed>(
      'GET',
      `/v1/sessions?runtime=memory&limit=1${cursor ? `&cursor=${cursor}` : ''}`,
      { key: viewer },
    );
    seen.push(...page.json.sessions.map((s) => s.sessionId));
    cursor = page.json.next;
  }
  expect(new Set(seen).size).toBe(seen.length);
  expect(seen).toEqual(expect.arrayContaining([source, ...forkIds]));
  expect(await call('GET', '/v1/sessions?runtime=vm', { key: viewer })).toMatchObject({
    status: 400,
    json: { code: 'InvalidInput' },
  });
  expect(await call('GET', '/v1/sessions?cursor=not%20a%20cursor', { key: viewer })).toMatchObject({ status: 400 });
  // A cursor that was never handed out (Temporal would retry on it for 20 s, then fail), or one of another filter.
  const zeros = Buffer.alloc(24).toString('base64url');
  expect(await call('GET', `/v1/sessions?cursor=${zeros}`, { key: viewer })).toMatchObject({
    status: 400,
    json: { code: 'InvalidInput', issues: [{ path: ['cursor'] }] },
  });
  const memoryPage = await call<Listed>('GET', '/v1/sessions?runtime=memory&limit=1', { key: viewer });
  expect(memoryPage.json.next).not.toBeNull();
  expect(
    await call('GET', `/v1/sessions?runtime=workspace&limit=1&cursor=${memoryPage.json.next!}`, { key: viewer }),
  ).toMatchObject({ status: 400, json: { code: 'InvalidInput' } });
  for (const s of [source, ...forkIds]) await call('POST', `/v1/sessions/${s}/stop`, { body: { checkpoint: false } });
});

test('labels: the list filters by one, forks keep them or take their own, and a bad one is refused', async () => {
  const team = `team=${crypto.randomUUID().slice(0, 8)}`;
  const sessionId = id('labelled');
  const started = await call('POST', '/v1/sessions', {
    body: { sessionId, labels: [team, 'nightly'], runtime: { kind: 'memory' } },
  });
  expect(started.status).toBe(201);
  await call('POST', '/v1/sessions', { body: { sessionId: id('unlabelled'), runtime: { kind: 'memory' } } });
  const forked = await call<ForkResult>('POST', `/v1/sessions/${sessionId}/fork`, {
    body: { count: 2, paused: true },
  });
  const relabelled = await call<ForkResult>('POST', `/v1/sessions/${sessionId}/fork`, {
    body: { paused: true, overrides: { labels: ['other'] } },
  });
  type Listed = { sessions: { sessionId: string }[] };
  const listed = await eventually(async () => {
    const page = await call<Listed>('GET', `/v1/sessions?label=${encodeURIComponent(team)}`, { key: viewer });
    return page.json.sessions.length === 3 ? page.json : undefined;
  }, 15_000);
  expect(listed.sessions.map((s) => s.sessionId).sort()).toEqual(
    [sessionId, ...forked.json.forks.map((f) => f.sessionId)].sort(),
  );
  const other = await call<Listed>('GET', '/v1/sessions?label=other', { key: viewer });
  expect(other.json.sessions.map((s) => s.sessionId)).toContain(relabelled.json.forks[0]!.sessionId);

  const bad = await call('POST', '/v1/sessions', {
    body: { sessionId: id('bad'), labels: ["x' OR 1=1"], runtime: { kind: 'memory' } },
  });
  expect(bad).toMatchObject({ status: 400, json: { code: 'InvalidInput' } });
  expect(await call('GET', `/v1/sessions?label=${encodeURIComponent("x' OR 'a'='a")}`)).toMatchObject({
    status: 400,
    json: { code: 'InvalidInput' },
  });
});

test('a start whose command fails at once is a RuntimeFailed problem; the session then answers SessionFailed', async () => {
  const sessionId = id('fails');
  const runtime = { kind: 'workspace', command: ['sh', '-c', 'echo boom >&2; exit 3'], settleMs: 10_000 };
  const start = await call('POST', '/v1/sessions', { body: { sessionId, runtime } });
  expect(start.status).toBe(422);
  expect(start.type).toBe('application/problem+json');
  expect(start.json).toMatchObject({
    code: 'RuntimeFailed',
    sessionId,
    failure: { type: 'RuntimeFailed', exitCode: 3, outputTail: ['boom'] },
  });
  expect(start.json.detail).toContain('exited with code 3');

  const status = await call<SessionStatus>('GET', `/v1/sessions/${sessionId}`);
  expect(status.status).toBe(200);
  expect(status.json).toMatchObject({ phase: 'failed', failure: { type: 'RuntimeFailed', exitCode: 3 } });

  const pause = await call('POST', `/v1/sessions/${sessionId}/pause`, { body: {} });
  expect(pause.status).toBe(409);
  expect(pause.json).toMatchObject({
    code: 'SessionFailed',
    sessionId,
    failure: { type: 'RuntimeFailed', exitCode: 3, outputTail: ['boom'] },
  });
});
