/**
 * Gateway framework: hono + @hono/zod-openapi (the gateway's) against fastify + fastify-type-provider-zod, one
 * equivalent API in each — a POST whose body is the project's strict CheckpointInput, a GET with typed path
 * parameters, both behind a bearer check, both answering JSON documented by a zod schema — each in its framework's
 * usual set-up (hono: createRoute; fastify: the zod validator and serializer compilers, @fastify/swagger). Each server
 * runs in a process of its own on 127.0.0.1 (a free port); this process is the one load generator for all of them:
 * a keep-alive http.Agent with CONCURRENCY sockets.
 *
 *   npx tsx bench/gateway/frameworks.ts            # 20,000 measured requests per server
 *   npx tsx bench/gateway/frameworks.ts --quick    # 4,000
 *
 * First it checks that they answer alike (a valid body, an unknown field, malformed JSON, no key, the GET, a bad
 * index), then warms each up, then measures in ROUNDS rounds, each in the reverse order of the one before, so a slow
 * stretch of a shared machine falls on all. It prints and writes .bench/frameworks.md: p50/p99 and requests/s per
 * route, the ratio to hono, start-up times and what OpenAPI each generates. Bounded by count and by a deadline (it
 * exits 1 past it).
 */
import { fork, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import { performance } from 'node:perf_hooks';
import type { FastifyError } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import type { ZodType } from 'zod';
import { CheckpointInput, CheckpointRef, SessionId, TimelineIndex } from '../../src/domain/schemas';
import { hashKey } from '../../src/gateway/keys';
import { summarize, type Latency } from '../controls/stats';
import { table } from '../markdown';

/**
 * The servers measured. `fastify` checks each response against its schema, as fastify-type-provider-zod's serializer
 * does; hono checks none, so `fastify-unchecked` (JSON.stringify as the serializer, the schema still documented) is
 * the same work as hono's.
 */
const FRAMEWORKS = ['hono', 'fastify', 'fastify-unchecked'] as const;
type Framework = (typeof FRAMEWORKS)[number];

const CONCURRENCY = 32;
/** Rounds of the measurement; each runs the servers in the opposite order of the one before. */
const ROUNDS = 4;
const DEADLINE_MS = 120_000;
const RESULTS_FILE = path.resolve(__dirname, '..', '..', '.bench', 'frameworks.md');
const KEY = 'dsk_bench-frameworks-key';
const KEY_HASH = hashKey(KEY);
const INFO = { openapi: '3.1.0', info: { title: 'bench', version: '1' } };

// ---------------------------------------------------------------------------------------------------------------
// The API, once: what both frameworks serve.

/** The bearer check both run: the same work the gateway's ApiKeys does per request (a SHA-256 of the key). */
function authorized(header: string | undefined): boolean {
  const match = /^Bearer\s+(\S+)$/i.exec(header ?? '');
  return match !== null && hashKey(match[1]!) === KEY_HASH;
}

const unauthorized = { type: 'about:blank', title: 'Unauthorized', status: 401, code: 'Unauthorized' };
const invalid = (issues: unknown) => ({
  type: 'about:blank',
  title: 'Bad Request',
  status: 400,
  code: 'InvalidInput',
  issues,
});

function checkpointRef(sessionId: string, index: number, label?: string): CheckpointRef {
  return {
    checkpointId: `${String(index).padStart(6, '0')}-ae1cc5f8`,
    sessionId,
    sequence: index,
    parentId: index > 1 ? `${String(index - 1).padStart(6, '0')}-903dc264` : null,
    trigger: 'manual',
    ...(label !== undefined ? { label } : {}),
    runtimeKind: 'memory',
    runtimeVersion: '1',
    formatVersion: 3,
    size: 4096,
    digest: `sha256:${'4746ab7b3b5c6caf7d292ad2d6b478543b54eef25306891819c8666c9708cb5c'}`,
    createdAt: '2026-12-01T09:47:55.724Z',
    encryption: 'aes-256-gcm',
    index,
    branch: 0,
  };
}

const Params = { id: SessionId } as const;
const EntryParams = { id: SessionId, index: TimelineIndex } as const;

interface Served {
  port: number;
  /** Importing the framework's modules. */
  importMs: number;
  /** Building the app, registering the routes, listening. */
  buildMs: number;
  openapi: { ms: number; bytes: number; version: string; strictBody: boolean; bearer: boolean };
}

type OpenApiDoc = {
  openapi?: string;
  components?: { securitySchemes?: Record<string, unknown> };
  paths?: Record<string, Record<string, Record<string, unknown>>>;
};

/** What a generated document says of the POST: its body refuses unknown keys, it asks for the bearer scheme. */
function describeDocument(doc: OpenApiDoc, ms: number): Served['openapi'] {
  const post = Object.entries(doc.paths ?? {}).find(([p]) => p.endsWith('/checkpoint'))?.[1]?.post as
    | { security?: unknown; requestBody?: { content?: Record<string, { schema?: Record<string, unknown> }> } }
    | undefined;
  return {
    ms,
    bytes: JSON.stringify(doc).length,
    version: doc.openapi ?? '?',
    strictBody: post?.requestBody?.content?.['application/json']?.schema?.additionalProperties === false,
    bearer:
      JSON.stringify(post?.security) === '[{"bearer":[]}]' && doc.components?.securitySchemes?.bearer !== undefined,
  };
}

async function serveHono(): Promise<Served> {
  const t0 = performance.now();
  const [{ OpenAPIHono, createRoute, z }, { serve }] = await Promise.all([
    import('@hono/zod-openapi'),
    import('@hono/node-server'),
  ]);
  const t1 = performance.now();
  const app = new OpenAPIHono({
    defaultHook: (result, c) => (result.success ? undefined : c.json(invalid(result.error.issues), 400)),
  });
  app.onError((err, c) => {
    const status = (err as { status?: number }).status;
    if (status === 400) return c.json(invalid([{ message: err.message }]), 400);
    return c.json({ status: 500, code: 'Internal' }, 500);
  });
  app.openAPIRegistry.registerComponent('securitySchemes', 'bearer', { type: 'http', scheme: 'bearer' });
  app.use('/v1/*', async (c, next) => {
    if (!authorized(c.req.header('authorization'))) {
      return c.json(unauthorized, 401, { 'www-authenticate': 'Bearer' });
    }
    await next();
  });
  const json = (schema: ZodType) => ({ content: { 'application/json': { schema } } });
  const responses = {
    200: { description: 'the checkpoint', ...json(CheckpointRef) },
    400: { description: 'bad input' },
    401: { description: 'no key' },
  };
  app.openapi(
    createRoute({
      method: 'post',
      path: '/v1/sessions/{id}/checkpoint',
      security: [{ bearer: [] }],
      request: {
        params: z.object(Params),
        body: { content: { 'application/json': { schema: CheckpointInput } }, required: true },
      },
      responses,
    }),
    (c) => c.json(checkpointRef(c.req.valid('param').id, 7, c.req.valid('json').label), 200),
  );
  app.openapi(
    createRoute({
      method: 'get',
      path: '/v1/sessions/{id}/checkpoints/{index}',
      security: [{ bearer: [] }],
      request: { params: z.object({ ...EntryParams, index: z.coerce.number().pipe(TimelineIndex) }) },
      responses,
    }),
    (c) => c.json(checkpointRef(c.req.valid('param').id, c.req.valid('param').index), 200),
  );
  const server = await new Promise<ReturnType<typeof serve>>((resolve) => {
    const s = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }, () => resolve(s));
  });
  const t2 = performance.now();
  const doc = app.getOpenAPI31Document(INFO) as OpenApiDoc;
  const t3 = performance.now();
  return {
    port: (server.address() as AddressInfo).port,
    importMs: t1 - t0,
    buildMs: t2 - t1,
    openapi: describeDocument(doc, t3 - t2),
  };
}

async function serveFastify(checkResponses: boolean): Promise<Served> {
  const t0 = performance.now();
  const [{ default: Fastify }, { default: swagger }, zodProvider, { z }] = await Promise.all([
    import('fastify'),
    import('@fastify/swagger'),
    import('fastify-type-provider-zod'),
    import('zod'),
  ]);
  const { hasZodFastifySchemaValidationErrors, jsonSchemaTransform, serializerCompiler, validatorCompiler } =
    zodProvider;
  const t1 = performance.now();
  const app = Fastify({ logger: false });
  app.setValidatorCompiler(validatorCompiler);
  app.setSerializerCompiler(checkResponses ? serializerCompiler : () => (data) => JSON.stringify(data));
  await app.register(swagger, {
    openapi: { ...INFO, components: { securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } } } },
    transform: jsonSchemaTransform,
  });
  app.setErrorHandler((err: FastifyError, _req, reply) => {
    if (hasZodFastifySchemaValidationErrors(err)) return reply.code(400).send(invalid(err.validation));
    if (err.statusCode === 400) return reply.code(400).send(invalid([{ message: err.message }]));
    return reply.code(500).send({ status: 500, code: 'Internal' });
  });
  app.addHook('onRequest', async (req, reply) => {
    if (!req.url.startsWith('/v1/') || authorized(req.headers.authorization)) return;
    return reply.code(401).header('www-authenticate', 'Bearer').send(unauthorized);
  });
  const routes = app.withTypeProvider<ZodTypeProvider>();
  routes.post(
    '/v1/sessions/:id/checkpoint',
    {
      schema: {
        security: [{ bearer: [] }],
        params: z.object(Params),
        body: CheckpointInput,
        response: { 200: CheckpointRef },
      },
    },
    async (req) => checkpointRef(req.params.id, 7, req.body.label),
  );
  routes.get(
    '/v1/sessions/:id/checkpoints/:index',
    {
      schema: {
        security: [{ bearer: [] }],
        params: z.object({ ...EntryParams, index: z.coerce.number().pipe(TimelineIndex) }),
        response: { 200: CheckpointRef },
      },
    },
    async (req) => checkpointRef(req.params.id, req.params.index),
  );
  await app.listen({ host: '127.0.0.1', port: 0 });
  const t2 = performance.now();
  const doc = app.swagger() as OpenApiDoc;
  const t3 = performance.now();
  return {
    port: (app.server.address() as AddressInfo).port,
    importMs: t1 - t0,
    buildMs: t2 - t1,
    openapi: describeDocument(doc, t3 - t2),
  };
}

// ---------------------------------------------------------------------------------------------------------------
// The load generator.

interface Reply {
  status: number;
  body: unknown;
}

const agent = new http.Agent({ keepAlive: true, maxSockets: CONCURRENCY });

function request(port: number, method: string, route: string, headers: http.OutgoingHttpHeaders, body?: string) {
  return new Promise<Reply>((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, method, path: route, headers, agent }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (text += chunk));
      res.on('end', () => resolve({ status: res.statusCode!, body: text ? (JSON.parse(text) as unknown) : null }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

const auth = { authorization: `Bearer ${KEY}` };
const POST_BODY = JSON.stringify({ label: 'warm', ifIndex: 6 });
const calls = {
  post: (port: number) =>
    request(
      port,
      'POST',
      '/v1/sessions/bench-1/checkpoint',
      { ...auth, 'content-type': 'application/json' },
      POST_BODY,
    ),
  get: (port: number) => request(port, 'GET', '/v1/sessions/bench-1/checkpoints/7', auth),
};
type Route = keyof typeof calls;

/** `count` calls from CONCURRENCY loops: each call's latency (ms) and the rate over the whole batch. */
async function load(
  port: number,
  route: Route,
  count: number,
  deadline: number,
): Promise<{ ms: number[]; rps: number }> {
  const ms: number[] = [];
  let started = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (started < count) {
        if (Date.now() > deadline) throw new Error(`past the deadline of ${DEADLINE_MS} ms`);
        started++;
        const s = performance.now();
        const res = await calls[route](port);
        ms.push(performance.now() - s);
        if (res.status !== 200) throw new Error(`${route}: ${res.status} ${JSON.stringify(res.body)}`);
      }
    }),
  );
  return { ms, rps: count / ((performance.now() - t0) / 1000) };
}

/** The contract both must keep, as a client sees it: statuses and bodies. */
async function answers(port: number): Promise<Record<string, unknown>> {
  const post = (headers: http.OutgoingHttpHeaders, body: string) =>
    request(port, 'POST', '/v1/sessions/bench-1/checkpoint', headers, body);
  const typed = { ...auth, 'content-type': 'application/json' };
  const ok = await calls.post(port);
  const unknownField = await post(typed, '{"lable":"x"}');
  const malformed = await post(typed, '{"label":');
  const noKey = await post({ 'content-type': 'application/json' }, POST_BODY);
  const get = await calls.get(port);
  const badIndex = await request(port, 'GET', '/v1/sessions/bench-1/checkpoints/0', auth);
  return {
    ok,
    unknownField: unknownField.status,
    unknownFieldMessage: JSON.stringify(unknownField.body).includes('did you mean \\"label\\"'),
    malformed: malformed.status,
    noKey,
    get,
    badIndex: badIndex.status,
  };
}

interface ServerProcess {
  child: ChildProcess;
  served: Served;
  /** From fork() to the port being known here: node, tsx, imports, build, listen. */
  spawnMs: number;
}

function startServer(framework: Framework): Promise<ServerProcess> {
  const t0 = performance.now();
  const child = fork(__filename, ['--serve', framework], { execArgv: ['--import', 'tsx'], stdio: 'inherit' });
  return new Promise((resolve, reject) => {
    child.once('message', (served: Served) => resolve({ child, served, spawnMs: performance.now() - t0 }));
    child.once('exit', (code) => reject(new Error(`the ${framework} server exited (${code}) before it listened`)));
  });
}

async function main(): Promise<void> {
  const quick = process.argv.includes('--quick');
  const perRound = quick ? 500 : 2_500; // per server, route and round
  const warmup = quick ? 500 : 1_000;
  const deadline = Date.now() + DEADLINE_MS;
  const timer = setTimeout(() => {
    console.error(`frameworks bench: not done within ${DEADLINE_MS} ms`);
    process.exit(1);
  }, DEADLINE_MS + 5_000);
  timer.unref();

  const servers = {} as Record<Framework, ServerProcess>;
  process.once('exit', () => Object.values(servers).forEach((s) => s.child.kill('SIGKILL')));
  for (const f of FRAMEWORKS) servers[f] = await startServer(f);

  const contracts = await Promise.all(
    FRAMEWORKS.map(async (f) => JSON.stringify(await answers(servers[f].served.port))),
  );
  if (new Set(contracts).size !== 1) {
    throw new Error(`the APIs answer differently:\n${FRAMEWORKS.map((f, i) => `${f}: ${contracts[i]}`).join('\n')}`);
  }

  for (const f of FRAMEWORKS)
    for (const route of ['post', 'get'] as const) await load(servers[f].served.port, route, warmup, deadline);
  const samples = Object.fromEntries(FRAMEWORKS.map((f) => [f, { post: [] as number[], get: [] as number[] }]));
  const rates = Object.fromEntries(FRAMEWORKS.map((f) => [f, { post: [] as number[], get: [] as number[] }]));
  for (let round = 0; round < ROUNDS; round++) {
    const order = round % 2 === 0 ? FRAMEWORKS : [...FRAMEWORKS].reverse();
    for (const f of order) {
      for (const route of ['post', 'get'] as const) {
        const { ms, rps } = await load(servers[f].served.port, route, perRound, deadline);
        samples[f]![route].push(...ms);
        rates[f]![route].push(rps);
      }
    }
  }
  for (const s of Object.values(servers)) s.child.kill();

  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
  const ms = (n: number) => `${n.toFixed(2)} ms`;
  const result = (f: Framework, route: Route) => ({
    latency: summarize(samples[f]![route]),
    rps: mean(rates[f]![route]),
  });
  const cell = (r: { latency: Latency; rps: number }) =>
    `${ms(r.latency.p50)} / ${ms(r.latency.p99)} / ${r.rps.toFixed(0)}`;
  const rows = FRAMEWORKS.map((f) => {
    const [post, get] = [result(f, 'post'), result(f, 'get')];
    const ratio = (route: Route, r: { rps: number }) => `${(r.rps / result('hono', route).rps).toFixed(2)}×`;
    return [f, cell(post), cell(get), `${ratio('post', post)} / ${ratio('get', get)}`];
  });
  const info = (f: Framework) => {
    const { served, spawnMs } = servers[f];
    const o = served.openapi;
    return [
      f,
      `${spawnMs.toFixed(0)} ms`,
      `${served.importMs.toFixed(0)} + ${served.buildMs.toFixed(0)} ms`,
      `${o.version}, ${o.bytes} B, ${o.ms.toFixed(1)} ms`,
      `${o.strictBody ? 'strict body' : '**body not strict**'}, ${o.bearer ? 'bearer' : '**no bearer**'}`,
    ];
  };
  const cpus = os.cpus();
  const machine = `${cpus[0]?.model ?? 'CPU'} × ${cpus.length}, node ${process.versions.node}`;
  const counts =
    `${2 * ROUNDS * perRound} measured requests per server (${ROUNDS} rounds of ${perRound} per route, each round ` +
    `in the order opposite the last) at concurrency ${CONCURRENCY}, after ${2 * warmup} warm-up`;
  const markdown = [
    '# Gateway framework benchmark',
    '',
    `${new Date().toISOString().slice(0, 10)}, ${machine}, load average ${os.loadavg()[0]!.toFixed(1)}. ` +
      `${quick ? '`--quick`: ' : ''}${counts}.`,
    '',
    table(['server', 'POST …/checkpoint: p50 / p99 / req/s', 'GET …/checkpoints/{index}', 'req/s ÷ hono'], rows),
    '',
    table(
      ['server', 'start-up (fork → listening)', 'import + build & listen', 'OpenAPI (version, size, time)', 'document'],
      FRAMEWORKS.map(info),
    ),
    '',
  ].join('\n');
  console.log(`\n${markdown}`);
  fs.mkdirSync(path.dirname(RESULTS_FILE), { recursive: true });
  fs.writeFileSync(RESULTS_FILE, markdown);
  clearTimeout(timer);
}

const serving = process.argv.indexOf('--serve');
if (serving >= 0) {
  // A server process: listen, tell the parent the port, and go when the parent does.
  const framework = process.argv[serving + 1] as Framework;
  process.on('disconnect', () => process.exit(0));
  (framework === 'hono' ? serveHono() : serveFastify(framework === 'fastify')).then(
    (served) => process.send!(served),
    (err: unknown) => {
      console.error(err);
      process.exit(1);
    },
  );
} else {
  main().then(
    () => process.exit(0),
    (err: unknown) => {
      console.error(err);
      process.exit(1);
    },
  );
}
