import { Client, Connection } from '@temporalio/client';
import {
  bundleWorkflowCode,
  DefaultLogger,
  NativeConnection,
  Runtime,
  Worker,
  type WorkerOptions,
} from '@temporalio/worker';
import type { ActivityDeps } from './activities';
import { createActivities, DEFAULT_MAX_SESSIONS, fenceTargetOf, HostFence, HostState } from './activities';
import { FleetMember } from './activities/placement';
import { fleetTaskQueue } from './api/fleet';
import {
  drainUpdate,
  hostStartedSignal,
  hostWorkflowId,
  keyWorkflowId,
  watchTaskQueue,
  type DrainResult,
} from './api/messages';
import { loadConfig, storeLocation, type Config } from './config';
import { DEFAULT_TENANT } from './domain/names';
import { messageOf } from './errors';
import { prometheusExporter, SessionMetrics, type MetricsEndpoint } from './metrics';
import { createRuntimes, runtimesOf } from './runtimes';
import { dataConverterFromConfig, describePayloadEncryption, type SessionDataConverter } from './payloads';
import { openSnapshotStore } from './snapshots';
import { connectionOptions } from './temporal-connection';
import { SESSION_WORKFLOWS } from './workflow-bundle';

export interface SessionWorkers {
  /** Polls the shared queue (sessions, placement), the fleet queue (directory, monitors) and this host's own queues. */
  run(): Promise<void>;
  /**
   * Moves every session this host runs elsewhere before it goes: each is checkpointed (trigger `drain`) and its
   * runtime stopped here, then restored on another worker, or on the next one to start. The host takes no new sessions
   * from the moment this is called. Waits at most `deadlineMs` (default 30 s); sessions not drained by then are
   * reported, and recover from their newest checkpoint once this host is gone.
   */
  drain(options?: { deadlineMs?: number; reason?: string }): Promise<DrainReport>;
  shutdown(): void;
}

export interface DrainReport {
  sessions: number;
  drained: string[];
  /** Sessions that were not drained, and why (no checkpoint could be taken, the deadline passed, …). */
  notDrained: { sessionId: string; detail: string }[];
  elapsedMs: number;
}

export interface CreateWorkersOptions {
  connection: NativeConnection;
  namespace: string;
  taskQueue: string;
  hostTaskQueue: string;
  deps: ActivityDeps;
  /** Sends the drain to this host's sessions. */
  client: Client;
  /** Workflows kept in memory by the shared worker (DS_MAX_CACHED_WORKFLOWS); DEFAULT_MAX_CACHED_WORKFLOWS when unset. */
  maxCachedWorkflows?: number;
  /** A prebuilt workflow bundle (tests); otherwise the workflows are bundled from source at start. */
  workflowBundle?: WorkerOptions['workflowBundle'];
  /** The payload codec and failure converter (`dataConverterFromConfig`); the client's must match. Default: none. */
  dataConverter?: SessionDataConverter;
  /** What this host tells the fleet directory: its worker id, labels and report period (FleetMemberOptions). */
  fleet?: { workerId?: string; labels?: string[]; everyMs?: number };
}

const STICKY_TIMEOUT = '2s';

/**
 * Workflows the shared worker keeps in memory. An idle session need not stay cached: a cached one holds the workflow
 * thread's memory, an evicted one costs a replay of its (short) history at its next control. The SDK's default is
 * sized from the heap limit, far above what fits; `bench/scale/run.ts` prints both costs (bench/README.md, Scale).
 */
export const DEFAULT_MAX_CACHED_WORKFLOWS = 500;

/**
 * How long one call into a workflow may run before the SDK cuts it (its default: 5 s). The SDK measures wall time, so a
 * host saturated by thousands of sessions reaches 5 s with ordinary code, and a cut that falls while the call's
 * microtasks run ends the whole process (Node: "async hook stack has become corrupted"). The bound is for a workflow
 * that never returns, not for load.
 */
export const WORKFLOW_CALL_TIMEOUT = '1 minute';
// WorkerOptions does not list the option, but the SDK reads it: test/workflows/workflow-call.test.ts fails if it stops.
const workflowCallTimeout = { isolateExecutionTimeout: WORKFLOW_CALL_TIMEOUT };

/** Fleet workflows one worker keeps in memory: the directory and a monitor for each host it runs tasks of. */
const FLEET_CACHED_WORKFLOWS = 100;

/**
 * The workers of one process: the shared one runs sessions and the activities any host can do; the fleet one runs the
 * fleet directory and the host monitors; the host one runs the activities that touch runtime instances living in this
 * process (the worker-specific task queue pattern), so a session's capture and stop always reach the machine its
 * process runs on; the watch one runs this host's liveness.
 */
export async function createWorkers(options: CreateWorkersOptions): Promise<SessionWorkers> {
  const host = options.deps.host ?? new HostState();
  // The runtime's meter: a no-op one unless the runtime was installed with the metrics endpoint.
  const metrics = options.deps.metrics ?? new SessionMetrics(Runtime.instance().metricMeter);
  const fleet = new FleetMember({
    client: options.client,
    taskQueue: options.taskQueue,
    hostTaskQueue: options.deps.hostTaskQueue,
    capacity: options.deps.maxSessions ?? DEFAULT_MAX_SESSIONS,
    host,
    ...options.fleet,
    labels: options.fleet?.labels ?? options.deps.workerLabels,
  });
  const activities = createActivities({
    placement: fleet,
    client: options.client,
    ...options.deps,
    workerLabels: options.fleet?.labels ?? options.deps.workerLabels,
    host,
    metrics,
  });
  // Bundled once for the two workers that run workflows.
  const workflowBundle = options.workflowBundle ?? {
    code: (await bundleWorkflowCode({ ...SESSION_WORKFLOWS, logger: Runtime.instance().logger })).code,
  };
  // Heartbeats carry snapshot I/O progress: let the server see it every few seconds, not every 80% of the timeout.
  const heartbeats = { maxHeartbeatThrottleInterval: '2s', defaultHeartbeatThrottleInterval: '2s' } as const;
  const dataConverter = options.dataConverter ? { dataConverter: options.dataConverter } : {};
  const shared = await Worker.create({
    connection: options.connection,
    namespace: options.namespace,
    taskQueue: options.taskQueue,
    activities,
    // A workflow task goes to the worker that has the workflow cached; if that worker died, the task waits this long
    // before any other worker may take it (the SDK's default, 10 s, was most of a failover). A live worker that is
    // slower than this only costs a replay elsewhere.
    stickyQueueScheduleToStartTimeout: STICKY_TIMEOUT,
    ...dataConverter,
    maxCachedWorkflows: options.maxCachedWorkflows ?? DEFAULT_MAX_CACHED_WORKFLOWS,
    ...workflowCallTimeout,
    ...heartbeats,
    workflowBundle,
  });
  // The fleet directory and the host monitors: few workflows with long histories and a task at every placement or
  // attachment, so they get a cache of their own, which sessions never evict them from (fleetTaskQueue).
  const fleetWorker = await Worker.create({
    connection: options.connection,
    namespace: options.namespace,
    taskQueue: fleetTaskQueue(options.taskQueue),
    stickyQueueScheduleToStartTimeout: STICKY_TIMEOUT,
    ...dataConverter,
    maxCachedWorkflows: FLEET_CACHED_WORKFLOWS,
    ...workflowCallTimeout,
    workflowBundle,
  });
  const hostWorker = await Worker.create({
    connection: options.connection,
    namespace: options.namespace,
    taskQueue: options.hostTaskQueue,
    activities,
    ...dataConverter,
    ...heartbeats,
  });
  // The host's lease and the question whether it is alive, and one slot per watcher of a session from before the host
  // monitor (and its next round): they only wait, and must never take the slots that the host's controls need.
  const watchWorker = await Worker.create({
    connection: options.connection,
    namespace: options.namespace,
    taskQueue: watchTaskQueue(options.hostTaskQueue),
    activities,
    maxConcurrentActivityTaskExecutions: 2 * (options.deps.maxSessions ?? DEFAULT_MAX_SESSIONS) + 10,
    ...dataConverter,
    ...heartbeats,
  });
  const workers = [shared, fleetWorker, hostWorker, watchWorker];
  let shuttingDown = false;
  return {
    async run() {
      await startHostMonitor(options, host);
      // In the directory before the first poll: a placement this host asks for can already land here.
      await fleet.start();
      const running = Promise.all(workers.map((w) => w.run()));
      // A shutdown asked for while the monitor was being started found no worker running: it applies now.
      if (shuttingDown) for (const w of workers) w.shutdown();
      try {
        await running;
      } finally {
        await fleet.stop();
      }
    },
    async drain(drainOptions = {}) {
      // The directory must know before the first drained session is placed again, or it could come back here.
      host.startDraining();
      await fleet.publish().catch((err: unknown) => console.warn(`fleet directory: ${messageOf(err)}`));
      const report = await drainHost(options, host, drainOptions);
      metrics.drain(report);
      return report;
    },
    shutdown() {
      shuttingDown = true;
      for (const w of workers) if (w.getState() === 'RUNNING') w.shutdown();
    },
  };
}

/**
 * Starts this host's monitor workflow, or tells the running one that the host has a new incarnation: the instances
 * a previous worker here ran are gone (recoverHost killed them), and their sessions are told so at once.
 */
async function startHostMonitor(options: CreateWorkersOptions, host: HostState): Promise<void> {
  await options.client.workflow.signalWithStart('hostWorkflow', {
    workflowId: hostWorkflowId(options.hostTaskQueue),
    taskQueue: fleetTaskQueue(options.taskQueue),
    args: [{ hostTaskQueue: options.hostTaskQueue }],
    signal: hostStartedSignal,
    signalArgs: [{ incarnation: host.incarnation }],
    staticSummary: `worker host ${options.hostTaskQueue}`,
  });
}

async function drainHost(
  options: CreateWorkersOptions,
  host: HostState,
  { deadlineMs = 30_000, reason = 'its worker is shutting down' }: { deadlineMs?: number; reason?: string },
): Promise<DrainReport> {
  const started = Date.now();
  host.startDraining();
  const deadline = started + deadlineMs;
  const results = new Map<string, DrainResult>();
  // Rounds: a start or restore already under way when the drain began hosts its session only once it is done.
  for (;;) {
    const fresh = host.sessions().filter((id) => !results.has(id));
    if (fresh.length === 0 && host.makingCount === 0) break;
    if (Date.now() >= deadline) break;
    if (fresh.length === 0) {
      await new Promise((r) => setTimeout(r, 100));
      continue;
    }
    for (const id of fresh)
      results.set(id, { drained: false, checkpoint: null, detail: `not drained within ${deadlineMs} ms` });
    await Promise.all(
      fresh.map(async (sessionId) => {
        const result = await withDeadline(
          options.client.workflow
            .getHandle(keyWorkflowId(sessionId))
            .executeUpdate(drainUpdate, { args: [{ hostTaskQueue: options.hostTaskQueue, reason }] }),
          deadline - Date.now(),
        ).catch((err: unknown): DrainResult => ({
          drained: false,
          checkpoint: null,
          detail: messageOf(err),
        }));
        if (result) results.set(sessionId, result);
      }),
    );
  }
  const all = [...results.entries()];
  return {
    sessions: all.length,
    drained: all.filter(([, r]) => r.drained).map(([id]) => id),
    notDrained: all
      .filter(([, r]) => !r.drained)
      .map(([sessionId, r]) => ({ sessionId, detail: r.detail ?? 'not drained' })),
    elapsedMs: Date.now() - started,
  };
}

/** The promise's value, or undefined once `ms` have passed. */
async function withDeadline<T>(promise: Promise<T>, ms: number): Promise<T | undefined> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<undefined>((resolve) => {
    timer = setTimeout(() => resolve(undefined), Math.max(0, ms));
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * The worker process: connects to the configured server and runs until SIGINT/SIGTERM, then drains.
 * `defaultMetricsPort`: where metrics are served when DS_METRICS_PORT is unset (`npm start`'s embedded default); a
 * port that is taken then only costs the endpoint, while one the operator set is required.
 */
export async function runWorker(
  config: Config = loadConfig(),
  address = config.temporal.address,
  { defaultMetricsPort }: { defaultMetricsPort?: number } = {},
): Promise<void> {
  if (!address) throw new Error('TEMPORAL_ADDRESS is not set (npm start runs the embedded server and sets it)');
  installRuntime(config, defaultMetricsPort);
  const store = await openSnapshotStore(config);
  // The first call to the store: a bucket that refuses this worker's credentials (or does not exist) stops the start
  // here, naming the store, rather than failing every session's first checkpoint.
  const tenants = await store.tenantsOnDisk().catch((err: unknown) => {
    throw new Error(`snapshot store ${storeLocation(config.snapshotStore)}: ${messageOf(err)}`, { cause: err });
  });
  // Only what no writer touched for ABANDONED_AFTER_MS: safe while other workers write to the same store.
  const abandoned = { tempFiles: 0, pins: 0, bytes: 0 };
  for (const tenant of [DEFAULT_TENANT, ...tenants]) {
    const report = await store
      .forTenant(tenant)
      .cleanAbandoned()
      .catch((err: unknown) => {
        console.warn(`snapshot store (tenant ${tenant}): could not remove what dead writers left: ${String(err)}`);
        return { tempFiles: 0, pins: 0, bytes: 0 };
      });
    abandoned.tempFiles += report.tempFiles;
    abandoned.pins += report.pins;
    abandoned.bytes += report.bytes;
  }
  if (abandoned.tempFiles + abandoned.pins > 0) {
    console.log(
      `snapshot store: removed ${abandoned.tempFiles} temp file(s) and ${abandoned.pins} pin(s) left by dead writers ` +
        `(${abandoned.bytes} bytes)`,
    );
  }
  const encryption = store.describeEncryption();
  console.log(
    encryption.mode === 'none'
      ? 'snapshots are stored in PLAINTEXT (DS_SNAPSHOT_ENCRYPTION=none): integrity-checked, not confidential'
      : `snapshots are encrypted (AES-256-GCM); new data keys are wrapped by master key ${encryption.primaryKeyId}`,
  );
  // Every worker of a store must read what any of them writes: one that writes zstd needs all of them to have it.
  console.log(
    store.describeCodec() === 'zstd'
      ? 'chunks are compressed with zstd (every worker sharing this store needs the zstd-napi binding)'
      : 'chunks are compressed with Brotli (DS_SNAPSHOT_CODEC=brotli, or the optional zstd-napi binding is not installed)',
  );

  const dataConverter = await dataConverterFromConfig(config);
  console.log(describePayloadEncryption(dataConverter.payloadCodecs[0].describe()));

  const connectOptions = await connectionOptions(config, address);
  const connection = await NativeConnection.connect(connectOptions);
  // Drains are sent as a client would: one update per session this host runs.
  const clientConnection = await Connection.connect(connectOptions);
  const runtimes = createRuntimes(config);
  // Before any activity can run here: what a worker that died on this host left running or on disk goes first, so a
  // recovered session never runs beside its old copy.
  for (const runtime of runtimesOf(runtimes)) await runtime.recoverHost?.();
  // However this process ends (process.exit included), no session process outlives it. (A kill -9 runs no handler:
  // each session's lifeline ends its group then.)
  process.on('exit', () => {
    for (const runtime of runtimesOf(runtimes)) runtime.killAll?.();
  });
  const client = new Client({ connection: clientConnection, namespace: config.temporal.namespace, dataConverter });
  // The SDK's own heartbeats are never answered to the activity: the fence records its beats with a call that is, so
  // the host knows when the server last heard from it. A call that hangs on a dead connection ends at its deadline.
  const answered = <T>(call: () => Promise<T>) => clientConnection.withDeadline(Date.now() + 5_000, call);
  const fence = new HostFence({
    target: fenceTargetOf(runtimes),
    recordHeartbeat: (taskToken) => answered(() => client.activity.heartbeat(taskToken)),
    probe: () => answered(() => clientConnection.workflowService.getSystemInfo({})).then(() => undefined),
  });
  fence.start();
  const workers = await createWorkers({
    connection,
    client,
    dataConverter,
    namespace: config.temporal.namespace,
    taskQueue: config.taskQueue,
    hostTaskQueue: config.hostTaskQueue,
    maxCachedWorkflows: config.maxCachedWorkflows,
    fleet: { workerId: config.workerId, labels: config.workerLabels },
    deps: {
      store,
      runtimes,
      hostTaskQueue: config.hostTaskQueue,
      maxSessions: config.maxSessions,
      fence,
    },
  });
  const labels = config.workerLabels.length ? ` (labels ${config.workerLabels.join(', ')})` : '';
  console.log(
    `worker ${config.workerId}${labels} polling ${config.taskQueue} and ${config.hostTaskQueue} on ${address}`,
  );
  const stopOnSignal = onShutdownSignal(
    async (signal) => {
      console.log(`${signal}: draining this host's sessions (at most ${config.drainTimeoutMs} ms)`);
      const report = await workers.drain({ deadlineMs: config.drainTimeoutMs });
      console.log(
        `drained ${report.drained.length} of ${report.sessions} session(s) in ${report.elapsedMs} ms` +
          report.notDrained.map((n) => `\n  not drained: ${n.sessionId}: ${n.detail}`).join(''),
      );
    },
    () => workers.shutdown(),
  );
  try {
    await workers.run();
  } finally {
    stopOnSignal();
    fence.close();
    // What was not drained ends with this host; those sessions recover from their newest checkpoints.
    await Promise.all(runtimesOf(runtimes).map((r) => r.stopAll?.() ?? Promise.resolve()));
    await Promise.allSettled([connection.close(), clientConnection.close()]);
  }
}

/**
 * The SDK's runtime, once per process, before any connection: with the Prometheus endpoint when it is configured,
 * which then serves Temporal's metrics and the worker's own (SessionMetrics on the runtime's meter).
 */
function installRuntime(config: Config, defaultMetricsPort?: number): void {
  const options = { logger: new DefaultLogger(config.logLevel), shutdownSignals: [] };
  const endpoint: MetricsEndpoint | undefined =
    config.metrics.port !== undefined
      ? { host: config.metrics.host, port: config.metrics.port }
      : defaultMetricsPort !== undefined
        ? { host: config.metrics.host, port: defaultMetricsPort }
        : undefined;
  if (!endpoint) {
    Runtime.install(options);
    return;
  }
  try {
    Runtime.install({ ...options, telemetryOptions: { metrics: prometheusExporter(endpoint) } });
  } catch (err) {
    // Only the embedded default goes on without its endpoint (the runtime is not installed when the bind fails).
    if (config.metrics.port !== undefined) {
      throw new Error(`metrics endpoint ${endpoint.host}:${endpoint.port}: ${messageOf(err)}`, { cause: err });
    }
    console.warn(`metrics are off: ${endpoint.host}:${endpoint.port}: ${messageOf(err)} (set DS_METRICS_PORT)`);
    Runtime.install(options);
    return;
  }
  console.log(`Metrics          http://${endpoint.host}:${endpoint.port}/metrics`);
}

/**
 * SIGINT or SIGTERM: `drain`, then `shutdown`. A signal again, later than DUPLICATE_SIGNAL_MS after the first, shuts
 * down at once. Returns a function that removes the handlers. (The SDK's own signal handling is off: it would stop
 * polling before the drain could run.)
 */
const DUPLICATE_SIGNAL_MS = 2_000;

function onShutdownSignal(drain: (signal: NodeJS.Signals) => Promise<void>, shutdown: () => void): () => void {
  let drainingSince: number | undefined;
  const handler = (signal: NodeJS.Signals) => {
    // A signal sent to the process group reaches this process directly and again through npm, which passes
    // signals on: those copies are the same request, not an operator insisting.
    if (drainingSince !== undefined && Date.now() - drainingSince < DUPLICATE_SIGNAL_MS) return;
    if (drainingSince !== undefined) {
      console.log(`${signal} again: shutting down without waiting for the drain`);
      shutdown();
      return;
    }
    drainingSince = Date.now();
    drain(signal)
      .catch((err: unknown) => console.error('drain failed:', messageOf(err)))
      .finally(shutdown);
  };
  const signals: NodeJS.Signals[] = ['SIGINT', 'SIGTERM'];
  for (const s of signals) process.on(s, handler);
  return () => {
    for (const s of signals) process.off(s, handler);
  };
}

if (require.main === module) {
  runWorker().catch((err: unknown) => {
    console.error(messageOf(err));
    process.exit(1);
  });
}
