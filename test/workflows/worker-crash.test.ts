import { spawn, type ChildProcess } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { SessionClient } from '../../src/client';
import { eventually, runningStatus } from '../helpers/temporal';

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
const taskQueue = `crash-${crypto.randomUUID().slice(0, 8)}`;
const workers: ChildProcess[] = [];

beforeAll(async () => {
  dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'ds-crash-'));
  connection = await Connection.connect({ address });
  sessions = new SessionClient({ client: new Client({ connection }), taskQueue });
});
afterAll(async () => {
  for (const w of workers) if (w.exitCode === null && w.signalCode === null) w.kill('SIGKILL');
  await connection?.close();
  for (const pid of processesWith(taskQueue)) process.kill(pid, 'SIGKILL');
  fs.rmSync(dataDir, { recursive: true, force: true });
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

/** Pids of the processes whose command line holds `marker`. */
function processesWith(marker: string): number[] {
  return fs
    .readdirSync('/proc')
    .filter((name) => /^\d+$/.test(name))
    .filter((pid) => {
      try {
        return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes(marker);
      } catch {
        return false;
      }
    })
    .map(Number)
    .filter((pid) => pid !== process.pid);
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
