/**
 * Failover: two worker processes, each with its own data directory, workspace root, worker id and host queue, sharing
 * a Temporal dev server and one snapshot store directory (test/workflows/fleet-s3.test.ts does the same on a bucket).
 * A session with a checkpoint runs on one of them; that worker is killed with -9 and not restarted until the session
 * runs on the other.
 * Each trial prints the seconds from the kill to the session running again elsewhere, and the 100 ms samples in which
 * two copies of the session's command ran at once (stopped and dead processes do not run). The killed worker is
 * restarted for the next trial.
 *
 *   npx tsx bench/failover.ts                     # 20 trials, default liveness settings
 *   npx tsx bench/failover.ts --quick             # 5 trials
 *   npx tsx bench/failover.ts --heartbeat-timeout-ms 3000 --host-timeout-ms 3000
 *
 * Prints the median and max against the target (median ≤ 15 s) and the overlap count (must be 0); asserts nothing.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { Client, Connection } from '@temporalio/client';
import { hostWorkflowId, sessionWorkflowId } from '../src/api';
import { SessionClient, type SessionHandle } from '../src/client';
import { freePort, startDevServer } from '../src/dev-server';

const { values } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    trials: { type: 'string' },
    'heartbeat-timeout-ms': { type: 'string' },
    'host-timeout-ms': { type: 'string' },
    /** Print the recovered session's and the killed host's monitor's history, as seconds after the kill. */
    explain: { type: 'boolean', default: false },
  },
  strict: true,
});
const TRIALS = values.trials ? Number(values.trials) : values.quick ? 5 : 20;
const TARGET_S = 15;
const liveness = {
  ...(values['heartbeat-timeout-ms'] && { heartbeatTimeoutMs: Number(values['heartbeat-timeout-ms']) }),
  ...(values['host-timeout-ms'] && { hostTimeoutMs: Number(values['host-timeout-ms']) }),
};
const root = path.resolve(__dirname, '..');
/** Longer than the default liveness chain (heartbeat, question to the host, stop sent to it) plus the restore. */
const RECOVERY_LIMIT_MS = 400_000;

interface Worker {
  readonly id: string;
  child: ChildProcess;
  output: string;
}

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ds-failover-'));
const taskQueue = `failover-${crypto.randomUUID().slice(0, 8)}`;
const marker = `${taskQueue}-loop`;

async function startWorker(address: string, id: string, previous?: Worker): Promise<Worker> {
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    TEMPORAL_ADDRESS: address,
    DS_TASK_QUEUE: taskQueue,
    DS_WORKER_ID: `${id}-${taskQueue}`,
    DS_DATA_DIR: path.join(dir, id),
    DS_SNAPSHOT_DIR: path.join(dir, 'snapshots'),
    DS_SNAPSHOT_ENCRYPTION: 'none',
    DS_PAYLOAD_ENCRYPTION: 'none',
    LOG_LEVEL: 'WARN',
  };
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/worker.ts'], { cwd: root, env, stdio: 'pipe' });
  const worker: Worker = previous ?? { id, child, output: '' };
  worker.child = child;
  worker.output = '';
  child.stdout.on('data', (d: Buffer) => (worker.output += d.toString()));
  child.stderr.on('data', (d: Buffer) => (worker.output += d.toString()));
  for (let waited = 0; !worker.output.includes(' polling '); waited += 100) {
    if (child.exitCode !== null || waited > 180_000) throw new Error(`worker ${id} did not start:\n${worker.output}`);
    await delay(100);
  }
  return worker;
}

async function kill(worker: Worker): Promise<void> {
  const { child } = worker;
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGKILL');
  await exited;
}

/** Copies of the session's command that run: marked `sh` processes whose parent is not one, neither stopped nor dead. */
function runningCopies(): number {
  const marked: { pid: number; ppid: number; state: string; sh: boolean }[] = [];
  for (const name of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const cmdline = fs.readFileSync(`/proc/${name}/cmdline`, 'utf8');
      if (!cmdline.includes(marker)) continue;
      const stat = fs.readFileSync(`/proc/${name}/stat`, 'utf8');
      const [state, ppid] = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      marked.push({ pid: Number(name), ppid: Number(ppid), state: state!, sh: cmdline.startsWith('sh') });
    } catch {
      // exited meanwhile
    }
  }
  const pids = new Set(marked.map((m) => m.pid));
  return marked.filter((m) => m.sh && !pids.has(m.ppid) && !'TtZX'.includes(m.state)).length;
}

async function runningElsewhere(session: SessionHandle, instanceId: string): Promise<string> {
  const deadline = Date.now() + RECOVERY_LIMIT_MS;
  for (;;) {
    const s = await session.status().catch(() => undefined);
    if (s?.phase === 'running' && s.runtime && s.runtime.instanceId !== instanceId) return s.runtime.hostTaskQueue;
    if (Date.now() > deadline) throw new Error(`the session did not run again within ${RECOVERY_LIMIT_MS} ms`);
    await delay(50);
  }
}

/** What happened after the kill, event by event: where the seconds go. */
async function explain(connection: Connection, sessionId: string, hostTaskQueue: string, killedAt: number) {
  const client = new Client({ connection });
  for (const workflowId of [hostWorkflowId(hostTaskQueue), sessionWorkflowId(sessionId)]) {
    const history = await client.workflow.getHandle(workflowId).fetchHistory();
    console.log(`  ${workflowId}:`);
    for (const e of history.events ?? []) {
      const at = Number(e.eventTime?.seconds ?? 0) * 1000 + Math.floor((e.eventTime?.nanos ?? 0) / 1e6) - killedAt;
      if (at < -1000) continue;
      const type = String(e.eventType).replace('EVENT_TYPE_', '');
      const activity = e.activityTaskScheduledEventAttributes?.activityType?.name ?? '';
      const timeout = e.activityTaskTimedOutEventAttributes?.failure?.message ?? '';
      console.log(`    ${(at / 1000).toFixed(1).padStart(6)} s  ${type} ${activity} ${timeout}`);
    }
  }
}

async function main(): Promise<void> {
  const server = await startDevServer({
    port: await freePort(),
    uiPort: null,
    dbFilename: path.join(dir, 'temporal.sqlite'),
    logFile: path.join(dir, 'temporal.log'),
    startTimeoutMs: 90_000,
  });
  const workers: Worker[] = [];
  const connection = await Connection.connect({ address: server.address });
  try {
    const sessions = new SessionClient({ client: new Client({ connection }), taskQueue });
    workers.push(await startWorker(server.address, 'a'), await startWorker(server.address, 'b'));
    const seconds: number[] = [];
    let overlaps = 0;
    let samples = 0;
    for (let trial = 1; trial <= TRIALS; trial++) {
      const session = await sessions.start({
        sessionId: `failover-${trial}-${crypto.randomUUID().slice(0, 6)}`,
        runtime: {
          kind: 'workspace',
          command: ['sh', '-c', 'while :; do date +%s%N >> ticks; sleep 0.1; done', marker],
        },
        ...(Object.keys(liveness).length > 0 && { liveness }),
      });
      let status = await session.status();
      for (let i = 0; !(status.phase === 'running' && status.runtime); i++) {
        if (i > 600) throw new Error(`session did not start: ${status.phase}`);
        await delay(100);
        status = await session.status();
      }
      const runtime = status.runtime;
      await session.checkpoint();
      const victim = workers.find((w) => runtime.hostTaskQueue.includes(`${w.id}-${taskQueue}`))!;
      let trialOverlaps = 0;
      let trialSamples = 0;
      const sampler = setInterval(() => {
        trialSamples++;
        if (runningCopies() > 1) trialOverlaps++;
      }, 100);
      const killedAt = Date.now();
      await kill(victim);
      try {
        await runningElsewhere(session, runtime.instanceId);
      } finally {
        clearInterval(sampler);
      }
      const s = (Date.now() - killedAt) / 1000;
      // Keep sampling a second with the recovered copy running.
      const after = setInterval(() => {
        trialSamples++;
        if (runningCopies() > 1) trialOverlaps++;
      }, 100);
      await delay(1_000);
      clearInterval(after);
      if (values.explain) await explain(connection, session.sessionId, runtime.hostTaskQueue, killedAt);
      seconds.push(s);
      overlaps += trialOverlaps;
      samples += trialSamples;
      console.log(
        `trial ${trial}/${TRIALS}: killed worker ${victim.id}; running on the other after ${s.toFixed(1)} s; ` +
          `${trialOverlaps} of ${trialSamples} samples with two copies`,
      );
      await session.stop({ checkpoint: false });
      await startWorker(server.address, victim.id, victim);
    }
    const sorted = [...seconds].sort((x, y) => x - y);
    const median = sorted[Math.floor(sorted.length / 2)]!;
    const max = sorted[sorted.length - 1]!;
    const settings = Object.keys(liveness).length > 0 ? JSON.stringify(liveness) : 'default liveness settings';
    console.log(`\nFailover (${TRIALS} trials, ${settings}, ${os.cpus().length} cores)`);
    console.log('| median | max | samples with two copies | target |');
    console.log('|---|---|---|---|');
    console.log(
      `| ${median.toFixed(1)} s | ${max.toFixed(1)} s | ${overlaps} of ${samples} | median ≤ ${TARGET_S} s: ` +
        `${median <= TARGET_S ? 'PASS' : 'MISS'}; two copies: ${overlaps === 0 ? 'PASS' : 'MISS'} |`,
    );
  } finally {
    await Promise.all(workers.map(kill));
    await connection.close();
    await server.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
