import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { SessionClient } from '../../src/client';
import { eventually, runningStatus } from '../helpers/temporal';
import {
  processesWith,
  processState,
  runningCopies,
  sampleEvery100ms,
  startLoopbackProxy,
  startWorkerProcess,
  type LoopbackProxy,
  type WorkerProcess,
} from '../helpers/worker-process';

/**
 * A worker cut off from the Temporal server (a loopback proxy between them is severed) while its process and its
 * session's command stay healthy, and a second worker that still reaches the server: the cut-off worker must stop its
 * session's process before the other one may run the session, so two copies never run at once.
 */
const address = process.env.DS_TEST_TEMPORAL_ADDRESS!;
const taskQueue = `fence-${crypto.randomUUID().slice(0, 8)}`;
let tmp: string;
let connection: Connection;
let sessions: SessionClient;
let proxy: LoopbackProxy | undefined;
const workers: WorkerProcess[] = [];

beforeAll(async () => {
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ds-fence-'));
  connection = await Connection.connect({ address });
  sessions = new SessionClient({ client: new Client({ connection }), taskQueue });
});
afterAll(async () => {
  await Promise.all(workers.map((w) => w.kill()));
  await proxy?.close();
  await connection?.close();
  for (const pid of processesWith(taskQueue)) process.kill(pid, 'SIGKILL');
  fs.rmSync(tmp, { recursive: true, force: true });
});

/**
 * Stopped (state T). A process stopped in the middle of a write to disk shows D until the write is done: on a busy
 * disk that takes a moment, so the state is waited for rather than sampled once.
 */
async function frozen(pid: number): Promise<void> {
  await eventually(() => processState(pid) === 'T', 15_000);
}

async function worker(workerId: string, through: string): Promise<WorkerProcess> {
  const w = await startWorkerProcess({
    address: through,
    taskQueue,
    workerId: `${workerId}-${taskQueue}`,
    dataDir: path.join(tmp, workerId),
    snapshotDir: path.join(tmp, 'snapshots'),
  });
  workers.push(w);
  return w;
}

test('a worker cut off from Temporal freezes its session before another worker recovers it', async () => {
  const marker = `${taskQueue}-counter`;
  proxy = await startLoopbackProxy(address);
  const a = await worker('host-a', proxy.address);
  const session = await sessions.start({
    sessionId: `fence-${crypto.randomUUID().slice(0, 8)}`,
    runtime: { kind: 'workspace', command: ['sh', '-c', 'while :; do date +%s%N >> ticks; sleep 0.1; done', marker] },
    liveness: { heartbeatTimeoutMs: 3_000, hostTimeoutMs: 3_000 },
  });
  const first = await runningStatus(session);
  await session.checkpoint();
  const b = await worker('host-b', address);

  const sampler = sampleEvery100ms(() => runningCopies(marker));
  proxy.sever();
  const after = await eventually(async () => {
    const s = await session.status();
    return s.phase === 'running' && s.runtime && s.runtime.instanceId !== first.runtime.instanceId ? s : undefined;
  }, 90_000);
  const seen = sampler.samples.length;
  await eventually(() => sampler.samples.length >= seen + 10);
  const samples = sampler.stop();

  // The old copy is frozen on its cut-off host, not running: the recovered one is the only copy that runs.
  await frozen(first.runtime.pid!);
  expect(a.output()).toContain('froze 1 session process group(s)');
  expect(samples.filter((copies) => copies.length > 1)).toEqual([]);
  expect(runningCopies(marker)).toEqual([after.runtime!.pid]);

  await session.stop({ checkpoint: false });
  await b.kill();
  // The cut-off worker's end takes its frozen group with it.
  await a.kill();
  await eventually(() => processesWith(marker).length === 0);
});

test('a worker cut off until it would be given up freezes its session, then resumes it in place', async () => {
  const marker = `${taskQueue}-brief`;
  const briefProxy = await startLoopbackProxy(address);
  try {
    const a = await worker('host-c', briefProxy.address);
    const session = await sessions.start({
      sessionId: `fence-brief-${crypto.randomUUID().slice(0, 8)}`,
      runtime: { kind: 'workspace', command: ['sh', '-c', 'while :; do date +%s%N >> ticks; sleep 0.1; done', marker] },
      // Fenced once 3 s pass without contact. No other worker runs the host's monitor meanwhile: nothing declares the
      // host lost before the cut ends.
      liveness: { heartbeatTimeoutMs: 3_000 },
    });
    const first = await runningStatus(session);
    await session.checkpoint();

    briefProxy.sever();
    await eventually(() => a.output().includes('froze 1 session process group(s)'), 30_000);
    await frozen(first.runtime.pid!);
    briefProxy.restore();

    await eventually(() => a.output().includes('resumed 1 fenced session process group(s)'), 60_000);
    expect(runningCopies(marker)).toEqual([first.runtime.pid]);
    const s = await session.status();
    expect(s.phase).toBe('running');
    expect(s.runtime?.instanceId).toBe(first.runtime.instanceId);
    expect((await session.timeline()).map((e) => e.kind)).not.toContain('runtime-lost');

    await session.stop({ checkpoint: false });
    await a.kill();
    await eventually(() => processesWith(marker).length === 0);
  } finally {
    await briefProxy.close();
  }
});

test('a cut-off worker whose session was recovered elsewhere kills its frozen copy once it is back', async () => {
  const marker = `${taskQueue}-given-up`;
  const cutProxy = await startLoopbackProxy(address);
  try {
    const a = await worker('host-d', cutProxy.address);
    const session = await sessions.start({
      sessionId: `fence-given-up-${crypto.randomUUID().slice(0, 8)}`,
      runtime: { kind: 'workspace', command: ['sh', '-c', 'while :; do date +%s%N >> ticks; sleep 0.1; done', marker] },
      liveness: { heartbeatTimeoutMs: 3_000, hostTimeoutMs: 3_000 },
    });
    const first = await runningStatus(session);
    await session.checkpoint();
    const b = await worker('host-e', address);

    cutProxy.sever();
    const after = await eventually(async () => {
      const s = await session.status();
      return s.phase === 'running' && s.runtime && s.runtime.instanceId !== first.runtime.instanceId ? s : undefined;
    }, 90_000);
    await frozen(first.runtime.pid!);
    cutProxy.restore();

    // Back in touch, the worker learns no lease holds the frozen copy any more: it ends it, never resumes it.
    await eventually(() => a.output().includes('killed 1 fenced session process group(s)'), 90_000);
    await eventually(() => processState(first.runtime.pid!) === undefined);
    expect(a.output()).not.toContain('resumed 1 fenced session process group(s)');
    expect(runningCopies(marker)).toEqual([after.runtime!.pid]);

    await session.stop({ checkpoint: false });
    await Promise.all([a.kill(), b.kill()]);
    await eventually(() => processesWith(marker).length === 0);
  } finally {
    await cutProxy.close();
  }
});
