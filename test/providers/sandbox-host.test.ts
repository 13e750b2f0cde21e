import * as fs from 'node:fs';
import * as fsp from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import { createSandboxHost } from '../../src/providers/host-app';
import { providerOpenApiDocument } from '../../src/providers/openapi';
import { encodeSandboxHeader, EXPORT_FORMAT, TAR_CONTENT_TYPE } from '../../src/providers/protocol';
import { startSandboxHost, type SandboxHostProcess } from '../helpers/sandbox-host';
import { eventually } from '../helpers/temporal';

let tmp: string;
let hostA: SandboxHostProcess;
let hostB: SandboxHostProcess;
let ids = 0;

beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'sandbox-host-'));
  [hostA, hostB] = await Promise.all([startSandboxHost(path.join(tmp, 'a')), startSandboxHost(path.join(tmp, 'b'))]);
});

afterAll(async () => {
  await Promise.all([hostA?.stop(), hostB?.stop()]);
  await fsp.rm(tmp, { recursive: true, force: true });
});

const spec = { command: ['sleep', '30'], files: { 'state.txt': 'state' }, stopGraceMs: 1_000 };

function call(
  host: SandboxHostProcess,
  method: string,
  route: string,
  options: {
    fence?: number;
    json?: unknown;
    body?: Buffer;
    headers?: Record<string, string>;
    token?: string | null;
  } = {},
) {
  const headers: Record<string, string> = { ...options.headers };
  const token = options.token === undefined ? host.token : options.token;
  if (token !== null) headers.authorization = `Bearer ${token}`;
  if (options.fence !== undefined) headers['DS-Fence'] = String(options.fence);
  if (options.json !== undefined) headers['content-type'] = 'application/json';
  const body = options.json !== undefined ? JSON.stringify(options.json) : options.body;
  return fetch(`${host.url}${route}`, { method, headers, ...(body === undefined ? {} : { body }) });
}

async function errorOf(response: Response): Promise<{ status: number; code: string; retryable: boolean }> {
  const body = (await response.json()) as { error: { code: string; retryable: boolean } };
  return { status: response.status, code: body.error.code, retryable: body.error.retryable };
}

async function create(host: SandboxHostProcess, sessionId = 'session-1', fence = 1) {
  const sandboxId = `sandbox-${++ids}`;
  const response = await call(host, 'POST', '/v1/sandboxes', { fence, json: { sandboxId, sessionId, spec } });
  expect(response.status).toBe(200);
  return (await response.json()) as { sandboxId: string; pid: number; running: boolean; startedAt: string };
}

async function exported(host: SandboxHostProcess, id: string, fence = 1): Promise<Buffer> {
  const response = await call(host, 'GET', `/v1/sandboxes/${id}/export`, { fence });
  expect(response.status).toBe(200);
  expect(response.headers.get('content-type')).toBe(TAR_CONTENT_TYPE);
  expect(response.headers.get('DS-Export-Format')).toBe(EXPORT_FORMAT);
  return Buffer.from(await response.arrayBuffer());
}

function importInto(host: SandboxHostProcess, id: string, body: Buffer, fence = 1, sessionId = 'session-1') {
  return call(host, 'PUT', `/v1/sandboxes/${id}/import`, {
    fence,
    body,
    headers: {
      'content-type': TAR_CONTENT_TYPE,
      'DS-Export-Format': EXPORT_FORMAT,
      'DS-Sandbox': encodeSandboxHeader({ sessionId, spec: { command: spec.command } }),
    },
  });
}

/** Every path under the host's root but its own records: what the sandboxes left on disk. */
function tree(host: SandboxHostProcess): string[] {
  const root = host.rootDir;
  if (!fs.existsSync(root)) return [];
  return (fs.readdirSync(root, { recursive: true }) as string[]).filter((p) => !p.startsWith('.run')).sort();
}

describe('auth', () => {
  test('a call without the bearer token or with another is refused (401) and changes nothing', async () => {
    const before = tree(hostA);
    for (const token of [null, 'not-the-token', hostB.token]) {
      const capabilities = await call(hostA, 'GET', '/v1/capabilities', { token });
      expect(await errorOf(capabilities)).toEqual({ status: 401, code: 'Unauthorized', retryable: false });
      expect(capabilities.headers.get('www-authenticate')).toBe('Bearer');
      const created = await call(hostA, 'POST', '/v1/sandboxes', {
        token,
        fence: 1,
        json: { sandboxId: 'unauthorized', sessionId: 'session-1', spec },
      });
      expect(await errorOf(created)).toMatchObject({ status: 401, code: 'Unauthorized' });
    }
    expect((await call(hostA, 'GET', '/v1/sandboxes/unauthorized')).status).toBe(404);
    expect(tree(hostA)).toEqual(before);
  });

  test('the token opens the capabilities: protocol 1, tar/1, the filesystem, frozen while exporting', async () => {
    const response = await call(hostA, 'GET', '/v1/capabilities');
    expect(await response.json()).toMatchObject({
      protocolVersion: 1,
      exportFormats: ['tar/1'],
      captures: { filesystem: true, processMemory: false },
      runsWhileExporting: false,
    });
  });
});

describe('bad input gets a typed error and changes nothing', () => {
  test('ids like ../x are refused (400), in a body or a path', async () => {
    const before = tree(hostA);
    for (const sandboxId of ['../x', '..', 'a/b', '.hidden']) {
      const created = await call(hostA, 'POST', '/v1/sandboxes', {
        fence: 1,
        json: { sandboxId, sessionId: 'session-1', spec },
      });
      expect(await errorOf(created)).toMatchObject({ status: 400, code: 'InvalidInput' });
    }
    const bySession = await call(hostA, 'POST', '/v1/sandboxes', {
      fence: 1,
      json: { sandboxId: 'fine', sessionId: '../x', spec },
    });
    expect(await errorOf(bySession)).toMatchObject({ status: 400, code: 'InvalidInput' });
    const state = await exported(hostA, (await create(hostA)).sandboxId);
    const before2 = tree(hostA);
    expect(await errorOf(await importInto(hostA, '..%2Fx', state))).toMatchObject({
      status: 400,
      code: 'InvalidInput',
    });
    expect(await errorOf(await call(hostA, 'GET', '/v1/sandboxes/..%2Fx'))).toMatchObject({ status: 400 });
    expect(tree(hostA)).toEqual(before2);
    expect(before2.filter((p) => !before.includes(p)).every((p) => p.startsWith('session-1'))).toBe(true);
    expect(fs.existsSync(path.join(tmp, 'x'))).toBe(false);
  });

  test('snake_case fields, a missing fence and a body over the limit are refused', async () => {
    const before = tree(hostA);
    const snake = await call(hostA, 'POST', '/v1/sandboxes', {
      fence: 1,
      json: { sandbox_id: 'snake', session_id: 'session-1', spec },
    });
    const body = (await snake.json()) as { error: { code: string; message: string } };
    expect(snake.status).toBe(400);
    expect(body.error.code).toBe('InvalidInput');
    expect(JSON.stringify(body)).toContain('did you mean \\"sandboxId\\"');
    const unfenced = await call(hostA, 'POST', '/v1/sandboxes', {
      json: { sandboxId: 'unfenced', sessionId: 'session-1', spec },
    });
    expect(await errorOf(unfenced)).toMatchObject({ status: 400, code: 'InvalidInput' });
    const huge = await call(hostA, 'POST', '/v1/sandboxes', {
      fence: 1,
      json: {
        sandboxId: 'huge',
        sessionId: 'session-1',
        spec: { ...spec, files: { big: 'x'.repeat(2 * 1024 * 1024) } },
      },
    });
    expect(await errorOf(huge)).toMatchObject({ status: 413, code: 'TooLarge' });
    expect(tree(hostA)).toEqual(before);
  });

  test('a truncated import is refused (422) and leaves no sandbox and nothing on disk', async () => {
    const state = await exported(hostA, (await create(hostA)).sandboxId);
    const before = tree(hostA);
    for (const cut of [Math.floor(state.length / 2), 700, state.length - 1024]) {
      const id = `truncated-${++ids}`;
      expect(await errorOf(await importInto(hostA, id, state.subarray(0, cut)))).toMatchObject({
        status: 422,
        code: 'ImportRejected',
      });
      expect(await errorOf(await call(hostA, 'GET', `/v1/sandboxes/${id}`))).toMatchObject({
        status: 404,
        code: 'SandboxNotFound',
      });
    }
    expect(tree(hostA)).toEqual(before);
    // The whole stream restores.
    expect((await importInto(hostA, `whole-${++ids}`, state)).status).toBe(200);
  });
});

describe('isolation', () => {
  test('a sandbox does not see the host’s token or settings in its environment', async () => {
    const sandboxId = `env-${++ids}`;
    const created = await call(hostA, 'POST', '/v1/sandboxes', {
      fence: 1,
      json: { sandboxId, sessionId: 'session-1', spec: { command: ['sh', '-c', 'env > env.txt; sleep 30'] } },
    });
    expect(created.status).toBe(200);
    const file = path.join(hostA.rootDir, 'session-1', sandboxId, 'env.txt');
    const env = await eventually(() => fs.existsSync(file) && fs.readFileSync(file, 'utf8'));
    expect(env).toContain('PATH=');
    expect(env).not.toContain(hostA.token);
    expect(env).not.toContain('DS_SANDBOX_HOST');
    expect(await exported(hostA, sandboxId)).not.toContain(Buffer.from(hostA.token));
  });
});

describe('fencing', () => {
  test('a stale fencing token is refused (409 StaleFence) and the sandbox runs on untouched', async () => {
    const sandbox = await create(hostA, 'fenced-session', 5);
    const stale = { fence: 4 };
    expect(await errorOf(await call(hostA, 'POST', `/v1/sandboxes/${sandbox.sandboxId}/stop`, stale))).toEqual({
      status: 409,
      code: 'StaleFence',
      retryable: false,
    });
    expect(await errorOf(await call(hostA, 'DELETE', `/v1/sandboxes/${sandbox.sandboxId}`, stale))).toMatchObject({
      code: 'StaleFence',
    });
    expect(await errorOf(await call(hostA, 'GET', `/v1/sandboxes/${sandbox.sandboxId}/export`, stale))).toMatchObject({
      code: 'StaleFence',
    });
    // The session's generation holds for its other sandboxes too.
    const other = await call(hostA, 'POST', '/v1/sandboxes', {
      fence: 3,
      json: { sandboxId: `other-${++ids}`, sessionId: 'fenced-session', spec },
    });
    expect(await errorOf(other)).toMatchObject({ status: 409, code: 'StaleFence' });
    const now = await call(hostA, 'GET', `/v1/sandboxes/${sandbox.sandboxId}`);
    expect(await now.json()).toEqual(sandbox);
    // The current generation and a newer one act; after the newer, the current one is stale too.
    expect((await call(hostA, 'POST', `/v1/sandboxes/${sandbox.sandboxId}/stop`, { fence: 6 })).status).toBe(200);
    expect(
      await errorOf(await call(hostA, 'DELETE', `/v1/sandboxes/${sandbox.sandboxId}`, { fence: 5 })),
    ).toMatchObject({
      code: 'StaleFence',
    });
    expect((await call(hostA, 'DELETE', `/v1/sandboxes/${sandbox.sandboxId}`, { fence: 6 })).status).toBe(204);
  });
});

describe('two hosts', () => {
  test('two hosts as two processes do not see each other’s sandboxes', async () => {
    const onA = await create(hostA, 'shared-session');
    expect(await errorOf(await call(hostB, 'GET', `/v1/sandboxes/${onA.sandboxId}`))).toMatchObject({
      status: 404,
      code: 'SandboxNotFound',
    });
    expect(await errorOf(await call(hostB, 'POST', `/v1/sandboxes/${onA.sandboxId}/stop`, { fence: 1 }))).toMatchObject(
      {
        status: 404,
      },
    );
    // The same id on B is a sandbox of B's own.
    const onB = await call(hostB, 'POST', '/v1/sandboxes', {
      fence: 1,
      json: { sandboxId: onA.sandboxId, sessionId: 'another-session', spec },
    });
    expect(onB.status).toBe(200);
    expect(((await onB.json()) as { pid: number }).pid).not.toBe(onA.pid);
    expect((await call(hostB, 'DELETE', `/v1/sandboxes/${onA.sandboxId}`, { fence: 1 })).status).toBe(204);
    expect(await (await call(hostA, 'GET', `/v1/sandboxes/${onA.sandboxId}`)).json()).toEqual(onA);
  });
});

describe('a host killed with -9', () => {
  test('takes its sandboxes with it: no process of theirs outlives it', async () => {
    const host = await startSandboxHost(path.join(tmp, 'killed'));
    try {
      const marker = `marker-${process.pid}-${++ids}`;
      const response = await call(host, 'POST', '/v1/sandboxes', {
        fence: 1,
        json: {
          sandboxId: `sandbox-${ids}`,
          sessionId: 'session-k',
          spec: { command: ['sh', '-c', `sleep 300 # ${marker}`] },
        },
      });
      expect(response.status).toBe(200);
      const { pid } = (await response.json()) as { pid: number };
      expect(() => process.kill(pid, 0)).not.toThrow();
      host.child.kill('SIGKILL');
      // Its process group's lifeline ends the group once the host is gone.
      await eventually(() => {
        try {
          process.kill(pid, 0);
          return false;
        } catch {
          return true;
        }
      }, 30_000);
    } finally {
      await host.stop();
    }
  });
});

describe('the OpenAPI document', () => {
  test('is current, and names exactly the routes the host serves', async () => {
    const file = path.resolve(__dirname, '..', '..', 'docs', 'providers.openapi.json');
    const document = providerOpenApiDocument();
    expect(JSON.parse(await fsp.readFile(file, 'utf8'))).toEqual(document);

    const root = await fsp.mkdtemp(path.join(tmp, 'routes-'));
    const { app } = createSandboxHost({ rootDir: root, token: 'x'.repeat(16), log: () => undefined });
    const served = app.routes
      .filter((route) => route.method !== 'ALL')
      .map((route) => `${route.method} ${route.path.replace(/:(\w+)/g, '{$1}')}`);
    const paths = document.paths as Record<string, Record<string, unknown>>;
    const documented = Object.entries(paths).flatMap(([route, operations]) =>
      Object.keys(operations).map((method) => `${method.toUpperCase()} ${route}`),
    );
    expect([...new Set(served)].sort()).toEqual(documented.sort());
  });
});
