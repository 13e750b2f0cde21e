import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Connection } from '@temporalio/client';
import { eventually } from '../helpers/temporal';
import { processesWith, processState, startWorkerProcess, type WorkerProcess } from '../helpers/worker-process';

/**
 * Real worker processes killed with SIGKILL: a supervisor that restarts one at once, and a host whose worker is not
 * restarted at all, while another worker takes its session.
 */
const address = process.env.DS_TEST_TEMPORAL_ADDRESS!;
const taskQueue = `liveness-${crypto.randomUUID().slice(0, 8)}`;
let tmp: string;
let connection: Connection;
const workers: WorkerProcess[] = [];

beforeAll(async () => {
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ds-liveness-'));
  connection = await Connection.connect({ address });
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
