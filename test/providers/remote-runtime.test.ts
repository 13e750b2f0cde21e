import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as fsp from 'node:fs/promises';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import { Readable } from 'node:stream';
import { freePort } from '../../src/dev-server';
import { RemoteRuntime, StaleFenceError } from '../../src/providers/remote-runtime';
import { RuntimeBusyError, RuntimeExitedError, RuntimeFailedError } from '../../src/runtimes';
import { WorkspaceRuntime } from '../../src/runtimes/workspace';
import { readAll } from '../helpers/checkpoints';
import { startSandboxHost, type SandboxHostProcess } from '../helpers/sandbox-host';
import { eventually } from '../helpers/temporal';

let tmp: string;
let host: SandboxHostProcess;
let ids = 0;
const made: Array<{ runtime: RemoteRuntime; id: string }> = [];

beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'remote-runtime-'));
  host = await startSandboxHost(path.join(tmp, 'root'));
});

afterEach(async () => {
  for (const { runtime, id } of made.splice(0)) await runtime.dispose(id).catch(() => undefined);
});

afterAll(async () => {
  await host?.stop();
  await fsp.rm(tmp, { recursive: true, force: true });
});

function remote(options: Partial<ConstructorParameters<typeof RemoteRuntime>[0]> = {}) {
  return new RemoteRuntime({ url: host.url, token: host.token, ...options });
}

async function start(runtime: RemoteRuntime, command: string[], sessionId = 'session-1') {
  const instanceId = `remote-${++ids}`;
  made.push({ runtime, id: instanceId });
  return runtime.start({ sessionId, instanceId, spec: { kind: 'remote', command, stopGraceMs: 1_000 } });
}

async function digestOf(stream: Readable): Promise<string> {
  const hash = createHash('sha256');
  for await (const chunk of stream) hash.update(chunk as Buffer);
  return hash.digest('hex');
}

test('a wrong token is a permanent failure, and describe does not take it for a missing instance', async () => {
  const intruder = remote({ token: 'not-the-token-at-all' });
  const refused = start(intruder, ['sleep', '30']);
  await expect(refused).rejects.toThrow(RuntimeFailedError);
  await expect(refused).rejects.toThrow(/Unauthorized/);
  await expect(intruder.describe(`remote-${ids}`)).rejects.toThrow(/Unauthorized/);
  expect(await remote().describe(`remote-${ids}`)).toBeUndefined();
});

test('a worker with a stale fence cannot stop the sandbox its session has moved on with', async () => {
  let generation = 2;
  const current = remote({ fence: () => generation });
  const info = await start(current, ['sleep', '30'], 'fenced-session');
  const stale = remote({ fence: () => 1 });
  const refused = stale.stop(info.instanceId);
  await expect(refused).rejects.toThrow(StaleFenceError);
  await expect(refused).rejects.toMatchObject({ seen: 2 });
  await expect(stale.dispose(info.instanceId)).rejects.toThrow(StaleFenceError);
  await expect(stale.capture(info.instanceId)).rejects.toThrow(StaleFenceError);
  expect(await stale.describe(info.instanceId)).toEqual(info);
  generation = 3;
  expect(await current.stop(info.instanceId)).toMatchObject({ requested: true });
});

test('a host that cannot be reached, or does not answer, is busy (retryable)', async () => {
  const nothing = new RemoteRuntime({ url: `http://127.0.0.1:${await freePort()}`, token: 'x' });
  await expect(nothing.describe('any')).rejects.toThrow(RuntimeBusyError);
  // A server that takes the connection and never answers: the call's timeout ends it.
  const sockets: net.Socket[] = [];
  const silent = net.createServer((socket) => sockets.push(socket));
  await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
  try {
    const { port } = silent.address() as net.AddressInfo;
    const hanging = new RemoteRuntime({ url: `http://127.0.0.1:${port}`, token: 'x', timeoutMs: 200 });
    await expect(hanging.describe('any')).rejects.toThrow(RuntimeBusyError);
    // One that answers with headers and never sends the body it promised: the same timeout ends it.
    silent.removeAllListeners('connection');
    silent.on('connection', (socket: net.Socket) => {
      sockets.push(socket);
      socket.write('HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{');
    });
    await expect(hanging.describe('any')).rejects.toThrow(RuntimeBusyError);
  } finally {
    for (const socket of sockets) socket.destroy();
    await new Promise((resolve) => silent.close(resolve));
  }
});

test('a command that fails at once is RuntimeExitedError with its exit code and output', async () => {
  const runtime = remote();
  const instanceId = `remote-${++ids}`;
  made.push({ runtime, id: instanceId });
  const failed = runtime.start({
    sessionId: 'session-1',
    instanceId,
    spec: { kind: 'remote', command: ['sh', '-c', 'echo boom; exit 4'], settleMs: 5_000 },
  });
  await expect(failed).rejects.toThrow(RuntimeExitedError);
  await expect(failed).rejects.toMatchObject({ details: { exitCode: 4, outputTail: ['boom'] } });
});

test('a 32 MiB state streams out and back in: the restored sandbox exports the same bytes', async () => {
  const runtime = remote();
  const size = 32 * 1024 * 1024;
  const info = await start(runtime, ['sh', '-c', `head -c ${size} /dev/urandom > big.bin && touch done && sleep 30`]);
  await eventually(() => fs.existsSync(path.join(host.rootDir, 'session-1', info.instanceId, 'done')));
  const first = await digestOf(await runtime.capture(info.instanceId));
  const instanceId = `remote-${++ids}`;
  made.push({ runtime, id: instanceId });
  const restored = await runtime.restore({
    sessionId: 'session-1',
    instanceId,
    spec: { kind: 'remote', command: ['sleep', '30'] },
    state: await runtime.capture(info.instanceId),
  });
  expect(restored).toMatchObject({ instanceId, running: true, location: `${host.url}/v1/sandboxes/${instanceId}` });
  expect(await digestOf(await runtime.capture(instanceId))).toBe(first);
  expect(Date.parse((await runtime.lastActivity(instanceId))!)).not.toBeNaN();
  // The host reports what the sandbox holds on disk: the restored file, whole.
  const described = await fetch(`${host.url}/v1/sandboxes/${instanceId}?activity=true`, {
    headers: { authorization: `Bearer ${host.token}` },
  });
  expect(await described.json()).toMatchObject({ resources: { diskBytes: size } });
});

test('a sandbox frozen for an export runs on once the reader of the export goes away', async () => {
  const runtime = remote();
  const info = await start(runtime, [
    'sh',
    '-c',
    'head -c 67108864 /dev/urandom > big.bin; i=0; while :; do i=$((i+1)); echo $i > count; sleep 0.02; done',
  ]);
  const home = path.join(host.rootDir, 'session-1', info.instanceId);
  const count = () => Number(fs.readFileSync(path.join(home, 'count'), 'utf8').trim() || 0);
  await eventually(() => fs.existsSync(path.join(home, 'count')) && count() > 0);
  const exported = await runtime.capture(info.instanceId);
  await new Promise((resolve) => exported.once('readable', resolve));
  // Frozen (SIGSTOP: state T) for the export, which is under way: 64 MiB cannot all sit in the sockets' buffers
  // (at most 32 + 4 MiB on Linux by default).
  const state = () => fs.readFileSync(`/proc/${info.pid}/stat`, 'utf8').replace(/^.*\) /s, '')[0];
  expect(state()).toBe('T');
  exported.destroy();
  const after = count();
  await eventually(() => count() > after + 5);
  expect(state()).not.toBe('T');
  expect(await runtime.describe(info.instanceId)).toMatchObject({ pid: info.pid, running: true });
});

test('a checkpoint moves between a workspace on a worker and a sandbox on a host, both ways, byte for byte', async () => {
  const runtime = remote();
  const local = new WorkspaceRuntime({ rootDir: path.join(tmp, 'local'), defaultStopGraceMs: 1_000, log: () => {} });
  try {
    // The same capture format: a remote sandbox and a workspace on a worker read each other's state.
    expect(local.version).toBe(runtime.version);
    await local.start({
      sessionId: 'session-1',
      instanceId: 'local-1',
      spec: { kind: 'workspace', command: ['sleep', '30'], files: { 'a.txt': 'from the worker', 'd/b.txt': 'b' } },
    });
    const fromWorker = await readAll(await local.capture('local-1'));
    const instanceId = `remote-${++ids}`;
    made.push({ runtime, id: instanceId });
    await runtime.restore({
      sessionId: 'session-1',
      instanceId,
      spec: { kind: 'remote', command: ['sleep', '30'] },
      state: Readable.from([fromWorker]),
    });
    const fromHost = await readAll(await runtime.capture(instanceId));
    expect(fromHost).toEqual(fromWorker);
    await local.restore({
      sessionId: 'session-1',
      instanceId: 'local-2',
      spec: { kind: 'workspace', command: ['sleep', '30'] },
      state: Readable.from([fromHost]),
    });
    expect(await readAll(await local.capture('local-2'))).toEqual(fromWorker);
  } finally {
    await local.stopAll();
  }
});

test('a host that refuses connections is passed over: starts and restores go to the next host', async () => {
  const down = `http://127.0.0.1:${await freePort()}`;
  const runtime = new RemoteRuntime({ url: [down, host.url], token: host.token });
  // The order of the hosts is drawn from the sandbox id: ids that put the refusing host first, as the runtime ranks.
  const rank = (url: string, id: string) => createHash('sha256').update(`${url}\n${id}`).digest('hex');
  const downFirst = (id: string) => rank(down, id) < rank(host.url, id);
  const nextId = () => {
    for (;;) {
      const id = `remote-${++ids}`;
      if (downFirst(id)) return id;
    }
  };
  const started = nextId();
  made.push({ runtime, id: started });
  const info = await runtime.start({
    sessionId: 'session-1',
    instanceId: started,
    spec: { kind: 'remote', command: ['sleep', '30'], files: { 'a.txt': 'a' } },
  });
  expect(info.location.startsWith(`${host.url}/`)).toBe(true);
  const state = await readAll(await runtime.capture(started));
  const restored = nextId();
  made.push({ runtime, id: restored });
  const back = await runtime.restore({
    sessionId: 'session-1',
    instanceId: restored,
    spec: { kind: 'remote', command: ['sleep', '30'] },
    state: Readable.from([state]),
  });
  expect(back.location.startsWith(`${host.url}/`)).toBe(true);
  expect(await readAll(await runtime.capture(restored))).toEqual(state);
  // Another worker finds each sandbox by asking the hosts, the refusing one counting as having none.
  const other = new RemoteRuntime({ url: [down, host.url], token: host.token });
  expect((await other.describe(restored))?.location).toBe(back.location);
  expect(await other.describe('remote-none')).toBeUndefined();
});
