import { spawn, type ChildProcess } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { SessionClient, type SessionHandle } from '../../src/client';
import { eventually, runningStatus } from '../helpers/temporal';

/**
 * Two real worker processes that share only the Temporal server and the snapshot store: each its own data directory,
 * workspace root, worker id, host queue and labels (DS_WORKER_LABELS). Sessions spread over them by load, a
 * constrained one runs only where it may, and the list is filtered by host.
 */
const root = path.resolve(__dirname, '..', '..');
const address = process.env.DS_TEST_TEMPORAL_ADDRESS!;
const taskQueue = `fleet-${crypto.randomUUID().slice(0, 8)}`;
let dir: string;
let connection: Connection;
let sessions: SessionClient;
const workers: ChildProcess[] = [];
const started: SessionHandle[] = [];

beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ds-fleet-'));
  connection = await Connection.connect({ address });
  sessions = new SessionClient({ client: new Client({ connection }), taskQueue });
  await Promise.all([startWorker('alpha', 'zone=a'), startWorker('beta', 'zone=b,gpu')]);
}, 240_000);
afterAll(async () => {
  await Promise.allSettled(started.map((s) => s.stop({ checkpoint: false })));
  await Promise.all(workers.map(killed));
  await connection?.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

async function startWorker(workerId: string, labels: string): Promise<void> {
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    TEMPORAL_ADDRESS: address,
    DS_TASK_QUEUE: taskQueue,
    DS_WORKER_ID: workerId,
    DS_WORKER_LABELS: labels,
    DS_DATA_DIR: path.join(dir, workerId),
    // The one thing the two share besides Temporal.
    DS_SNAPSHOT_DIR: path.join(dir, 'store'),
    DS_SNAPSHOT_ENCRYPTION: 'none',
    DS_PAYLOAD_ENCRYPTION: 'none',
    LOG_LEVEL: 'WARN',
  };
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/worker.ts'], { cwd: root, env, stdio: 'pipe' });
  workers.push(child);
  let output = '';
  child.stdout.on('data', (d: Buffer) => (output += d.toString()));
  child.stderr.on('data', (d: Buffer) => (output += d.toString()));
  await eventually(() => output.includes(' polling '), 200_000);
  expect(output).toContain(`worker ${workerId} (labels ${labels.split(',').join(', ')}) polling`);
}

function killed(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    child.once('exit', () => resolve());
    child.kill('SIGKILL');
  });
}

async function start(placement?: { host?: string; workerLabels?: string[] }): Promise<string> {
  const session = await sessions.start({
    sessionId: `fleet-${crypto.randomUUID().slice(0, 8)}`,
    runtime: { kind: 'memory' },
    ...(placement ? { placement } : {}),
  });
  started.push(session);
  return (await runningStatus(session, 60_000)).runtime.hostTaskQueue;
}

test('two worker processes take new sessions by load; constraints and the host filter hold', async () => {
  const alpha = `${taskQueue}@alpha`;
  const beta = `${taskQueue}@beta`;
  const spread: string[] = [];
  for (let i = 0; i < 4; i++) spread.push(await start());
  expect(spread.filter((h) => h === alpha)).toHaveLength(2);
  expect(spread.filter((h) => h === beta)).toHaveLength(2);
  expect(spread[0]).not.toBe(spread[1]);

  expect(await start({ workerLabels: ['gpu'] })).toBe(beta);
  expect(await start({ host: 'alpha' })).toBe(alpha);

  const onAlpha = started.filter((_, i) => [...spread, beta, alpha][i] === alpha).map((s) => s.sessionId);
  await eventually(async () => (await sessions.list({ host: 'alpha' })).length === onAlpha.length, 30_000);
  expect((await sessions.list({ host: 'alpha' })).map((s) => s.sessionId).sort()).toEqual(onAlpha.sort());
}, 240_000);
