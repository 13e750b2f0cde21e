/**
 * Records the workflow histories that the replay test (test/workflows/replay.test.ts) replays against the
 * current workflow code. Run it when a release changes what the workflow does, and commit the new files
 * next to the old ones — never replace old ones: they stand for sessions still running on older code, and go only
 * when their release leaves the supported window (docs/design.md §8.6). Then point test/fixtures/previous-release.json
 * at the release (its version, and the commit of its tree) for the rolling upgrade test.
 *
 *   npx tsx scripts/record-histories.ts <label> [scenario…]
 *
 * With scenarios named (of SCENARIOS), only those are recorded: a patch that only some sessions reach is recorded
 * beside the histories of the release it joins, without a second copy of every other one.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { DefaultLogger, NativeConnection, Runtime } from '@temporalio/worker';
import { fleetTaskQueue, fleetWorkflowId, hostWorkflowId, sessionWorkflowId } from '../src/api';
import { SessionClient } from '../src/client';
import { DEFAULT_TEMPORAL_BIN, freePort, startDevServer } from '../src/dev-server';
import { ConversationRuntime, MemoryRuntime, WorkspaceRuntime } from '../src/runtimes';
import { FsSnapshotStore } from '../src/snapshots';
import { createWorkers } from '../src/worker';
import { LATE_QUESTION_SLACK_MS } from '../src/workflows/host-workflow';
import { startSteadyHost } from '../test/helpers/steady-host';

const SCENARIOS = [
  'memory-lifecycle',
  'run-control',
  'conversation',
  'workspace-exit',
  'refused-signal',
  'placement-constraints',
  'drain',
  'timeline-read',
  'checkpoint-verify',
  'restart-from-spec',
  'pause-through-host-loss',
  'checkpoint-through-host-loss',
  'monitor-continues',
  'late-question',
] as const;
type Scenario = (typeof SCENARIOS)[number];

async function main(): Promise<void> {
  const [label, ...named] = process.argv.slice(2);
  if (!label || !/^[a-z0-9.-]+$/.test(label)) {
    throw new Error('usage: record-histories.ts <label, e.g. v0.1.0> [scenario…]');
  }
  const unknown = named.filter((n) => !(SCENARIOS as readonly string[]).includes(n));
  if (unknown.length) throw new Error(`unknown scenario(s) ${unknown.join(', ')}: one of ${SCENARIOS.join(', ')}`);
  const wanted = (scenario: Scenario) => named.length === 0 || named.includes(scenario);
  Runtime.install({ logger: new DefaultLogger('WARN') });
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ds-record-'));
  const server = await startDevServer({ port: await freePort(), uiPort: null });
  const native = await NativeConnection.connect({ address: server.address });
  const connection = await Connection.connect({ address: server.address });
  const taskQueue = 'record';
  const memory = new MemoryRuntime();
  const conversation = new ConversationRuntime();
  const workspace = new WorkspaceRuntime({ rootDir: path.join(dir, 'ws') });
  const store = new FsSnapshotStore(path.join(dir, 'snapshots'));
  const client = new Client({ connection });
  const workers = await createWorkers({
    connection: native,
    client,
    namespace: 'default',
    taskQueue,
    hostTaskQueue: `${taskQueue}@host`,
    deps: {
      store,
      runtimes: { memory, workspace, conversation },
      hostTaskQueue: `${taskQueue}@host`,
      watchHeartbeatMs: 500,
    },
  });
  const running = workers.run();
  const sessions = new SessionClient({ client, taskQueue });
  /** Another in-process worker host on the same queue (its own connection, as another machine has). */
  async function addHost(name: string, labels: string[]): Promise<{ hostTaskQueue: string; close(): Promise<void> }> {
    const hostTaskQueue = `${taskQueue}@${name}`;
    const hostNative = await NativeConnection.connect({ address: server.address });
    const host = await createWorkers({
      connection: hostNative,
      client,
      namespace: 'default',
      taskQueue,
      hostTaskQueue,
      deps: { store, runtimes: { memory, workspace, conversation }, hostTaskQueue, watchHeartbeatMs: 500 },
      fleet: { workerId: name, labels },
    });
    const hostRunning = host.run();
    return {
      hostTaskQueue,
      async close() {
        await host.drain();
        host.shutdown();
        await hostRunning;
        await hostNative.close();
      },
    };
  }
  const out = path.resolve(__dirname, '..', 'test', 'fixtures', 'histories');
  fs.mkdirSync(out, { recursive: true });
  try {
    // Every control, a signal, an idempotent repeat, a rejected control, a fallback past a corrupt checkpoint, and
    // retention deleting old checkpoints.
    if (wanted('memory-lifecycle')) {
      const id = `replay-${crypto.randomUUID().slice(0, 8)}`;
      const s = await sessions.start({
        sessionId: id,
        runtime: { kind: 'memory', initialState: 'a' },
        retention: { keepLast: 2 },
      });
      await waitFor(async () => (await s.status()).phase === 'running');
      const cp1 = await s.checkpoint({ label: 'first', idempotencyKey: 'k1' });
      await s.checkpoint({ label: 'first', idempotencyKey: 'k1' });
      await s.resume().catch(() => undefined);
      const cp2 = await s.pause({ reason: 'recording' });
      const data = path.join(dir, 'snapshots', id, `${cp2.checkpointId}.data`);
      fs.writeFileSync(data, Buffer.from('not the bytes the manifest describes'));
      await s.resume();
      await s.signal('checkpoint', { label: 'by signal' });
      await waitFor(async () => (await s.status()).checkpointCount === 3);
      await s.stop();
      void cp1;
      write(server.address, out, `${label}-memory-lifecycle.json`, sessionWorkflowId(id));
    }

    if (wanted('run-control')) {
      // Run control: rewind (running and paused), policies on timers, configure, touch, and a conversation rewound by
      // message index. (Forks need the chunked store; this recorder's store is format 1.)
      const rc = await sessions.start({
        sessionId: `replay-run-control-${crypto.randomUUID().slice(0, 8)}`,
        runtime: { kind: 'memory', initialState: 'a' },
        policies: { checkpointEveryMs: 1_000 },
      });
      await waitFor(async () => (await rc.status()).checkpointCount >= 2);
      const first = await rc.checkpoint({ label: 'rewind here' });
      await rc.rewind({ to: first.index!, reason: 'recording' });
      await rc.configure({ policies: { idlePauseAfterMs: 60_000 } });
      await rc.touch();
      await rc.pause();
      await rc.rewind({ to: first.checkpointId });
      await rc.resume();
      await rc.stop();
      write(server.address, out, `${label}-run-control.json`, sessionWorkflowId(rc.sessionId));
    }

    if (wanted('conversation')) {
      const chat = await sessions.start({
        sessionId: `replay-chat-${crypto.randomUUID().slice(0, 8)}`,
        runtime: { kind: 'conversation' },
      });
      await waitFor(async () => (await chat.status()).phase === 'running');
      await chat.append({ messages: [{ role: 'user', content: 'hi' }], checkpoint: true });
      await chat.append({ messages: [{ role: 'assistant', content: 'hello' }], checkpoint: true });
      await chat.rewind({ messageIndex: 1 });
      await chat.stop({ checkpoint: false });
      write(server.address, out, `${label}-conversation.json`, sessionWorkflowId(chat.sessionId));
    }

    if (wanted('workspace-exit')) {
      // A workspace process that exits by itself.
      const w = await sessions.start({
        sessionId: `replay-exit-${crypto.randomUUID().slice(0, 8)}`,
        runtime: { kind: 'workspace', command: ['sh', '-c', 'sleep 0.5; exit 2'] },
      });
      await w.result().catch(() => undefined);
      write(server.address, out, `${label}-workspace-exit.json`, sessionWorkflowId(w.sessionId));
    }

    if (wanted('refused-signal')) {
      // A signalled control the session's runtime kind cannot serve: refused as it arrives.
      const r = await sessions.start({
        sessionId: `replay-refused-${crypto.randomUUID().slice(0, 8)}`,
        runtime: { kind: 'memory', initialState: 'a' },
      });
      await waitFor(async () => (await r.status()).phase === 'running');
      await r.signal('append', { messages: [{ role: 'user', content: 'a memory session has no messages' }] });
      await waitFor(async () => (await r.status()).lastRejectedSignal !== null);
      await r.stop();
      write(server.address, out, `${label}-refused-signal.json`, sessionWorkflowId(r.sessionId));
    }

    if (wanted('placement-constraints')) {
      // A placement the caller constrains: a host by its queue, and labels only that host carries. The session
      // pauses and resumes, so both its start and its restore are placed under the constraints.
      const labelled = await addHost('gpu', ['gpu']);
      try {
        const p = await sessions.start({
          sessionId: `replay-placed-${crypto.randomUUID().slice(0, 8)}`,
          runtime: { kind: 'memory', initialState: 'a' },
          placement: { host: labelled.hostTaskQueue, workerLabels: ['gpu'] },
        });
        await waitFor(async () => (await p.status()).runtime?.hostTaskQueue === labelled.hostTaskQueue);
        await p.pause();
        await p.resume();
        await waitFor(async () => (await p.status()).runtime?.hostTaskQueue === labelled.hostTaskQueue);
        await p.stop();
        write(server.address, out, `${label}-placement-constraints.json`, sessionWorkflowId(p.sessionId));
      } finally {
        await labelled.close();
      }
    }

    if (wanted('timeline-read')) {
      // An ended session's stored timeline, read on a worker (what clients, the CLI and the gateway do).
      const t = await sessions.start({
        sessionId: `replay-read-${crypto.randomUUID().slice(0, 8)}`,
        runtime: { kind: 'memory', initialState: 'a' },
      });
      await t.checkpoint();
      await t.stop();
      const workflowId = `timeline-read-${t.sessionId}`;
      await client.workflow.execute('timelineReadWorkflow', {
        taskQueue,
        workflowId,
        args: [{ sessionId: t.sessionId, tenant: 'default', from: 1, limit: 1000 }],
      });
      write(server.address, out, `${label}-timeline-read.json`, workflowId);
    }

    if (wanted('checkpoint-verify')) {
      // An ended session's stored checkpoints, verified on a worker (what every surface does once a session ended).
      const v = await sessions.start({
        sessionId: `replay-verify-${crypto.randomUUID().slice(0, 8)}`,
        runtime: { kind: 'memory', initialState: 'a' },
      });
      await v.checkpoint();
      await v.stop();
      const workflowId = `checkpoint-verify-${v.sessionId}`;
      await client.workflow.execute('checkpointVerifyWorkflow', {
        taskQueue,
        workflowId,
        args: [{ sessionId: v.sessionId, tenant: 'default' }],
      });
      write(server.address, out, `${label}-checkpoint-verify.json`, workflowId);
    }

    if (wanted('drain')) {
      // A drain: the session's worker shuts down, the session moves to another worker.
      const d = await sessions.start({
        sessionId: `replay-drain-${crypto.randomUUID().slice(0, 8)}`,
        runtime: { kind: 'memory' },
      });
      await waitFor(async () => (await d.status()).phase === 'running');
      const secondNative = await NativeConnection.connect({ address: server.address });
      const second = await createWorkers({
        connection: secondNative,
        client,
        namespace: 'default',
        taskQueue,
        hostTaskQueue: `${taskQueue}@host-2`,
        deps: {
          store,
          runtimes: { memory, workspace, conversation },
          hostTaskQueue: `${taskQueue}@host-2`,
          watchHeartbeatMs: 500,
        },
      });
      const secondRunning = second.run();
      await workers.drain();
      await waitFor(async () => (await d.status()).runtime?.hostTaskQueue === `${taskQueue}@host-2`);
      await d.stop();
      write(server.address, out, `${label}-drain.json`, sessionWorkflowId(d.sessionId));
      // The first host's monitor: attachments, exits passed on, the drain's releases (it runs on; this is its history so far).
      write(server.address, out, `${label}-host-monitor.json`, hostWorkflowId(`${taskQueue}@host`));
      // The fleet directory: both hosts' load reports and every placement above (it runs on; this is its history so far).
      write(server.address, out, `${label}-fleet.json`, fleetWorkflowId(taskQueue));
      second.shutdown();
      await secondRunning;
      await secondNative.close();
    }

    if (wanted('restart-from-spec') || wanted('pause-through-host-loss') || wanted('checkpoint-through-host-loss')) {
      await recordHostLoss(server.address, client, path.join(dir, 'crash'), out, label, wanted);
    }
    if (wanted('monitor-continues')) await recordMonitorContinues(path.join(dir, 'long'), out, label);
    if (wanted('late-question')) await recordLateQuestion(path.join(dir, 'late'), out, label);
  } finally {
    workers.shutdown();
    await running;
    await workspace.stopAll();
    await native.close();
    await connection.close();
    await server.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * Sessions whose worker is killed with -9 and started again on the same host (real worker processes, as
 * test/workflows/worker-crash.test.ts runs them): one lost before its first checkpoint, which starts again from its
 * spec, one lost while a pause captures, which is paused on the recovered session, and one lost while a checkpoint
 * captures, whose checkpoint fails as not taken.
 */
async function recordHostLoss(
  address: string,
  client: Client,
  dataDir: string,
  out: string,
  label: string,
  wanted: (scenario: Scenario) => boolean,
): Promise<void> {
  const taskQueue = 'record-crash';
  const sessions = new SessionClient({ client, taskQueue });
  const liveness = { heartbeatTimeoutMs: 3_000, hostTimeoutMs: 3_000 };
  const loop = (marker: string) => ['sh', '-c', 'while :; do sleep 0.1; done', marker];
  let worker = await startWorker(address, taskQueue, dataDir);
  try {
    if (wanted('restart-from-spec')) {
      const s = await sessions.start({
        sessionId: `replay-fresh-${crypto.randomUUID().slice(0, 8)}`,
        runtime: { kind: 'workspace', command: loop(`${taskQueue}-fresh`), files: { 'seed.txt': 'from the spec' } },
        liveness,
      });
      await waitFor(async () => (await s.status()).phase === 'running');
      const first = (await s.status()).runtime!.instanceId;
      await killed(worker);
      worker = await startWorker(address, taskQueue, dataDir);
      await waitFor(async () => {
        // While no worker serves it, status says so (WorkerUnavailable): asked again.
        const status = await s.status().catch(() => null);
        if (!status) return false;
        if (status.phase === 'failed') throw new Error(`the session failed: ${status.failure?.message}`);
        return status.phase === 'running' && status.runtime !== null && status.runtime.instanceId !== first;
      }, 60_000);
      const kinds = (await s.timeline()).map((e) => e.kind);
      if (!kinds.includes('restarted-from-spec')) throw new Error(`not restarted from its spec: ${kinds.join(', ')}`);
      await s.stop({ checkpoint: false });
      write(address, out, `${label}-restart-from-spec.json`, sessionWorkflowId(s.sessionId));
    }

    for (const control of ['pause', 'checkpoint'] as const) {
      if (!wanted(`${control}-through-host-loss`)) continue;
      const s = await sessions.start({
        sessionId: `replay-${control}crash-${crypto.randomUUID().slice(0, 8)}`,
        runtime: { kind: 'workspace', command: loop(`${taskQueue}-${control}`) },
        liveness,
      });
      await waitFor(async () => (await s.status()).phase === 'running');
      await s.checkpoint();
      // A state large enough that its capture is still under way when the worker is killed.
      const location = (await s.status()).runtime!.location;
      fs.writeFileSync(path.join(location, 'large.bin'), crypto.randomBytes(128 * 1024 * 1024));
      const capturing = control === 'pause' ? s.pause({ reason: 'recording' }) : s.checkpoint({ label: 'lost' });
      capturing.catch(() => undefined);
      await waitFor(async () => {
        const { raw } = await client.workflow.getHandle(sessionWorkflowId(s.sessionId)).describe();
        // PENDING_ACTIVITY_STATE_STARTED: a worker is running the capture.
        return !!raw.pendingActivities?.some(
          (a) => a.activityType?.name === 'captureCheckpoint' && Number(a.state) === 2,
        );
      }, 30_000);
      await killed(worker);
      worker = await startWorker(address, taskQueue, dataDir);
      // A pause is carried out on the recovered session; a checkpoint fails as not taken, the session running again.
      const failed = await capturing.then(
        () => undefined,
        (err: unknown) => err as Error,
      );
      const status = await s.status();
      const expected = control === 'pause' ? 'paused' : 'running';
      if (status.phase !== expected || (control === 'pause') !== (failed === undefined)) {
        throw new Error(`the ${control} through the loss ended ${status.phase}: ${failed?.message ?? 'answered'}`);
      }
      await s.stop({ checkpoint: false });
      write(address, out, `${label}-${control}-through-host-loss.json`, sessionWorkflowId(s.sessionId));
    }
  } finally {
    await killed(worker);
  }
}

/**
 * A host's monitor that continues as new while its lease is held: on a server that suggests it after 150 events,
 * sessions start on one host until the monitor's first run ends. Its first run is the history.
 */
async function recordMonitorContinues(dataDir: string, out: string, label: string): Promise<void> {
  const server = await startDevServer({
    port: await freePort(),
    uiPort: null,
    extraArgs: ['--dynamic-config-value', 'limit.historyCount.suggestContinueAsNew=150'],
  });
  const native = await NativeConnection.connect({ address: server.address });
  const connection = await Connection.connect({ address: server.address });
  const client = new Client({ connection });
  const taskQueue = 'record-long';
  const hostTaskQueue = `${taskQueue}@host`;
  const workers = await memoryWorkers(native, client, taskQueue, dataDir);
  const running = workers.run();
  try {
    const sessions = new SessionClient({ client, taskQueue });
    const monitor = client.workflow.getHandle(hostWorkflowId(hostTaskQueue));
    let firstRunId = '';
    // The workers start the monitor as they begin to run.
    await waitFor(async () => (firstRunId = (await monitor.describe().catch(() => undefined))?.runId ?? '') !== '');
    for (let i = 0; (await monitor.describe()).runId === firstRunId; i++) {
      if (i === 200) throw new Error('the host monitor did not continue as new after 200 sessions');
      const s = await sessions.start({ sessionId: `replay-long-${i}`, runtime: { kind: 'memory' } });
      await waitFor(async () => (await s.status()).phase === 'running');
    }
    write(server.address, out, `${label}-monitor-continues.json`, hostWorkflowId(hostTaskQueue), firstRunId);
  } finally {
    workers.shutdown();
    await running;
    await native.close();
    await connection.close();
    await server.stop();
  }
}

/**
 * A host's monitor whose question is recorded as not picked up long after it was due (its server stopped with SIGSTOP
 * meanwhile, as test/workflows/outage.test.ts does), asked again and answered.
 */
async function recordLateQuestion(dataDir: string, out: string, label: string): Promise<void> {
  const server = await startDevServer({ port: await freePort(), uiPort: null });
  const native = await NativeConnection.connect({ address: server.address });
  const connection = await Connection.connect({ address: server.address });
  const client = new Client({ connection });
  const taskQueue = 'record-late';
  const workers = await memoryWorkers(native, client, taskQueue, dataDir);
  const running = workers.run();
  const hostTaskQueue = `${taskQueue}@steady`;
  const host = await startSteadyHost(server.address, hostTaskQueue);
  try {
    const hostTimeoutMs = 3_000;
    const monitor = await client.workflow.start('hostWorkflow', {
      workflowId: hostWorkflowId(hostTaskQueue),
      taskQueue: fleetTaskQueue(taskQueue),
      args: [
        { hostTaskQueue, attached: [{ instanceId: 'late-1', sessionWorkflowId: 'session-late-1', hostTimeoutMs }] },
      ],
    });
    const scheduled = async (name: string) =>
      ((await monitor.fetchHistory()).events ?? []).filter(
        (e) => e.activityTaskScheduledEventAttributes?.activityType?.name === name,
      ).length;
    await waitFor(async () => host.leases.length === 1);
    await host.stop();
    await waitFor(async () => (await scheduled('describeHost')) === 1);
    server.process.kill('SIGSTOP');
    await new Promise((r) => setTimeout(r, hostTimeoutMs + LATE_QUESTION_SLACK_MS + 5_000));
    server.process.kill('SIGCONT');
    await waitFor(async () => (await scheduled('describeHost')) === 2, 60_000);
    await host.start();
    await waitFor(async () => host.leases.length === 2, 60_000);
    write(server.address, out, `${label}-late-question.json`, monitor.workflowId);
    await monitor.terminate('recorded');
  } finally {
    server.process.kill('SIGCONT');
    await host.close();
    workers.shutdown();
    await running;
    await native.close();
    await connection.close();
    await server.stop();
  }
}

/** The workers of one host with a memory runtime, for the scenarios that run on a server of their own. */
function memoryWorkers(connection: NativeConnection, client: Client, taskQueue: string, dataDir: string) {
  const hostTaskQueue = `${taskQueue}@host`;
  return createWorkers({
    connection,
    client,
    namespace: 'default',
    taskQueue,
    hostTaskQueue,
    deps: {
      store: new FsSnapshotStore(path.join(dataDir, 'snapshots')),
      runtimes: { memory: new MemoryRuntime() },
      hostTaskQueue,
      watchHeartbeatMs: 500,
    },
  });
}

/** A worker as `npm run worker` starts it, in its own process, once it polls. */
async function startWorker(address: string, taskQueue: string, dataDir: string): Promise<ChildProcess> {
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    TEMPORAL_ADDRESS: address,
    DS_TASK_QUEUE: taskQueue,
    DS_WORKER_ID: 'crash-host',
    DS_DATA_DIR: dataDir,
    DS_SNAPSHOT_ENCRYPTION: 'none',
    DS_PAYLOAD_ENCRYPTION: 'none',
    LOG_LEVEL: 'WARN',
  };
  const root = path.resolve(__dirname, '..');
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/worker.ts'], { cwd: root, env, stdio: 'pipe' });
  let output = '';
  child.stdout.on('data', (d: Buffer) => (output += d.toString()));
  child.stderr.on('data', (d: Buffer) => (output += d.toString()));
  await waitFor(async () => {
    if (child.exitCode !== null) throw new Error(`the worker exited: ${output}`);
    return output.includes(' polling ');
  }, 90_000);
  return child;
}

/** kill -9; resolves once the process has exited. */
function killed(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    child.once('exit', () => resolve());
    child.kill('SIGKILL');
  });
}

/** The history as `temporal workflow show -o json` prints it: the same JSON the Web UI downloads. */
function write(address: string, dir: string, file: string, workflowId: string, runId?: string): void {
  const json = execFileSync(DEFAULT_TEMPORAL_BIN, [
    'workflow',
    'show',
    '--address',
    address,
    '--workflow-id',
    workflowId,
    ...(runId ? ['--run-id', runId] : []),
    '--output',
    'json',
  ]);
  fs.writeFileSync(path.join(dir, file), json);
  const events = (JSON.parse(json.toString('utf8')) as { events: unknown[] }).events.length;
  console.log(`wrote ${file} (${events} events)`);
}

async function waitFor(fn: () => Promise<boolean>, timeoutMs = 20_000): Promise<void> {
  for (let i = 0; i < timeoutMs / 100; i++) {
    if (await fn()) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error('timed out');
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
