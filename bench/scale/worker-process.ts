/**
 * The worker under test, in a process of its own so that its memory, CPU and open files are its own:
 * `node --import tsx --expose-gc bench/scale/worker-process.ts '<WorkerProcessConfig as JSON>'`, driven over IPC by
 * bench/scale/worker-handle.ts. `sessions` runs the project's workers (createWorkers: shared, host and watch queues)
 * with a memory and a workspace runtime, on the local store or a bucket; `bare` runs one worker with the baseline
 * workflows and a no-op activity. Several of either may poll one task queue, each with a host queue of its own.
 */
import * as path from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { BroadcastChannel } from 'node:worker_threads';
import { Client, Connection } from '@temporalio/client';
import { DefaultLogger, NativeConnection, Runtime, Worker } from '@temporalio/worker';
import { MemoryRuntime, WorkspaceRuntime } from '../../src/runtimes';
import { ChunkedSnapshotStore, Keyring, S3BlobBackend, type S3BlobBackendOptions } from '../../src/snapshots';
import { createWorkers } from '../../src/worker';
import type { BareActivities } from './bare-workflows';

export interface WorkerProcessConfig {
  mode: 'sessions' | 'bare';
  address: string;
  taskQueue: string;
  /** A prebuilt workflow bundle: the parent bundles once, so bundling costs no child anything. */
  bundlePath: string;
  /** This worker's workspaces (sessions mode). */
  dir: string;
  /** This worker's host: its host queue is `<taskQueue>@<host>`, its worker id the host. */
  host: string;
  /** Where checkpoints go (sessions mode): a directory the fleet's workers share, or a bucket. */
  store: { kind: 'local'; dir: string } | { kind: 's3'; s3: S3BlobBackendOptions };
  /** The master key (hex) every worker of the fleet shares: any of them restores what another captured. */
  masterKey: string;
  maxSessions: number;
  /** The sessions worker's workflow cache bound (DS_MAX_CACHED_WORKFLOWS); the project's default when absent. */
  maxCachedWorkflows?: number;
}

/** Parent → child. */
export type WorkerRequest = { type: 'sample' } | { type: 'stop' };
/** Child → parent. */
export type WorkerMessage =
  { type: 'ready' } | { type: 'sample'; heapUsed: number; loopDelayMaxMs: number; workflowCallMaxMs: number };

interface Running {
  run(): Promise<void>;
  shutdown(): void;
  close(): Promise<void>;
  /** Synchronous: what must not outlive this process, killed on any way out. */
  kill(): void;
}

async function startSessions(config: WorkerProcessConfig, connection: NativeConnection): Promise<Running> {
  const clientConnection = await Connection.connect({ address: config.address });
  const workspace = new WorkspaceRuntime({
    rootDir: path.join(config.dir, 'workspaces'),
    defaultStopGraceMs: 2_000,
    log: () => {},
  });
  const hostTaskQueue = `${config.taskQueue}@${config.host}`;
  const keyring = new Keyring([{ id: 'bench', key: Buffer.from(config.masterKey, 'hex') }]);
  const store =
    config.store.kind === 's3'
      ? new ChunkedSnapshotStore({ backend: new S3BlobBackend(config.store.s3), keyring })
      : new ChunkedSnapshotStore({ rootDir: config.store.dir, keyring });
  const workers = await createWorkers({
    connection,
    client: new Client({ connection: clientConnection }),
    namespace: 'default',
    taskQueue: config.taskQueue,
    hostTaskQueue,
    fleet: { workerId: config.host },
    deps: {
      store,
      runtimes: { workspace, memory: new MemoryRuntime() },
      hostTaskQueue,
      maxSessions: config.maxSessions,
    },
    workflowBundle: { codePath: config.bundlePath },
    ...(config.maxCachedWorkflows !== undefined ? { maxCachedWorkflows: config.maxCachedWorkflows } : {}),
  });
  return {
    run: () => workers.run(),
    shutdown: () => workers.shutdown(),
    close: async () => {
      await workspace.stopAll();
      await store.backend.close();
      await clientConnection.close();
    },
    kill: () => workspace.killAll(),
  };
}

async function startBare(config: WorkerProcessConfig, connection: NativeConnection): Promise<Running> {
  const activities: BareActivities = { noop: async () => null };
  const worker = await Worker.create({
    connection,
    namespace: 'default',
    taskQueue: config.taskQueue,
    activities,
    workflowBundle: { codePath: config.bundlePath },
  });
  return {
    run: () => worker.run(),
    shutdown: () => worker.getState() === 'RUNNING' && worker.shutdown(),
    close: async () => {},
    kill: () => {},
  };
}

function send(message: WorkerMessage): void {
  process.send!(message);
}

async function main(): Promise<void> {
  const config = JSON.parse(process.argv[2]!) as WorkerProcessConfig;
  // Failures reach the benchmark as failed calls; the SDK's warnings (a host queue without workflows) are noise here.
  // DS_BENCH_CORE_LOG (a filter such as `temporalio_sdk_core=debug,warn`): the SDK core's log on stderr, to see where a
  // worker that stopped making progress waits.
  const coreLog = process.env.DS_BENCH_CORE_LOG;
  Runtime.install({
    logger: new DefaultLogger('ERROR'),
    shutdownSignals: [],
    ...(coreLog ? { telemetryOptions: { logging: { filter: coreLog, console: {} } } } : {}),
  });
  const connection = await NativeConnection.connect({ address: config.address });
  const worker = await (config.mode === 'sessions' ? startSessions : startBare)(config, connection);
  process.on('exit', () => worker.kill());
  // A signal, or a parent gone without a word: exit through the 'exit' handler, so no session process outlives this.
  process.once('SIGTERM', () => process.exit(143));
  process.once('SIGINT', () => process.exit(130));
  process.once('disconnect', () => process.exit(1));
  const running = worker.run();
  // The longest the main thread kept a callback waiting since the last sample: a lease heartbeat waits as long.
  const loop = monitorEventLoopDelay({ resolution: 20 });
  loop.enable();
  const calls = watchWorkflowCalls();
  process.on('message', (request: WorkerRequest) => {
    if (request.type === 'sample') {
      // The delay up to this sample; then a full collection, so that what is counted is what stays alive.
      const loopDelayMaxMs = loop.max / 1e6;
      const workflowCallMaxMs = calls.maxMs();
      calls.reset();
      global.gc?.();
      send({ type: 'sample', heapUsed: process.memoryUsage().heapUsed, loopDelayMaxMs, workflowCallMaxMs });
      // Once the delay this GC caused is recorded: the benchmark's own collection is not the worker's.
      setTimeout(() => loop.reset(), 1);
    } else {
      worker.shutdown();
      void running
        .catch(() => undefined)
        .then(() => worker.close())
        .then(() => connection.close())
        .finally(() => process.exit(0));
    }
  });
  send({ type: 'ready' });
  await running;
}

main().catch((err: unknown) => {
  console.error(`worker process failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
  process.exit(1);
});

/** Calls into a workflow at least this long are logged one by one, with what they ran. */
const LOGGED_CALL_MS = 1_000;

/**
 * The longest call into a workflow's V8 context since the last reset, as the workflow threads report them
 * (bench/scale/workflow-call-probe.cjs, preloaded into each).
 */
function watchWorkflowCalls(): { maxMs(): number; reset(): void } {
  let max = 0;
  const channel = new BroadcastChannel('ds-bench-workflow-calls');
  channel.unref();
  channel.onmessage = (event) => {
    const call = (event as { data: { ms: number; workflowType: string; jobs: string } }).data;
    max = Math.max(max, call.ms);
    if (call.ms >= LOGGED_CALL_MS) {
      const at = new Date().toISOString();
      console.error(`${at} a workflow call took ${Math.round(call.ms)} ms: ${call.workflowType} [${call.jobs}]`);
    }
  };
  return { maxMs: () => max, reset: () => (max = 0) };
}
