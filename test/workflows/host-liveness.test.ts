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
  startWorkerProcess,
  type WorkerProcess,
} from '../helpers/worker-process';

/**
 * Real worker processes killed with SIGKILL: a supervisor that restarts one at once, and a host whose worker is not
 * restarted at all, while another worker takes its session.
 */
const address = process.env.DS_TEST_TEMPORAL_ADDRESS!;
const taskQueue = `liveness-${crypto.randomUUID().slice(0, 8)}`;
let tmp: string;
let connection: Connection;
let sessions: SessionClient;
const workers: WorkerProcess[] = [];

beforeAll(async () => {
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ds-liveness-'));
  connection = await Connection.connect({ address });
  sessions = new SessionClient({ client: new Client({ connection }), taskQueue });
});
afterAll(async () => {
  await Promise.all(workers.map((w) => w.kill()));
  await connection?.close();
  for (const pid of processesWith(taskQueue)) process.kill(pid, 'SIGKILL');
  fs.rmSync(tmp, { recursive: true, force: true });
});

async function worker(workerId: string, options: { wrapper?: string[]; queue?: string } = {}): Promise<WorkerProcess> {
  const w = await startWorkerProcess({
    address,
    taskQueue: options.queue ?? taskQueue,
    workerId: `${workerId}-${taskQueue}`,
    dataDir: path.join(tmp, workerId),
    snapshotDir: path.join(tmp, 'snapshots'),
    wrapper: options.wrapper,
  });
  workers.push(w);
  return w;
}

/** A parent that never reaps its child until its stdin closes: the killed worker stays a zombie meanwhile. */
const NEVER_REAPS = [
  'python3',
  '-c',
  'import subprocess, sys\np = subprocess.Popen(sys.argv[1:])\nprint("worker pid", p.pid, flush=True)\nsys.stdin.read()',
];

test('a worker restarted at once after a kill -9 starts while the killed one is still a zombie', async () => {
  const queue = `${taskQueue}-zombie`;
  const first = await worker('zombie-host', { wrapper: NEVER_REAPS, queue });
  const pid = Number(/worker pid (\d+)/.exec(first.output())![1]);
  process.kill(pid, 'SIGKILL');
  await eventually(() => processState(pid) === 'Z');

  // Started at once, the killed worker not yet reaped: its lock names a dead process.
  const second = await worker('zombie-host', { queue });
  expect(second.output()).not.toContain('is held by process');
  expect(processState(pid)).toBe('Z');

  first.child.stdin!.end();
  await first.kill();
  await second.kill();
});

test('kill -9 of a worker that is not restarted: its session process ends, and the recovered copy is the only one', async () => {
  const marker = `${taskQueue}-counter`;
  const a = await worker('host-a');
  const session = await sessions.start({
    sessionId: `liveness-${crypto.randomUUID().slice(0, 8)}`,
    runtime: { kind: 'workspace', command: ['sh', '-c', 'while :; do date +%s%N >> ticks; sleep 0.1; done', marker] },
    liveness: { heartbeatTimeoutMs: 3_000, hostTimeoutMs: 3_000 },
  });
  const first = await runningStatus(session);
  await session.checkpoint();
  // Only now a second worker: the session runs on the first.
  const b = await worker('host-b');

  const sampler = sampleEvery100ms(() => runningCopies(marker));
  await a.kill();
  // Nothing restarts host-a: only the lifeline can end its group.
  const after = await eventually(async () => {
    const s = await session.status();
    return s.phase === 'running' && s.runtime && s.runtime.instanceId !== first.runtime.instanceId ? s : undefined;
  }, 90_000);
  // A second of samples with the recovered copy running.
  const seen = sampler.samples.length;
  await eventually(() => sampler.samples.length >= seen + 10);
  const samples = sampler.stop();

  expect(fs.existsSync(`/proc/${first.runtime.pid}`)).toBe(false);
  expect(samples.filter((copies) => copies.length > 1)).toEqual([]);
  expect(runningCopies(marker)).toEqual([after.runtime!.pid]);

  await session.stop({ checkpoint: false });
  await b.kill();
  expect(processesWith(marker)).toEqual([]);
});
