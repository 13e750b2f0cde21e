import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import path from 'node:path';
import type { SessionStatus } from '../../src/api';
import { IdempotencyKeyReusedError } from '../../src/client';
import { ApiKeys, generateKey, hashKey, type Problem, type RunningGateway } from '../../src/gateway';
import { startTestGateway } from '../helpers/gateway';
import { eventually, startTestSystem, type TestSystem } from '../helpers/temporal';

/** The HTTP edge: what the gateway refuses before anything reaches a session, against a real gateway and Temporal. */
let sys: TestSystem;
let gateway: RunningGateway;
let keys: Record<string, string>;
let keysFile: string;

beforeAll(async () => {
  sys = await startTestSystem();
  ({ gateway, keys, keysFile } = await startTestGateway(sys, [
    { id: 'admin' },
    { id: 'viewer', role: 'viewer' },
    { id: 'operator', role: 'operator' },
    ...WATCHERS.map((id) => ({ id, role: 'viewer' as const })),
  ]));
}, 60_000);
afterAll(async () => {
  await gateway?.close();
  await sys?.close();
});

/** Keys that each watch a stream while their record is changed. */
const WATCHERS = ['watch-revoked', 'watch-role', 'watch-tenant'] as const;

const record = (id: string, key: string, role: string, tenant = 'default') => ({
  id,
  sha256: hashKey(key),
  tenant,
  role,
});
const baseRecords = () => [
  record('admin', keys.admin!, 'admin'),
  record('viewer', keys.viewer!, 'viewer'),
  record('operator', keys.operator!, 'operator'),
  ...WATCHERS.map((w) => record(w, keys[w]!, 'viewer')),
];
/** A new file renamed over the old: a reader never sees half of it. */
function write(file: string, records: unknown[]): void {
  fs.writeFileSync(`${file}.tmp`, JSON.stringify({ keys: records }));
  fs.renameSync(`${file}.tmp`, file);
}

const id = (name: string) => `${name}-${crypto.randomUUID().slice(0, 8)}`;

/** A raw request: the body as given (string or bytes), the headers as given. */
async function raw(
  method: string,
  route: string,
  {
    key = keys.admin,
    body,
    headers = {},
  }: { key?: string | null; body?: string | Uint8Array; headers?: Record<string, string> } = {},
): Promise<{ status: number; json: Partial<Problem> & Record<string, unknown>; headers: Headers }> {
  const res = await fetch(`${gateway.url}${route}`, {
    method,
    headers: { ...(key ? { authorization: `Bearer ${key}` } : {}), ...headers },
    body,
  });
  const text = await res.text();
  return { status: res.status, json: (text ? JSON.parse(text) : {}) as Record<string, unknown>, headers: res.headers };
}

const json = (body: string, headers: Record<string, string> = {}) => ({
  body,
  headers: { 'content-type': 'application/json', ...headers },
});

async function startMemory(sessionId = id('edge')): Promise<string> {
  const res = await raw('POST', '/v1/sessions', json(JSON.stringify({ sessionId, runtime: { kind: 'memory' } })));
  expect(res.status).toBe(201);
  return sessionId;
}

async function statusOf(sessionId: string): Promise<SessionStatus> {
  return (await raw('GET', `/v1/sessions/${sessionId}`)).json as unknown as SessionStatus;
}

describe('bodies are application/json in UTF-8', () => {
  test('another content type, or none, is 415 and changes nothing', async () => {
    const sessionId = await startMemory();
    const body = JSON.stringify({ label: 'x' });
    for (const headers of <Record<string, string>[]>[
      { 'content-type': 'text/plain' },
      {},
      { 'content-type': 'application/x-www-form-urlencoded' },
      { 'content-type': 'multipart/form-data; boundary=x' },
    ]) {
      const res = await raw('POST', `/v1/sessions/${sessionId}/checkpoint`, { body, headers });
      expect(res).toMatchObject({ status: 415, json: { code: 'UnsupportedMediaType' } });
    }
    expect((await statusOf(sessionId)).checkpointCount).toBe(0);
  });

  test('a charset other than UTF-8 is 415; UTF-8 said or unsaid is read as UTF-8', async () => {
    const sessionId = await startMemory();
    const latin1 = Buffer.from('{"label":"café"}', 'latin1');
    const refused = await raw('POST', `/v1/sessions/${sessionId}/checkpoint`, {
      body: latin1,
      headers: { 'content-type': 'application/json; charset=latin1' },
    });
    expect(refused).toMatchObject({ status: 415, json: { code: 'UnsupportedMediaType' } });
    const said = await raw(
      'POST',
      `/v1/sessions/${sessionId}/checkpoint`,
      json('{"label":"café"}', { 'content-type': 'application/json; charset=UTF-8' }),
    );
    expect(said).toMatchObject({ status: 200, json: { label: 'café' } });
  });

  test('bytes that are not UTF-8, and an escaped lone surrogate, are 400 and change nothing', async () => {
    const sessionId = await startMemory();
    const latin1 = Buffer.from('{"label":"café"}', 'latin1');
    const bad = await raw('POST', `/v1/sessions/${sessionId}/checkpoint`, {
      body: latin1,
      headers: { 'content-type': 'application/json' },
    });
    expect(bad).toMatchObject({ status: 400, json: { code: 'InvalidInput' } });
    const surrogate = await raw('POST', `/v1/sessions/${sessionId}/checkpoint`, json('{"label":"a\\ud800b"}'));
    expect(surrogate).toMatchObject({ status: 400, json: { code: 'InvalidInput', issues: [{ path: ['label'] }] } });
    // A pair written as two escapes is one character, and welcome.
    const pair = await raw('POST', `/v1/sessions/${sessionId}/checkpoint`, json('{"label":"\\ud83d\\ude00"}'));
    expect(pair).toMatchObject({ status: 200, json: { label: '😀' } });
    expect((await statusOf(sessionId)).checkpointCount).toBe(1);
  });

  test('an empty body is still a control without input', async () => {
    const sessionId = await startMemory();
    expect((await raw('POST', `/v1/sessions/${sessionId}/checkpoint`)).status).toBe(200);
  });
});

describe('keys that JSON.parse would drop or let win', () => {
  test('a repeated key anywhere is 400 InvalidInput naming it; nothing is started', async () => {
    const [first, second] = [id('one'), id('two')];
    const res = await raw(
      'POST',
      '/v1/sessions',
      json(`{"sessionId":"${first}","sessionId":"${second}","runtime":{"kind":"memory"}}`),
    );
    expect(res).toMatchObject({ status: 400, json: { code: 'InvalidInput', issues: [{ path: ['sessionId'] }] } });
    // The same key spelt with an escape is the same key.
    const escaped = await raw(
      'POST',
      '/v1/sessions',
      json(`{"sessionId":"${first}","runtime":{"kind":"memory","k\\u0069nd":"memory"}}`),
    );
    expect(escaped).toMatchObject({ status: 400, json: { issues: [{ path: ['runtime', 'kind'] }] } });
    for (const sessionId of [first, second]) {
      expect((await raw('GET', `/v1/sessions/${sessionId}`)).status).toBe(404);
    }
  });

  test('__proto__, constructor and prototype keys are 400 InvalidInput wherever they are', async () => {
    const sessionId = id('proto');
    for (const [body, path] of [
      [
        `{"sessionId":"${sessionId}","runtime":{"kind":"workspace","command":["sleep","60"],"env":{"__proto__":{"X":"1"}}}}`,
        ['runtime', 'env', '__proto__'],
      ],
      [
        `{"sessionId":"${sessionId}","runtime":{"kind":"workspace","command":["sleep","60"],"files":[{"constructor":1}]}}`,
        ['runtime', 'files', 0, 'constructor'],
      ],
      [`{"sessionId":"${sessionId}","runtime":{"kind":"memory"},"prototype":{}}`, ['prototype']],
    ] as const) {
      const res = await raw('POST', '/v1/sessions', json(body));
      expect(res).toMatchObject({ status: 400, json: { code: 'InvalidInput', issues: [{ path }] } });
    }
    expect((await raw('GET', `/v1/sessions/${sessionId}`)).status).toBe(404);
  });
});

describe('a keys file that lists one hash twice', () => {
  test('is refused: the keys loaded before stay, and the log says why', async () => {
    const file = path.join(sys.dir, `keys-${crypto.randomUUID()}.json`);
    const [a, b] = [generateKey(), generateKey()];
    write(file, [record('ops', a, 'operator'), record('other', b, 'viewer')]);
    const logged: string[] = [];
    const apiKeys = new ApiKeys(file, (m) => logged.push(m));
    // The operator's key listed again as another tenant's admin: the last record would have won.
    write(file, [record('ops', a, 'operator'), record('other', b, 'viewer'), record('root', a, 'admin', 'acme')]);
    await eventually(() => apiKeys.authenticate(a) && logged.length > 0, 5_000);
    expect(logged[0]).toMatch(/keys "ops" and "root" have the same sha256.*keeping the keys loaded before/);
    expect(apiKeys.authenticate(a)).toEqual({ keyId: 'ops', tenant: 'default', role: 'operator' });
    // At start, such a file stops the gateway, as any other bad file does.
    expect(() => new ApiKeys(file)).toThrow(/same sha256/);
  });

  test('through the gateway: the viewer stays a viewer', async () => {
    write(keysFile, [...baseRecords(), record('viewer-too', keys.viewer!, 'admin')]);
    // A request looks at the file when the last look is 500 ms old or more: the next one reads it.
    await new Promise((r) => setTimeout(r, 600));
    const sessionId = id('dupkey');
    const start = await raw('POST', '/v1/sessions', {
      key: keys.viewer,
      ...json(JSON.stringify({ sessionId, runtime: { kind: 'memory' } })),
    });
    expect(start).toMatchObject({ status: 403, json: { code: 'Forbidden' } });
    write(keysFile, baseRecords());
  });
});

describe('list cursors are sealed with the gateway’s secret', () => {
  test('a cursor forged over the predictable query, or altered, is 400 InvalidInput, never a retry and a 500', async () => {
    await startMemory();
    await startMemory();
    const first = await raw('GET', '/v1/sessions?limit=1');
    expect(first.status).toBe(200);
    const next = first.json.next as string;
    expect(typeof next).toBe('string');
    const bytes = Buffer.from(next, 'base64url');
    // One bit of the token flipped.
    bytes[0] = bytes[0]! ^ 1;
    const altered = await raw('GET', `/v1/sessions?limit=1&cursor=${bytes.toString('base64url')}`);
    expect(altered).toMatchObject({ status: 400, json: { code: 'InvalidInput', issues: [{ path: ['cursor'] }] } });
    // A made-up token with a checksum anyone can compute from the query the list runs.
    const query = [
      `WorkflowType = 'sessionWorkflow'`,
      `TaskQueue = '${sys.taskQueue}'`,
      'SessionState IS NOT NULL',
      `ExecutionStatus != 'ContinuedAsNew'`,
      `(SessionTenant = 'default' OR SessionTenant IS NULL)`,
    ].join(' AND ');
    const token = crypto.randomBytes(48);
    const check = crypto.createHash('sha256').update(query).update('\0').update(token).digest().subarray(0, 8);
    const forged = Buffer.concat([token, check]).toString('base64url');
    const res = await raw('GET', `/v1/sessions?cursor=${forged}`);
    expect(res).toMatchObject({ status: 400, json: { code: 'InvalidInput', issues: [{ path: ['cursor'] }] } });
    // The real cursor still pages.
    expect((await raw('GET', `/v1/sessions?limit=1&cursor=${next}`)).status).toBe(200);
  }, 60_000);
});

test('HEAD needs what GET needs: a viewer’s HEAD of a readable route is 200', async () => {
  const sessionId = await startMemory();
  for (const route of ['/v1/sessions', `/v1/sessions/${sessionId}`, `/v1/sessions/${sessionId}/checkpoints`]) {
    const res = await fetch(`${gateway.url}${route}`, {
      method: 'HEAD',
      headers: { authorization: `Bearer ${keys.viewer}` },
    });
    expect([route, res.status]).toEqual([route, 200]);
  }
  const none = await fetch(`${gateway.url}/v1/sessions`, { method: 'HEAD' });
  expect(none.status).toBe(401);
});

/** Reads an event stream until it ends (resolves true) or `timeoutMs` passes with it still open (false). */
async function streamEnds(route: string, key: string, timeoutMs: number, opened: () => void): Promise<boolean> {
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(), timeoutMs);
  try {
    const res = await fetch(`${gateway.url}${route}`, {
      headers: { authorization: `Bearer ${key}` },
      signal: abort.signal,
    });
    expect(res.status).toBe(200);
    const reader = res.body!.getReader();
    let seen = '';
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return true;
      seen += Buffer.from(value).toString();
      // Once the first phase is in, the record is changed.
      if (seen.includes('event: phase')) opened();
    }
  } catch (err) {
    if (abort.signal.aborted) return false;
    throw err;
  } finally {
    clearTimeout(timer);
  }
}

describe('an open event stream ends with its key', () => {
  test.each([
    ['revoked', 'watch-revoked', () => baseRecords().filter((r) => r.id !== 'watch-revoked')],
    [
      'moved to another role',
      'watch-role',
      () => baseRecords().map((r) => (r.id === 'watch-role' ? { ...r, role: 'operator' } : r)),
    ],
    [
      'moved to another tenant',
      'watch-tenant',
      () => baseRecords().map((r) => (r.id === 'watch-tenant' ? { ...r, tenant: 'acme' } : r)),
    ],
  ])(
    'a key %s: its stream closes',
    async (_, watcher, changed) => {
      const sessionId = await startMemory();
      let written = false;
      const ended = await streamEnds(`/v1/sessions/${sessionId}/events`, keys[watcher]!, 15_000, () => {
        if (written) return;
        written = true;
        write(keysFile, changed());
      });
      write(keysFile, baseRecords());
      expect(ended).toBe(true);
      // The session goes on: only the stream ended.
      expect((await statusOf(sessionId)).phase).toBe('running');
    },
    30_000,
  );
});

describe('an idempotency key sent again with other input', () => {
  test('over HTTP: 422 IdempotencyKeyReused, and nothing is done; the same input again gets the first answer', async () => {
    const sessionId = await startMemory();
    const route = `/v1/sessions/${sessionId}/checkpoint`;
    const key = { 'idempotency-key': crypto.randomUUID() };
    const first = await raw('POST', route, json('{"label":"a"}', key));
    expect(first).toMatchObject({ status: 200, json: { label: 'a' } });
    const other = await raw('POST', route, json('{"label":"b"}', key));
    expect(other).toMatchObject({ status: 422, json: { code: 'IdempotencyKeyReused', sessionId } });
    // Field order and spacing are not input.
    const again = await raw('POST', route, json('{ "label": "a" }', key));
    expect(again).toMatchObject({ status: 200, json: { checkpointId: first.json.checkpointId } });
    expect((await statusOf(sessionId)).checkpointCount).toBe(1);
  });

  test('in SessionClient: IdempotencyKeyReusedError', async () => {
    const sessionId = await startMemory();
    const handle = sys.sessions.get(sessionId);
    const idempotencyKey = crypto.randomUUID();
    const first = await handle.checkpoint({ label: 'a', idempotencyKey });
    const err = await handle.checkpoint({ label: 'b', idempotencyKey }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(IdempotencyKeyReusedError);
    expect(err).toMatchObject({ code: 'IdempotencyKeyReused', sessionId });
    expect(await handle.checkpoint({ idempotencyKey, label: 'a' })).toEqual(first);
    // A pause under the same key is another control: InvalidInput, as before.
    await expect(handle.pause({ idempotencyKey })).rejects.toMatchObject({ code: 'InvalidInput' });
    expect((await handle.status()).checkpointCount).toBe(1);
  });
});

describe('slow, endless and abandoned requests; guessed keys', () => {
  let edge: RunningGateway;
  let edgeKey: string;
  const errors: unknown[] = [];
  const notes: string[] = [];
  beforeAll(async () => {
    const started = await startTestGateway(sys, [{ id: 'admin' }], {
      timeouts: { headersMs: 500, bodyMs: 1_000, idleMs: 2_000 },
      authFailuresPerSecond: 2,
      logError: (err) => errors.push(err),
      logNote: (line) => notes.push(line),
    });
    edge = started.gateway;
    edgeKey = started.keys.admin!;
  });
  afterAll(() => edge?.close());

  /** A raw connection that sends `text` and then nothing; resolves with what came back once the gateway closes it. */
  function hold(text: string, giveUpMs = 15_000): Promise<{ closed: boolean; answer: string }> {
    const { port } = new URL(edge.url);
    return new Promise((resolve) => {
      const socket = net.connect(Number(port), '127.0.0.1', () => socket.write(text));
      let answer = '';
      socket.on('data', (d) => (answer += d.toString()));
      const timer = setTimeout(() => {
        socket.destroy();
        resolve({ closed: false, answer });
      }, giveUpMs);
      socket.on('close', () => {
        clearTimeout(timer);
        resolve({ closed: true, answer });
      });
      socket.on('error', () => undefined);
    });
  }

  test('headers that never end (slow-loris) are cut off', async () => {
    const held = await Promise.all(
      Array.from({ length: 5 }, () =>
        hold(`GET /v1/sessions HTTP/1.1\r\nHost: x\r\nauthorization: Bearer ${edgeKey}\r\n`),
      ),
    );
    for (const h of held) expect(h.closed).toBe(true);
  }, 30_000);

  test('a chunked body that never ends, with a valid key, is answered 408 and closed', async () => {
    const sessionId = await startMemory();
    const held = await hold(
      `POST /v1/sessions/${sessionId}/checkpoint HTTP/1.1\r\nHost: x\r\nauthorization: Bearer ${edgeKey}\r\n` +
        'content-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n2\r\n{"\r\n',
    );
    expect(held.closed).toBe(true);
    expect(held.answer).toMatch(/^HTTP\/1\.1 408/);
    expect((await statusOf(sessionId)).checkpointCount).toBe(0);
  }, 30_000);

  test('a client that goes away mid-body is one quiet line, not an error with a stack', async () => {
    const sessionId = await startMemory();
    const { port } = new URL(edge.url);
    const socket = net.connect(Number(port), '127.0.0.1');
    await new Promise((r) => socket.once('connect', r));
    socket.write(
      `POST /v1/sessions/${sessionId}/checkpoint HTTP/1.1\r\nHost: x\r\nauthorization: Bearer ${edgeKey}\r\n` +
        'content-type: application/json\r\ncontent-length: 1000\r\n\r\n{"label":',
    );
    // Once the gateway has the headers (its answer to a second request on another connection shows it is reading).
    await eventually(async () => (await fetch(`${edge.url}/healthz`)).ok);
    socket.destroy();
    await eventually(() => notes.length > 0, 10_000);
    expect(notes[0]).toMatch(new RegExp(`^client closed POST /v1/sessions/${sessionId}/checkpoint`));
    expect(notes[0]).not.toContain('\n');
    expect(errors).toEqual([]);
  }, 30_000);

  test('wrong keys from one address are throttled: 429 with Retry-After, then even a right key waits', async () => {
    const statuses: number[] = [];
    let retryAfter: string | null = null;
    for (let i = 0; i < 20; i++) {
      const res = await fetch(`${edge.url}/v1/sessions`, { headers: { authorization: `Bearer dsk_guess-${i}` } });
      statuses.push(res.status);
      if (res.status === 429) retryAfter = res.headers.get('retry-after');
    }
    expect(statuses.slice(0, 4)).toEqual([401, 401, 401, 401]);
    expect(statuses).toContain(429);
    expect(Number(retryAfter)).toBeGreaterThanOrEqual(1);
    const right = await fetch(`${edge.url}/v1/sessions`, { headers: { authorization: `Bearer ${edgeKey}` } });
    expect(right.status).toBe(429);
    // Once the address has waited, the right key works.
    await eventually(
      async () =>
        (await fetch(`${edge.url}/v1/sessions`, { headers: { authorization: `Bearer ${edgeKey}` } })).status === 200,
      15_000,
    );
  }, 30_000);
});

/** The events of a stream as they come, until `done` says so (or the stream ends). */
async function collectEvents(
  url: string,
  key: string,
  done: (events: { event: string; data: Record<string, unknown> }[]) => boolean,
  opened?: () => void,
): Promise<{ event: string; data: Record<string, unknown> }[]> {
  const abort = new AbortController();
  const res = await fetch(url, { headers: { authorization: `Bearer ${key}` }, signal: abort.signal });
  expect(res.status).toBe(200);
  const reader = res.body!.getReader();
  const events: { event: string; data: Record<string, unknown> }[] = [];
  let buffer = '';
  try {
    for (;;) {
      const { done: ended, value } = await reader.read();
      if (ended) return events;
      buffer += Buffer.from(value).toString();
      let cut: number;
      while ((cut = buffer.indexOf('\n\n')) >= 0) {
        const block = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        const event = /^event: (.*)$/m.exec(block)?.[1];
        const data = /^data: (.*)$/m.exec(block)?.[1];
        if (event && data) events.push({ event, data: JSON.parse(data) as Record<string, unknown> });
        if (events.length === 1) opened?.();
      }
      if (done(events)) return events;
    }
  } finally {
    abort.abort();
  }
}

describe('event streams', () => {
  test('a pause then a resume at once: the stream sends every phase, paused included', async () => {
    const sessionId = await startMemory();
    const phases = (es: { event: string; data: Record<string, unknown> }[]) =>
      es.filter((e) => e.event === 'phase').map((e) => e.data.phase);
    let controls: Promise<unknown> | undefined;
    const events = await collectEvents(
      `${gateway.url}/v1/sessions/${sessionId}/events`,
      keys.admin!,
      (es) => phases(es).filter((p) => p === 'running').length >= 2,
      () => {
        controls = (async () => {
          await raw('POST', `/v1/sessions/${sessionId}/pause`);
          await raw('POST', `/v1/sessions/${sessionId}/resume`);
        })();
      },
    );
    await controls;
    expect(phases(events)).toEqual(['running', 'pausing', 'paused', 'resuming', 'running']);
  }, 60_000);

  test('the streams of one session share its timeline reads, however far apart they were opened', async () => {
    let reads = 0;
    const counting = new Proxy(sys.sessions, {
      get(target, prop) {
        if (prop === 'get') {
          return (sessionId: string) => {
            const handle = target.get(sessionId);
            const read = handle.timelinePage.bind(handle);
            handle.timelinePage = (input) => {
              reads++;
              return read(input);
            };
            return handle;
          };
        }
        const value = Reflect.get(target, prop) as unknown;
        return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
      },
    });
    const { gateway: shared, keys: sharedKeys } = await startTestGateway({ ...sys, sessions: counting });
    try {
      const sessionId = id('shared');
      const start = await fetch(`${shared.url}/v1/sessions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${sharedKeys.admin}`, 'content-type': 'application/json' },
        body: JSON.stringify({ sessionId, runtime: { kind: 'memory' } }),
      });
      expect(start.status).toBe(201);
      const STREAMS = 30;
      let open = 0;
      let allOpen: () => void = () => undefined;
      const opened = new Promise<void>((r) => (allOpen = r));
      // Opened one after another, a poll apart at most: apart as streams opened under load would be.
      const streams = Array.from({ length: STREAMS }, async (_, i) => {
        await sleep((i * 37) % 250);
        return collectEvents(
          `${shared.url}/v1/sessions/${sessionId}/events`,
          sharedKeys.admin!,
          (es) => es.filter((e) => e.event === 'timeline').length >= 3,
          () => ++open === STREAMS && allOpen(),
        );
      });
      await opened;
      const before = reads;
      for (let i = 0; i < 3; i++) await sys.sessions.get(sessionId).checkpoint({ label: `c${i}` });
      const seen = await Promise.all(streams);
      for (const events of seen) expect(events.filter((e) => e.event === 'timeline')).toHaveLength(3);
      // Each stream reading on its own would be 30 reads at least. On one poll clock they read together: one read
      // an entry, or fewer when two land within a poll (a stream slow to write may fall to the next poll's group).
      expect(reads - before).toBeLessThan(STREAMS / 3);
    } finally {
      await shared.close();
    }
  }, 120_000);
});
