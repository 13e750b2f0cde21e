import { execFile, execFileSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import path from 'node:path';
import { promisify } from 'node:util';
import { temporal } from '@temporalio/proto';
import { sessionWorkflowId } from '../../src/api';
import { generateKey, hashKey, openApiDocument, type RunningGateway } from '../../src/gateway';
import { loadConfig } from '../../src/config';
import { CODEC_SESSION_COOKIE } from '../../src/gateway/codec-server';
import { runGateway } from '../../src/gateway/run';
import { PayloadEncryptionCodec } from '../../src/payloads';
import { Keyring } from '../../src/snapshots';
import { startTestGateway } from '../helpers/gateway';
import { runningStatus, startTestSystem, type TestSystem } from '../helpers/temporal';

/**
 * The codec server as the Temporal Web UI and the `temporal` CLI use it: the real gateway over HTTP, in front of
 * workers that encrypt their payloads on the run's dev server.
 */
const TEMPORAL = path.join(__dirname, '..', '..', '.tools', 'venv', 'bin', 'temporal');
const UI_ORIGIN = 'http://localhost:8233';
const codec = new PayloadEncryptionCodec(new Keyring([{ id: 'codec-1', key: crypto.randomBytes(32) }]));

let sys: TestSystem;
let gateway: RunningGateway;
let keys: Record<string, string>;
let url: string;

beforeAll(async () => {
  sys = await startTestSystem({ payloadCodec: codec });
  ({ gateway, keys } = await startTestGateway(
    sys,
    [
      { id: 'admin' },
      { id: 'viewer', role: 'viewer' },
      { id: 'operator', role: 'operator' },
      { id: 'acme-admin', tenant: 'acme' },
    ],
    { codec: { codec, corsOrigins: [UI_ORIGIN], namespace: 'default' } },
  ));
  url = `${gateway.url}/v1/codec`;
}, 60_000);
afterAll(async () => {
  await gateway?.close();
  await sys?.close();
});

const b64 = (text: string) => Buffer.from(text, 'utf8').toString('base64');
const text = (base64: string | undefined) => Buffer.from(base64 ?? '', 'base64').toString('utf8');

interface JsonPayload {
  metadata?: Record<string, string>;
  data?: string;
}
interface Answer {
  status: number;
  headers: Headers;
  json: { payloads: JsonPayload[] } & Record<string, unknown>;
}

const jsonPayload = (value: unknown): JsonPayload => ({
  metadata: { encoding: b64('json/plain') },
  data: b64(JSON.stringify(value)),
});

/** POSTs to the codec server with the admin key unless `headers` says otherwise (undefined: none); read as JSON. */
async function post(route: string, body: unknown, headers: Record<string, string | undefined> = {}): Promise<Answer> {
  const all = { authorization: `Bearer ${keys.admin}`, 'content-type': 'application/json', ...headers };
  const res = await fetch(`${url}/${route}`, {
    method: 'POST',
    headers: Object.fromEntries(Object.entries(all).filter((e): e is [string, string] => e[1] !== undefined)),
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  return { status: res.status, headers: res.headers, json: (await res.json()) as Answer['json'] };
}

/**
 * POSTs `chunks` as the admin on a connection of its own, with Content-Length or (`chunked`) without: the gateway
 * answers an oversized body before it has read it, and then closes the connection.
 */
function postOnce(route: string, chunks: Buffer[], chunked: boolean): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    let answered = false;
    const length = chunks.reduce((n, c) => n + c.length, 0);
    const req = http.request(`${url}/${route}`, {
      method: 'POST',
      agent: false,
      headers: {
        authorization: `Bearer ${keys.admin}`,
        'content-type': 'application/json',
        ...(chunked ? {} : { 'content-length': String(length) }),
      },
    });
    req.on('response', (res) => {
      answered = true;
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (text += c));
      res.on('end', () => resolve({ status: res.statusCode!, text }));
    });
    // The rest of the body may meet a closed connection once the answer is sent.
    req.on('error', (err) => (answered ? undefined : reject(err)));
    for (const c of chunks) req.write(c);
    req.end();
  });
}

function expectProblem(answer: Answer, status: number, code: string): void {
  expect({ status: answer.status, type: answer.headers.get('content-type'), code: answer.json.code }).toEqual({
    status,
    type: 'application/problem+json',
    code,
  });
}

/** Payloads as the SDK holds them, in the protocol's JSON. */
function toJson(payloads: temporal.api.common.v1.IPayload[]): JsonPayload[] {
  const message = temporal.api.common.v1.Payloads.fromObject({ payloads });
  return (temporal.api.common.v1.Payloads.toObject(message, { bytes: String }) as { payloads: JsonPayload[] }).payloads;
}

test('encode then decode over HTTP gives the payloads back; the encoded ones hold none of the plaintext', async () => {
  const plain = [jsonPayload({ secret: 'marker-1' }), jsonPayload('second'), {}];
  const encoded = await post('encode', { payloads: plain });
  expect(encoded.status).toBe(200);
  expect(encoded.headers.get('content-type')).toMatch(/^application\/json/);
  expect(encoded.json.payloads).toHaveLength(3);
  for (const p of encoded.json.payloads) {
    expect(text(p.metadata?.encoding)).toBe('binary/encrypted');
    expect(text(p.metadata?.['encryption-key-id'])).toBe('codec-1');
    expect(Buffer.from(p.data!, 'base64').includes('marker-1')).toBe(false);
  }
  const decoded = await post('decode', encoded.json);
  expect(decoded.status).toBe(200);
  expect(decoded.json).toEqual({ payloads: plain });
  // An empty list, as proto3 JSON writes it (no field at all), is an empty answer.
  expect((await post('decode', {})).json).toEqual({ payloads: [] });
});

test('decodes what the client and the worker encoded into a session’s history', async () => {
  const sessionId = `codec-${crypto.randomUUID().slice(0, 8)}`;
  const session = await sys.sessions.start({ sessionId, runtime: { kind: 'memory', initialState: 'in-history' } });
  await runningStatus(session);
  await session.checkpoint({ label: 'label-in-history' });
  const history = await sys.client.workflow.getHandle(sessionWorkflowId(sessionId)).fetchHistory();
  const events = history.events ?? [];
  const input = events[0]!.workflowExecutionStartedEventAttributes!.input!.payloads!;
  // Written by the workflow (in the worker): the input of an activity it scheduled, the result of one it ran.
  const scheduled = events.find((e) => e.activityTaskScheduledEventAttributes?.input?.payloads?.length)!;
  const completed = events.find((e) => e.activityTaskCompletedEventAttributes)!;
  const sealed = [
    ...input,
    ...scheduled.activityTaskScheduledEventAttributes!.input!.payloads!,
    ...completed.activityTaskCompletedEventAttributes!.result!.payloads!,
  ];
  for (const p of sealed) expect(text(toJson([p])[0]!.metadata!.encoding)).toBe('binary/encrypted');

  const decoded = await post('decode', { payloads: toJson(sealed) });
  expect(decoded.status).toBe(200);
  const values = decoded.json.payloads.map((p) => {
    expect(text(p.metadata?.encoding)).toBe('json/plain');
    return JSON.parse(text(p.data)) as unknown;
  });
  expect(values[0]).toMatchObject({ spec: { sessionId, runtime: { kind: 'memory', initialState: 'in-history' } } });
  expect(values).toHaveLength(sealed.length);
  await session.stop({ checkpoint: false });
});

describe('CORS', () => {
  const preflight = (origin: string) =>
    fetch(`${url}/decode`, {
      method: 'OPTIONS',
      headers: {
        origin,
        'access-control-request-method': 'POST',
        'access-control-request-headers': 'authorization, content-type, x-namespace',
      },
    });

  test('a preflight from the Web UI’s origin is allowed, with credentials', async () => {
    const res = await preflight(UI_ORIGIN);
    expect(res.status).toBe(204);
    const cors = Object.fromEntries(
      [...res.headers].filter(([name]) => name.startsWith('access-control-') || name === 'vary'),
    );
    expect(cors).toEqual({
      'access-control-allow-origin': UI_ORIGIN,
      'access-control-allow-credentials': 'true',
      'access-control-allow-methods': 'POST',
      'access-control-allow-headers': 'X-Namespace, Content-Type, Authorization',
      'access-control-max-age': '600',
      vary: 'Origin',
    });
    // The answer itself carries them too, or the browser does not hand it to the UI.
    const answer = await post('decode', { payloads: [] }, { origin: UI_ORIGIN, 'x-namespace': 'default' });
    expect(answer.status).toBe(200);
    expect(answer.headers.get('access-control-allow-origin')).toBe(UI_ORIGIN);
    expect(answer.headers.get('access-control-allow-credentials')).toBe('true');
    expect(answer.headers.get('vary')).toBe('Origin');
  });

  test('another origin gets no CORS header: its preflight is refused, and so is a request it sends anyway', async () => {
    for (const origin of ['http://localhost:3000', 'https://evil.example', 'null']) {
      const res = await preflight(origin);
      expect(res.status).toBe(403);
      expect([...res.headers.keys()].filter((name) => name.startsWith('access-control-'))).toEqual([]);
      const answer = await post('decode', { payloads: [] }, { origin });
      expectProblem(answer, 403, 'Forbidden');
      expect(answer.headers.get('access-control-allow-origin')).toBeNull();
    }
  });
});

describe('who may use it', () => {
  test('no key, or a key the gateway does not know: 401 with WWW-Authenticate', async () => {
    for (const authorization of [undefined, `Bearer ${generateKey()}`, keys.admin, `Basic ${b64('a:b')}`]) {
      const headers = { authorization };
      const answer = await post('decode', { payloads: [] }, headers);
      expectProblem(answer, 401, 'Unauthorized');
      expect(answer.headers.get('www-authenticate')).toBe('Bearer');
    }
  });

  test('a viewer’s or operator’s key, or another tenant’s admin key: 403', async () => {
    for (const id of ['viewer', 'operator', 'acme-admin']) {
      const sealed = await codec.encode([
        { metadata: { encoding: Buffer.from('json/plain') }, data: Buffer.from('1') },
      ]);
      const answer = await post('decode', { payloads: toJson(sealed) }, { authorization: `Bearer ${keys[id]}` });
      expectProblem(answer, 403, 'Forbidden');
      expect(JSON.stringify(answer.json)).not.toContain('json/plain');
    }
  });

  test('a browser signs in with the form, decodes with the cookie alone, and signs out', async () => {
    const form = await fetch(`${url}/login`);
    expect(form.status).toBe(200);
    expect(form.headers.get('content-type')).toMatch(/^text\/html/);
    expect(form.headers.get('x-frame-options')).toBe('DENY');
    expect(await form.text()).toContain('name="key"');

    const login = (key: string) =>
      fetch(`${url}/login`, { method: 'POST', body: new URLSearchParams({ key }), redirect: 'manual' });
    const viewer = await login(keys.viewer!);
    expect(viewer.status).toBe(403);
    expect(viewer.headers.get('set-cookie')).toBeNull();
    expect((await login('dsk_wrong')).status).toBe(401);

    const signedIn = await login(keys.admin!);
    expect(signedIn.status).toBe(200);
    const answer = await signedIn.text();
    expect(answer).toContain('choose “Use my browser setting”');
    expect(answer).toContain(`enter ${url} and switch on “Include cross-origin credentials”`);
    const setCookie = signedIn.headers.get('set-cookie')!;
    const [pair, ...attributes] = setCookie.split(/;\s*/);
    expect(pair).toMatch(new RegExp(`^${CODEC_SESSION_COOKIE}=[A-Za-z0-9_-]{43}$`));
    // Plain HTTP here: no Secure (a browser would drop the cookie); over HTTPS it has it.
    expect(attributes.sort()).toEqual(['HttpOnly', 'Max-Age=28800', 'Path=/v1/codec', 'SameSite=Strict']);

    const sealed = await codec.encode([
      { metadata: { encoding: Buffer.from('json/plain') }, data: Buffer.from('"c"') },
    ]);
    const cookie = { authorization: undefined, cookie: pair!, origin: UI_ORIGIN };
    const decoded = await post('decode', { payloads: toJson(sealed) }, cookie);
    expect(decoded.status).toBe(200);
    expect(text(decoded.json.payloads[0]!.data)).toBe('"c"');

    const out = await fetch(`${url}/logout`, { method: 'POST', headers: { cookie: pair! } });
    expect(out.status).toBe(200);
    expect(out.headers.get('set-cookie')).toMatch(new RegExp(`^${CODEC_SESSION_COOKIE}=; Max-Age=0`));
    expectProblem(await post('decode', { payloads: [] }, cookie), 401, 'Unauthorized');
  });
});

describe('bad requests', () => {
  test('a body over 4 MiB is refused before it is read whole, whether or not it says its length', async () => {
    const chunk = Buffer.alloc(1024 * 1024, 'A');
    const body = [
      Buffer.from('{"payloads":[{"data":"'),
      ...Array.from({ length: 5 }, () => chunk),
      Buffer.from('"}]}'),
    ];
    for (const chunked of [false, true]) {
      const answer = await postOnce('decode', body, chunked);
      expect({ status: answer.status, code: (JSON.parse(answer.text) as { code: string }).code }).toEqual({
        status: 413,
        code: 'PayloadTooLarge',
      });
    }
  });

  test('more than 1,000 payloads: 400, naming the list', async () => {
    const answer = await post('decode', { payloads: Array.from({ length: 1001 }, () => ({})) });
    expectProblem(answer, 400, 'InvalidInput');
    expect(answer.json.issues).toEqual([expect.objectContaining({ code: 'too_big', path: ['payloads'] })]);
  });

  test('a body that is not JSON, or not Payloads: 400 with zod’s issues, never a 500', async () => {
    expectProblem(await post('decode', '{"payloads": ['), 400, 'InvalidInput');
    const cases: [unknown, (string | number)[]][] = [
      [{ payloads: [{ data: 'not base64!' }] }, ['payloads', 0, 'data']],
      [{ payloads: [{ data: 'QUJDR' }] }, ['payloads', 0, 'data']],
      [{ payloads: [{ metadata: { encoding: 42 } }] }, ['payloads', 0, 'metadata', 'encoding']],
      [{ payloads: [{ data: 'QQ==', extra: 1 }] }, ['payloads', 0]],
      [{ payloads: 'QQ==' }, ['payloads']],
      [{ payload: [] }, []],
      [[], []],
      [null, []],
    ];
    for (const [body, where] of cases) {
      const answer = await post('decode', body);
      expectProblem(answer, 400, 'InvalidInput');
      expect((answer.json.issues as { path: unknown }[])[0]!.path).toEqual(where);
    }
  });

  test('another content type: 415', async () => {
    const answer = await post('decode', '{"payloads":[]}', { 'content-type': 'text/plain' });
    expectProblem(answer, 415, 'UnsupportedMediaType');
  });

  test('another namespace than the gateway’s: 400', async () => {
    const answer = await post('decode', { payloads: [] }, { 'x-namespace': 'production' });
    expectProblem(answer, 400, 'InvalidInput');
    expect(answer.json.detail).toContain('production');
    expect((await post('decode', { payloads: [] }, { 'x-namespace': 'default' })).status).toBe(200);
  });
});

describe('payloads that cannot be decoded: 422 naming the payload', () => {
  const plain = { metadata: { encoding: Buffer.from('json/plain') }, data: Buffer.from('"tamper-secret"') };

  test('tampered ciphertext', async () => {
    const [good, bad] = toJson(await codec.encode([plain, plain]));
    const bytes = Buffer.from(bad!.data!, 'base64');
    bytes[20]! ^= 0x01;
    const answer = await post('decode', { payloads: [good, { ...bad, data: bytes.toString('base64') }] });
    expectProblem(answer, 422, 'PayloadTampered');
    expect(answer.json).toMatchObject({ index: 1, detail: expect.stringMatching(/^payload 1: /) as unknown });
    expect(JSON.stringify(answer.json)).not.toContain('tamper-secret');
    expect(JSON.stringify(answer.json)).not.toContain(b64('"tamper-secret"'));
  });

  test('a key the gateway does not hold', async () => {
    const elsewhere = new PayloadEncryptionCodec(new Keyring([{ id: 'elsewhere', key: crypto.randomBytes(32) }]));
    const answer = await post('decode', { payloads: toJson(await elsewhere.encode([plain])) });
    expectProblem(answer, 422, 'KeyUnavailable');
    expect(answer.json).toMatchObject({ index: 0 });
    expect(answer.json.detail).toContain("'elsewhere'");
  });
});

test('the codec routes are not in the OpenAPI document: the protocol is Temporal’s, and not every gateway serves it', async () => {
  const doc = (await (await fetch(`${gateway.url}/v1/openapi.json`)).json()) as { paths: Record<string, unknown> };
  expect(doc).toEqual(openApiDocument());
  expect(Object.keys(doc.paths).filter((p) => p.startsWith('/v1/codec'))).toEqual([]);
});

test('over HTTPS the session cookie is Secure', async () => {
  const cert = path.join(sys.dir, 'codec.crt');
  const keyFile = path.join(sys.dir, 'codec.key');
  execFileSync(
    'openssl',
    [
      ...['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '1'],
      ...['-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1', '-keyout', keyFile, '-out', cert],
    ],
    { stdio: 'ignore' },
  );
  const started = await startTestGateway(sys, [{ id: 'a' }], {
    tls: { certFile: cert, keyFile },
    codec: { codec, corsOrigins: [UI_ORIGIN], namespace: 'default' },
  });
  const { gateway: secure } = started;
  const key = started.keys.a!;
  try {
    const setCookie = await new Promise<string | undefined>((resolve, reject) => {
      const req = https.request(`${secure.url}/v1/codec/login`, {
        method: 'POST',
        ca: fs.readFileSync(cert),
        agent: false,
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
      });
      req.on('response', (res) => {
        res.resume();
        resolve(res.headers['set-cookie']?.[0]);
      });
      req.on('error', reject);
      req.end(new URLSearchParams({ key }).toString());
    });
    expect(setCookie?.split(/;\s*/).slice(1).sort()).toEqual([
      'HttpOnly',
      'Max-Age=28800',
      'Path=/v1/codec',
      'SameSite=Strict',
      'Secure',
    ]);
  } finally {
    await secure.close();
  }
});

test('runGateway serves it with the configured payload keys, to DS_CODEC_CORS_ORIGINS and the embedded UI’s origin', async () => {
  const admin = generateKey();
  // A key directory: DS_PAYLOAD_KEYS is read from the process's environment, not from the configuration given.
  const keyDir = path.join(sys.dir, 'payload-keys');
  await Keyring.ensureKeyDirectory(keyDir);
  const config = loadConfig({
    TEMPORAL_ADDRESS: process.env.DS_TEST_TEMPORAL_ADDRESS,
    DS_DATA_DIR: path.join(sys.dir, 'run-gateway'),
    DS_SNAPSHOT_ENCRYPTION: 'none',
    DS_PAYLOAD_KEY_DIR: keyDir,
    DS_CODEC_CORS_ORIGINS: 'https://temporal-ui.example, http://localhost:8080',
    DS_API_KEYS: JSON.stringify({ keys: [{ id: 'a', sha256: hashKey(admin), tenant: 'default', role: 'admin' }] }),
  });
  const running = await runGateway(
    { ...config, gateway: { ...config.gateway, port: 0 } },
    config.temporal.address!,
    undefined,
    ['http://127.0.0.1:8233'],
  );
  try {
    const preflight = async (origin: string) =>
      (await fetch(`${running.url}/v1/codec/decode`, { method: 'OPTIONS', headers: { origin } })).status;
    expect(await preflight('https://temporal-ui.example')).toBe(204);
    expect(await preflight('http://localhost:8080')).toBe(204);
    expect(await preflight('http://127.0.0.1:8233')).toBe(204);
    expect(await preflight('http://127.0.0.1:8080')).toBe(403);
    const call = async (route: string, body: unknown) => {
      const res = await fetch(`${running.url}/v1/codec/${route}`, {
        method: 'POST',
        headers: { authorization: `Bearer ${admin}`, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
      return (await res.json()) as { payloads: JsonPayload[] };
    };
    const encoded = await call('encode', { payloads: [jsonPayload('via runGateway')] });
    expect(text(encoded.payloads[0]!.metadata!['encryption-key-id'])).toBe('dev-1');
    expect(await call('decode', encoded)).toEqual({ payloads: [jsonPayload('via runGateway')] });
  } finally {
    await running.close();
  }
});

test('a gateway without a codec server answers 404 there', async () => {
  const { gateway: plain, keys: made } = await startTestGateway(sys, [{ id: 'a' }]);
  const key = made.a!;
  try {
    for (const route of ['decode', 'encode', 'login']) {
      const res = await fetch(`${plain.url}/v1/codec/${route}`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: '{}',
      });
      expect(res.status).toBe(404);
    }
  } finally {
    await plain.close();
  }
});

/** Every payload's data in `temporal workflow show --output json`, as text (the CLI prints it in base64). */
function payloadTexts(output: string): string[] {
  const texts: string[] = [];
  const walk = (value: unknown): void => {
    if (Array.isArray(value)) value.forEach(walk);
    else if (typeof value === 'object' && value !== null) {
      const { metadata, data } = value as JsonPayload;
      if (metadata?.encoding !== undefined && typeof data === 'string') texts.push(text(data));
      Object.values(value).forEach(walk);
    }
  };
  walk(JSON.parse(output));
  return texts;
}

/** The session's start input in that output: its encoding and its data as text. */
function startInput(output: string): { encoding: string; text: string } {
  const history = JSON.parse(output) as {
    events: { workflowExecutionStartedEventAttributes?: { input: { payloads: JsonPayload[] } } }[];
  };
  const [payload] = history.events[0]!.workflowExecutionStartedEventAttributes!.input.payloads;
  return { encoding: text(payload!.metadata!.encoding), text: text(payload!.data) };
}

test('the temporal CLI shows a session’s secret decoded through the codec server, and sealed without it', async () => {
  const sessionId = `codec-cli-${crypto.randomUUID().slice(0, 8)}`;
  const marker = `marker-${crypto.randomUUID()}`;
  const session = await sys.sessions.start({
    sessionId,
    runtime: { kind: 'workspace', command: ['sleep', '600'], env: { SECRET: marker } },
  });
  await runningStatus(session);
  const show = async (...extra: string[]) => {
    const args = ['workflow', 'show', '--address', process.env.DS_TEST_TEMPORAL_ADDRESS!, '--namespace', 'default'];
    const { stdout } = await promisify(execFile)(
      TEMPORAL,
      [...args, '--workflow-id', sessionWorkflowId(sessionId), '--output', 'json', ...extra],
      // No profile or variable of the machine running the tests may add a codec (or take one away).
      { env: { PATH: process.env.PATH, HOME: sys.dir }, maxBuffer: 64 * 1024 * 1024 },
    );
    return stdout;
  };
  try {
    const decoded = await show('--codec-endpoint', `${gateway.url}/v1/codec`, '--codec-auth', `Bearer ${keys.admin}`);
    expect(startInput(decoded)).toEqual({ encoding: 'json/plain', text: expect.stringContaining(marker) as unknown });
    const sealed = await show();
    expect(startInput(sealed).encoding).toBe('binary/encrypted');
    expect(payloadTexts(sealed).some((t) => t.includes(marker))).toBe(false);
    expect(sealed).not.toContain(marker);
  } finally {
    await session.stop({ checkpoint: false });
  }
});
