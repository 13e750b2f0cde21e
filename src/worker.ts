import { DefaultLogger, NativeConnection, Runtime, Worker, type WorkerOptions } from '@temporalio/worker';
import type { ActivityDeps } from './activities';
import { createActivities } from './activities';
import { loadConfig, type Config } from './config';
import { MemoryRuntime, WorkspaceRuntime } from './runtimes';
import { snapshotStoreFromConfig } from './snapshots/store-from-config';
import { connectionOptions } from './temporal-connection';

export interface SessionWorkers {
  /** Polls the shared queue (workflows, placement) and this host's own queue (runtime activities). */
  run(): Promise<void>;
  shutdown(): void;
}

export interface CreateWorkersOptions {
  connection: NativeConnection;
  namespace: string;
  taskQueue: string;
  hostTaskQueue: string;
  deps: ActivityDeps;
  /** A prebuilt workflow bundle (tests); otherwise the workflows are bundled from source at start. */
  workflowBundle?: WorkerOptions['workflowBundle'];
}

/**
 * Two workers in one process: the shared one runs workflows and activities any host can do; the host one
 * runs the activities that touch runtime instances living in this process (the worker-specific task queue
 * pattern), so a session's capture and stop always reach the machine its process runs on.
 */
export async function createWorkers(options: CreateWorkersOptions): Promise<SessionWorkers> {
  const activities = createActivities(options.deps);
  const workflowSource = options.workflowBundle
    ? { workflowBundle: options.workflowBundle }
    : { workflowsPath: require.resolve('./workflows') };
  // Heartbeats carry snapshot I/O progress: let the server see it every few seconds, not every 80% of the timeout.
  const heartbeats = { maxHeartbeatThrottleInterval: '2s', defaultHeartbeatThrottleInterval: '2s' } as const;
  const shared = await Worker.create({
    connection: options.connection,
    namespace: options.namespace,
    taskQueue: options.taskQueue,
    activities,
    ...heartbeats,
    ...workflowSource,
  });
  const host = await Worker.create({
    connection: options.connection,
    namespace: options.namespace,
    taskQueue: options.hostTaskQueue,
    activities,
    ...heartbeats,
  });
  return {
    async run() {
      await Promise.all([shared.run(), host.run()]);
    },
    shutdown() {
      for (const w of [shared, host]) if (w.getState() === 'RUNNING') w.shutdown();
    },
  };
}

/** The worker process: connects to the configured server and runs until SIGINT/SIGTERM. */
export async function runWorker(config: Config = loadConfig(), address = config.temporal.address): Promise<void> {
  if (!address) throw new Error('TEMPORAL_ADDRESS is not set (npm start runs the embedded server and sets it)');
  Runtime.install({ logger: new DefaultLogger(config.logLevel) });
  const store = await snapshotStoreFromConfig(config);
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

  const connection = await NativeConnection.connect(await connectionOptions(config, address));
  const workspace = new WorkspaceRuntime({
    rootDir: config.workspaceDir,
    defaultStopGraceMs: config.stopGraceMs,
    envAllow: config.workspaceEnvAllow,
    user: config.workspaceUser,
  });
  const workers = await createWorkers({
    connection,
    namespace: config.temporal.namespace,
    taskQueue: config.taskQueue,
    hostTaskQueue: config.hostTaskQueue,
    deps: {
      store,
      runtimes: { workspace, memory: new MemoryRuntime() },
      hostTaskQueue: config.hostTaskQueue,
    },
  });
  console.log(`worker ${config.workerId} polling ${config.taskQueue} and ${config.hostTaskQueue} on ${address}`);
  try {
    await workers.run();
  } finally {
    // The processes of this host's sessions end with it; their sessions recover from their checkpoints.
    await workspace.stopAll();
    await connection.close();
  }
}

if (require.main === module) {
  runWorker().catch((err: unknown) => {
    console.error(err instanceof Error ? err.message : err);
    process.exit(1);
  });
}
