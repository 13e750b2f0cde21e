import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { sessionWorkflowId } from '../../src/api';
import { SessionClient, SessionError, WorkerUnavailableError, type SessionHandle } from '../../src/client';
import { ApiKeys, generateKey, hashKey, startGateway } from '../../src/gateway';
import { eventually, runningStatus } from '../helpers/temporal';
import { processesWith } from '../helpers/worker-process';

/**
 * Real worker processes, killed with SIGKILL: no handler runs. The session's lifeline ends its command with the worker,
 * and the next worker on the same host still fences whatever its predecessor left before the session is recovered, so
 * two copies never run.
 */
const root = path.resolve(__dirname, '..', '..');
const address = process.env.DS_TEST_TEMPORAL_ADDRESS!;
let dataDir: string;
let connection: Connection;
let sessions: SessionClient;
let temporal: Client;
const taskQueue = `crash-${crypto.randomUUID().slice(0, 8)}`;
const workers: ChildProcess[] = [];

beforeAll(async () => {
  dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'ds-crash-'));
  connection = await Connection.connect({ address });
  temporal = new Client({ connection });
  sessions = new SessionClient({ client: temporal, taskQueue });
});
afterAll(async () => {
  for (const w of workers) if (w.exitCode === null && w.signalCode === null) w.kill('SIGKILL');
  await connection?.close();
  for (const pid of processesWith(taskQueue)) process.kill(pid, 'SIGKILL');
  fs.rmSync(dataDir, { recursive: true, force: true });
});

// A test that failed may have left its worker running: the next one starts its own on the same host.
beforeEach(async () => {
  await Promise.all(workers.filter((w) => w.exitCode === null && w.signalCode === null).map(killed));
});

async function startWorker(): Promise<ChildProcess> {
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    TEMPORAL_ADDRESS: address,
    DS_TASK_QUEUE: taskQueue,
    DS_WORKER_ID: 'crash-host',
    DS_DATA_DIR: dataDir,
    DS_SNAPSHOT_ENCRYPTION: 'none',
    // The test's client has no payload codec: the worker writes what it reads.
    DS_PAYLOAD_ENCRYPTION: 'none',
    LOG_LEVEL: 'WARN',
  };
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/worker.ts'], { cwd: root, env, stdio: 'pipe' });
  workers.push(child);
  let output = '';
  child.stdout.on('data', (d: Buffer) => (output += d.toString()));
  child.stderr.on('data', (d: Buffer) => (output += d.toString()));
  await eventually(() => output.includes(' polling '), 90_000);
  return child;
}

function killed(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    child.once('exit', () => resolve());
    child.kill('SIGKILL');
  });
}

test('kill -9 of a worker: the next one on the host kills the orphaned copy, then the session recovers once', async () => {
  const marker = `${taskQueue}-counter`;
  let worker = await startWorker();
  const session = await sessions.start({
    sessionId: `crash-${crypto.randomUUID().slice(0, 8)}`,
    runtime: {
      kind: 'workspace',
      command: ['sh', '-c', 'while :; do date +%s%N >> ticks; sleep 0.1; done', marker],
    },
    liveness: { heartbeatTimeoutMs: 3_000, hostTimeoutMs: 3_000 },
  });
  const first = await runningStatus(session);
  const checkpoint = await session.checkpoint();

  await killed(worker);
  // No handler ran in the worker, but its end closed the lifeline: the command goes with it.
  await eventually(() => processesWith(marker).length === 0);

  worker = await startWorker();
  // What the dead worker left on disk goes before the new one takes any work.
  expect(fs.existsSync(`/proc/${first.runtime.pid}`)).toBe(false);
  expect(fs.existsSync(first.runtime.location)).toBe(false);

  const after = await eventually(async () => {
    const s = await session.status();
    const moved = s.phase === 'running' && s.runtime !== null && s.runtime.instanceId !== first.runtime.instanceId;
    return moved ? s : undefined;
  }, 60_000);
  expect(after.head?.checkpointId).toBe(checkpoint.checkpointId);
  // One copy runs: the recovered one. The loop's shell forks a child for each `date`, which carries the shell's
  // command line until it execs (a window a loaded machine widens): a copy is a marked process whose parent is not one.
  const marked = processesWith(marker);
  const copies = marked.filter((pid) => {
    try {
      if (!fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').startsWith('sh')) return false;
      const ppid = Number(/^PPid:\s*(\d+)/m.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]);
      return !marked.includes(ppid);
    } catch {
      return false; // a child that has exited since the listing
    }
  });
  expect(copies).toEqual([after.runtime!.pid]);
  expect((await session.timeline()).map((e) => e.kind)).toEqual(['checkpoint', 'runtime-lost', 'restored']);

  await session.stop({ checkpoint: false });
  await killed(worker);
  // The session was stopped before its worker went: no process of it remains.
  expect(processesWith(marker)).toEqual([]);
});

test('kill -9 before the first checkpoint: the session starts again from its spec, and the timeline says so', async () => {
  const marker = `${taskQueue}-fresh`;
  let worker = await startWorker();
  const session = await sessions.start({
    sessionId: `fresh-${crypto.randomUUID().slice(0, 8)}`,
    runtime: {
      kind: 'workspace',
      command: ['sh', '-c', 'while :; do sleep 0.1; done', marker],
      files: { 'seed.txt': 'from the spec' },
    },
    liveness: { heartbeatTimeoutMs: 3_000, hostTimeoutMs: 3_000 },
  });
  const first = await runningStatus(session);
  fs.writeFileSync(path.join(first.runtime.location, 'work.txt'), 'done since the start');

  await killed(worker);
  worker = await startWorker();

  const after = await eventually(async () => {
    const s = await session.status();
    const moved = s.phase === 'running' && s.runtime !== null && s.runtime.instanceId !== first.runtime.instanceId;
    return moved || s.phase === 'failed' ? s : undefined;
  }, 60_000);
  expect(after.failure).toBeNull();
  expect(after.phase).toBe('running');
  // As at its start: the seed files are there again, the work since the start is not.
  expect(fs.readFileSync(path.join(after.runtime!.location, 'seed.txt'), 'utf8')).toBe('from the spec');
  expect(fs.existsSync(path.join(after.runtime!.location, 'work.txt'))).toBe(false);
  expect(after.head).toBeNull();
  const timeline = await session.timeline();
  expect(timeline.map((e) => e.kind)).toEqual(['runtime-lost', 'restarted-from-spec']);
  expect(timeline[1]).toMatchObject({ kind: 'restarted-from-spec', instanceId: after.runtime!.instanceId });

  await session.stop({ checkpoint: false });
  await killed(worker);
  expect(processesWith(marker)).toEqual([]);
}, 240_000);

/**
 * A workspace session with one checkpoint and 128 MiB more state, whose worker is killed with -9 while `control`
 * captures (a worker is running the capture activity), then started again. Returns what the control answered.
 */
async function killedMidCapture<T>(name: string, control: (session: SessionHandle) => Promise<T>) {
  const marker = `${taskQueue}-${name}`;
  const worker = await startWorker();
  const session = await sessions.start({
    sessionId: `${name}crash-${crypto.randomUUID().slice(0, 8)}`,
    runtime: { kind: 'workspace', command: ['sh', '-c', 'while :; do sleep 0.1; done', marker] },
    liveness: { heartbeatTimeoutMs: 3_000, hostTimeoutMs: 3_000 },
  });
  const first = await runningStatus(session);
  const checkpoint = await session.checkpoint();
  // A state large enough that its capture is still under way when the worker is killed.
  fs.writeFileSync(path.join(first.runtime.location, 'large.bin'), crypto.randomBytes(128 * 1024 * 1024));

  const answered = control(session);
  answered.catch(() => undefined);
  await eventually(async () => {
    const { raw } = await temporal.workflow.getHandle(sessionWorkflowId(session.sessionId)).describe();
    // PENDING_ACTIVITY_STATE_STARTED: a worker is running the capture.
    return raw.pendingActivities?.some((a) => a.activityType?.name === 'captureCheckpoint' && Number(a.state) === 2);
  }, 30_000);
  await killed(worker);
  return { marker, session, first, checkpoint, answered, worker: await startWorker() };
}

test('kill -9 while a pause captures: the pause is carried out on the recovered session, which ends paused', async () => {
  const { marker, session, first, checkpoint, answered, worker } = await killedMidCapture('pause', (s) =>
    s.pause({ reason: 'for the night' }),
  );

  const paused = await answered;
  expect(paused.trigger).toBe('pause');
  expect(paused.parentId).toBe(checkpoint.checkpointId);
  const status = await session.status();
  expect(status.phase).toBe('paused');
  expect(status.runtime).toBeNull();
  expect(status.head?.checkpointId).toBe(paused.checkpointId);
  const timeline = await session.timeline();
  expect(timeline.map((e) => e.kind)).toEqual(['checkpoint', 'runtime-lost', 'restored', 'checkpoint']);
  expect(timeline[1]).toMatchObject({ kind: 'runtime-lost', instanceId: first.runtime.instanceId });
  expect(timeline[2]).toMatchObject({ kind: 'restored', cause: 'recovery', checkpointId: checkpoint.checkpointId });
  // Nothing of it runs while it is paused.
  expect(processesWith(marker)).toEqual([]);

  await session.stop();
  await killed(worker);
}, 240_000);

test('kill -9 while a checkpoint captures: the checkpoint fails typed as not taken, the session runs again', async () => {
  const { marker, session, first, checkpoint, answered, worker } = await killedMidCapture('ckpt', (s) =>
    s.checkpoint({ label: 'lost' }),
  );

  const error = await answered.then(
    () => undefined,
    (err: unknown) => err,
  );
  expect(error).toBeInstanceOf(SessionError);
  expect(error).toMatchObject({ code: 'RuntimeLost' });
  expect((error as Error).message).toContain('checkpoint not taken');
  expect((error as Error).message).toContain(`runs again from checkpoint ${checkpoint.checkpointId}`);
  const status = await runningStatus(session);
  expect(status.runtime.instanceId).not.toBe(first.runtime.instanceId);
  expect(status.head?.checkpointId).toBe(checkpoint.checkpointId);
  const timeline = await session.timeline();
  expect(timeline.map((e) => e.kind)).toEqual(['checkpoint', 'runtime-lost', 'restored', 'control-failed']);
  expect(timeline[2]).toMatchObject({ kind: 'restored', cause: 'recovery', checkpointId: checkpoint.checkpointId });
  expect(JSON.stringify(timeline[3])).toContain('checkpoint not taken');
  expect(processesWith(marker)).toHaveLength(1);

  await session.stop({ checkpoint: false });
  await killed(worker);
}, 240_000);

test('status of a session whose workers are all gone answers with what Temporal knows, on every surface', async () => {
  const worker = await startWorker();
  const sessionId = `orphan-${crypto.randomUUID().slice(0, 8)}`;
  const session = await sessions.start({
    sessionId,
    runtime: { kind: 'workspace', command: ['sh', '-c', 'while :; do sleep 0.1; done', `${taskQueue}-orphan`] },
    liveness: { heartbeatTimeoutMs: 3_000, hostTimeoutMs: 3_000 },
  });
  const { runtime } = await runningStatus(session);
  const checkpoint = await session.checkpoint();
  await killed(worker);

  const bounded = new SessionClient({ client: temporal, taskQueue, statusTimeoutMs: 3_000 });
  const err: unknown = await bounded
    .get(sessionId)
    .status()
    .catch((e: unknown) => e);
  expect(err).toBeInstanceOf(WorkerUnavailableError);
  const unavailable = err as WorkerUnavailableError;
  expect(unavailable.message).toContain(`no worker is serving session ${sessionId}`);
  expect(unavailable.retryable).toBe(true);
  expect(unavailable.lastKnown).toMatchObject({
    workflowStatus: 'RUNNING',
    phase: 'running',
    runtimeKind: 'workspace',
    host: runtime.hostTaskQueue,
    checkpointCount: 1,
    headCheckpointId: checkpoint.checkpointId,
    failureCode: null,
    taskQueue,
  });

  // The CLI says it, with what Temporal knows, and exits 1.
  const cli = spawnSync(process.execPath, ['--import', 'tsx', 'src/cli/main.ts', 'status', sessionId], {
    cwd: root,
    env: {
      ...process.env,
      TEMPORAL_ADDRESS: address,
      DS_TASK_QUEUE: taskQueue,
      DS_DATA_DIR: dataDir,
      DS_SNAPSHOT_ENCRYPTION: 'none',
      DS_PAYLOAD_ENCRYPTION: 'none',
    },
    encoding: 'utf8',
    timeout: 90_000,
  });
  expect(cli.status).toBe(1);
  expect(cli.stderr).toContain(`error: WorkerUnavailable: no worker is serving session ${sessionId}`);
  expect(cli.stderr).toMatch(new RegExp(`head\\s+${checkpoint.checkpointId}`));

  // The gateway answers 503 with the same, as a problem document.
  const key = generateKey();
  const keysFile = path.join(dataDir, 'keys.json');
  fs.writeFileSync(
    keysFile,
    JSON.stringify({ keys: [{ id: 'a', sha256: hashKey(key), tenant: 'default', role: 'admin' }] }),
  );
  const gateway = await startGateway({
    port: 0,
    hostname: '127.0.0.1',
    sessions: bounded,
    keys: new ApiKeys(keysFile),
    ready: async () => true,
    logError: () => undefined,
    logNote: () => undefined,
  });
  try {
    const res = await fetch(`${gateway.url}/v1/sessions/${sessionId}`, { headers: { authorization: `Bearer ${key}` } });
    expect(res.status).toBe(503);
    const problem = (await res.json()) as { code: string; lastKnown: unknown };
    expect(problem).toMatchObject({ code: 'WorkerUnavailable', lastKnown: { phase: 'running', checkpointCount: 1 } });
  } finally {
    await gateway.close();
  }

  // A worker back on the host serves it again.
  const back = await startWorker();
  await eventually(async () => (await session.status()).phase === 'running', 60_000);
  await session.stop({ checkpoint: false });
  await killed(back);
}, 240_000);
