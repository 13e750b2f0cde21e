/**
 * Remote sessions across separate processes: two reference sandbox hosts and two workers that share nothing but the
 * provider protocol, the Temporal server and a snapshot store directory. A sandbox outlives the worker that drove it
 * (another takes it over, the same process, one copy); a lost sandbox host means a restore on the other one; a worker
 * the session moved past is refused by the host.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { SessionClient, type SessionHandle } from '../../src/client';
import type { StartSessionInput } from '../../src/domain';
import { RemoteRuntime, StaleFenceError } from '../../src/providers/remote-runtime';
import { withFence } from '../../src/runtimes/fence';
import { startSandboxHost, type SandboxHostProcess } from '../helpers/sandbox-host';
import { eventually } from '../helpers/temporal';
import { processesWith, runningCopies, startWorkerProcess, type WorkerProcess } from '../helpers/worker-process';

const address = process.env.DS_TEST_TEMPORAL_ADDRESS!;
const taskQueue = `remote-${crypto.randomUUID().slice(0, 8)}`;
const token = crypto.randomBytes(24).toString('base64url');
const WORKERS = ['alpha', 'beta'] as const;
type Name = (typeof WORKERS)[number];
const HOSTS = ['east', 'west'] as const;
type HostName = (typeof HOSTS)[number];

let tmp: string;
let connection: Connection;
let client: Client;
let sessions: SessionClient;
const workers = new Map<Name, WorkerProcess>();
const hosts = new Map<HostName, SandboxHostProcess>();
const started: SessionHandle[] = [];
/** Every sandbox command carries this in its command line: none may outlive the test. */
const marker = `remote-sessions-${crypto.randomUUID().slice(0, 8)}`;

beforeAll(async () => {
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ds-remote-sessions-'));
  connection = await Connection.connect({ address });
  client = new Client({ connection });
  sessions = new SessionClient({ client, taskQueue });
  await Promise.all(HOSTS.map((name) => startHost(name)));
  await Promise.all(WORKERS.map((name) => startWorker(name)));
}, 300_000);

afterAll(async () => {
  await Promise.allSettled(started.map((s) => s.stop({ checkpoint: false })));
  await Promise.all([...workers.values()].map((w) => w.kill()));
  await Promise.all([...hosts.values()].map((h) => h.stop()));
  const left = processesWith(marker);
  for (const pid of left) process.kill(pid, 'SIGKILL');
  await connection?.close();
  fs.rmSync(tmp, { recursive: true, force: true });
  if (left.length > 0) throw new Error(`sandbox processes outlived their hosts: ${left.join(', ')}`);
}, 120_000);

async function startHost(name: HostName): Promise<SandboxHostProcess> {
  const host = await startSandboxHost(path.join(tmp, 'hosts', name), { DS_SANDBOX_HOST_TOKEN: token });
  hosts.set(name, host);
  return host;
}

/** Every worker knows both hosts; a host's URL must not change across a restart, so a restarted one keeps its port. */
async function startWorker(name: Name): Promise<WorkerProcess> {
  const worker = await startWorkerProcess({
    address,
    taskQueue,
    workerId: name,
    dataDir: path.join(tmp, 'workers', name),
    snapshotDir: path.join(tmp, 'snapshots'),
    env: {
      DS_SANDBOX_HOSTS: HOSTS.map((h) => hosts.get(h)!.url).join(','),
      DS_SANDBOX_TOKEN: token,
      DS_SANDBOX_LOST_MS: '3000',
    },
  });
  workers.set(name, worker);
  return worker;
}

const hostOf = (name: Name) => `${taskQueue}@${name}`;
const nameOf = (hostTaskQueue: string) => WORKERS.find((n) => hostOf(n) === hostTaskQueue)!;
const otherThan = (name: Name) => WORKERS.find((n) => n !== name)!;
const sandboxHostOf = (location: string) => HOSTS.find((h) => location.startsWith(`${hosts.get(h)!.url}/`))!;

/** Counts in the file `n` from the value it finds there, and logs each start's value to `starts`. */
function counter(): StartSessionInput['runtime'] {
  const script =
    'n=$(cat n 2>/dev/null || echo 0); echo "$n" >> starts; ' +
    'while :; do n=$((n+1)); echo $n > n.tmp; mv n.tmp n; sleep 0.1; done';
  return { kind: 'remote', command: ['sh', '-c', script, marker] };
}

async function start(): Promise<SessionHandle> {
  const session = await sessions.start({
    sessionId: `remote-${crypto.randomUUID().slice(0, 8)}`,
    runtime: counter(),
    liveness: { heartbeatTimeoutMs: 3_000, hostTimeoutMs: 3_000 },
  });
  started.push(session);
  return session;
}

/** The sandbox's directory on its host: `<root>/<session id>/<sandbox id>`. */
function sandboxDir(session: SessionHandle, runtime: { location: string; instanceId: string }): string {
  return path.join(hosts.get(sandboxHostOf(runtime.location))!.rootDir, session.sessionId, runtime.instanceId);
}

function countIn(dir: string): number {
  return Number(fs.readFileSync(path.join(dir, 'n'), 'utf8').trim() || 0);
}

/** The session's sandbox processes that run now (one per copy). */
function copiesOf(dir: string): number[] {
  return runningCopies(marker).filter((pid) => {
    try {
      return fs.readlinkSync(`/proc/${pid}/cwd`) === dir;
    } catch {
      return false;
    }
  });
}

/** `eventually`, failing with what the workers and hosts printed: a takeover or restore that never came says why there. */
async function until<T>(probe: () => Promise<T | undefined | false>, timeoutMs = 120_000): Promise<T> {
  try {
    return await eventually(probe, timeoutMs);
  } catch (error) {
    const outputs = [...workers, ...hosts].map(([name, p]) => `--- ${name}\n${p.output().slice(-3000)}`);
    throw new Error(`${String(error)}\n${outputs.join('\n')}`);
  }
}

async function timelineKinds(session: SessionHandle): Promise<string[]> {
  return (await session.timeline()).map((e) => e.kind);
}

test('a remote session runs on a sandbox host, checkpoints, pauses and resumes through the protocol', async () => {
  const session = await start();
  const first = (await session.status()).runtime!;
  expect(first.kind).toBe('remote');
  const dir = sandboxDir(session, first);
  await eventually(() => countIn(dir) >= 5);
  const checkpoint = await session.checkpoint({ label: 'five' });
  expect(checkpoint.runtimeKind).toBe('remote');
  await session.pause();
  expect(copiesOf(dir)).toEqual([]);
  // The paused sandbox is gone from its host: its state lives in the store only.
  expect(fs.existsSync(dir)).toBe(false);
  const resumed = await session.resume();
  const again = sandboxDir(session, resumed.runtime);
  const starts = await eventually(() => {
    const text = fs.existsSync(path.join(again, 'starts')) ? fs.readFileSync(path.join(again, 'starts'), 'utf8') : '';
    const lines = text.trim().split('\n');
    return lines.length > 1 && lines.map(Number);
  });
  // It started once from nothing, then from the paused state (at least the checkpoint's count).
  expect(starts[0]).toBe(0);
  expect(starts[1]).toBeGreaterThanOrEqual(5);
  await eventually(() => copiesOf(again).length === 1);
}, 180_000);

test('kill -9 of the worker that drives a sandbox: the other worker takes the same sandbox over, one copy running', async () => {
  const session = await start();
  const before = (await session.status()).runtime!;
  const dir = sandboxDir(session, before);
  await eventually(() => countIn(dir) >= 3);
  await session.checkpoint();
  const [pid] = await eventually(() => {
    const copies = copiesOf(dir);
    return copies.length === 1 && copies;
  });
  const driver = nameOf(before.hostTaskQueue);
  await workers.get(driver)!.kill();

  const after = await until(async () => {
    const s = await session.status();
    return s.phase === 'running' && s.runtime?.hostTaskQueue !== before.hostTaskQueue && s.runtime
      ? s.runtime
      : undefined;
  }, 120_000);
  // The same sandbox, the same process: nothing was restored, nothing started again.
  expect(after.instanceId).toBe(before.instanceId);
  expect(nameOf(after.hostTaskQueue)).toBe(otherThan(driver));
  expect(copiesOf(dir)).toEqual([pid]);
  expect(fs.readFileSync(path.join(dir, 'starts'), 'utf8').trim()).toBe('0');
  const kinds = await timelineKinds(session);
  expect(kinds).toContain('taken-over');
  expect(kinds).not.toContain('restored');
  const tookOver = (await session.timeline()).find((e) => e.kind === 'taken-over')!;
  expect(tookOver).toMatchObject({ generation: 2, host: after.hostTaskQueue });

  // The worker the session moved past (generation 1) is refused by the host, and changes nothing.
  const stale = new RemoteRuntime({ url: HOSTS.map((h) => hosts.get(h)!.url), token });
  const refused = await withFence(1, () => stale.stop(before.instanceId)).catch((e: unknown) => e);
  expect(refused).toBeInstanceOf(StaleFenceError);
  expect(copiesOf(dir)).toEqual([pid]);

  // The new driver carries on: a checkpoint goes through with the new generation.
  const count = countIn(dir);
  const checkpoint = await session.checkpoint({ label: 'after takeover' });
  expect(checkpoint.label).toBe('after takeover');
  expect(countIn(dir)).toBeGreaterThan(count);
  await startWorker(driver);
}, 240_000);

test('kill -9 of a sandbox host: the session is restored on the other host from its newest checkpoint', async () => {
  const session = await start();
  const before = (await session.status()).runtime!;
  const dir = sandboxDir(session, before);
  await eventually(() => countIn(dir) >= 5);
  const checkpoint = await session.checkpoint({ label: 'before the host dies' });
  const lost = sandboxHostOf(before.location);
  const host = hosts.get(lost)!;
  host.child.kill('SIGKILL');
  await host.stop();
  // Its sandboxes went with it.
  await eventually(() => copiesOf(dir).length === 0);

  const after = await until(async () => {
    const s = await session.status();
    return s.phase === 'running' && s.runtime?.instanceId !== before.instanceId && s.runtime ? s.runtime : undefined;
  }, 120_000);
  expect(sandboxHostOf(after.location)).toBe(HOSTS.find((h) => h !== lost));
  expect((await session.status()).lastRestore?.checkpointId).toBe(checkpoint.checkpointId);
  const again = sandboxDir(session, after);
  const starts = await eventually(() => {
    const lines = fs.readFileSync(path.join(again, 'starts'), 'utf8').trim().split('\n');
    return lines.length > 1 && lines.map(Number);
  });
  expect(starts[1]).toBeGreaterThanOrEqual(5);
  expect(await timelineKinds(session)).toEqual(expect.arrayContaining(['runtime-lost', 'restored']));
  await eventually(() => copiesOf(again).length === 1);

  // The host comes back on the same port, empty, for the tests after this one.
  await session.stop({ checkpoint: false });
  const port = new URL(host.url).port;
  hosts.set(lost, await startSandboxHost(host.rootDir, { DS_SANDBOX_HOST_TOKEN: token, DS_SANDBOX_HOST_PORT: port }));
}, 240_000);

test('a worker that drains hands its remote sandboxes to another worker as they run', async () => {
  const session = await start();
  const before = (await session.status()).runtime!;
  const dir = sandboxDir(session, before);
  const [pid] = await eventually(() => {
    const copies = copiesOf(dir);
    return copies.length === 1 && copies;
  });
  const driver = nameOf(before.hostTaskQueue);
  const code = await workers.get(driver)!.stop();
  if (code !== 0) throw new Error(`the worker exited with ${code}:\n${workers.get(driver)!.output().slice(-4000)}`);
  const after = (await session.status()).runtime!;
  expect(after.instanceId).toBe(before.instanceId);
  expect(nameOf(after.hostTaskQueue)).toBe(otherThan(driver));
  expect(copiesOf(dir)).toEqual([pid]);
  await startWorker(driver);
}, 240_000);
