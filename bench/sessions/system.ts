/**
 * The system under test: a Temporal dev server (in memory, headless, a free port), the project's workers in this
 * process with the default store (chunked, encrypted) and a probed WorkspaceRuntime, and a second probed runtime and
 * store for the rounds without Temporal.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import * as path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { bundleWorkflowCode, NativeConnection } from '@temporalio/worker';
import { SessionClient } from '../../src/client';
import { freePort, startDevServer } from '../../src/dev-server';
import { MemoryRuntime } from '../../src/runtimes';
import { ChunkedSnapshotStore, Keyring } from '../../src/snapshots';
import { createWorkers } from '../../src/worker';
import { SESSION_WORKFLOWS } from '../../src/workflow-bundle';
import { errorText, type Cleanup } from './cleanup';
import type { DirectRoundContext } from './direct-round';
import type { FreezeRoundContext } from './freeze-round';
import { Probe, ProbedStore, ProbedWorkspaceRuntime } from './probes';
import { Recorder } from './records';
import type { SessionRoundContext } from './session-round';
import type { Seed } from './workload';

/** The store a worker runs by default: chunked, deduplicated, AES-256-GCM under a throwaway master key. */
export function productionStore(rootDir: string): ChunkedSnapshotStore {
  return new ChunkedSnapshotStore({ rootDir, keyring: new Keyring([{ id: 'bench', key: randomBytes(32) }]) });
}

export interface SystemUnderTest {
  recorder: Recorder;
  session: SessionRoundContext;
  direct: DirectRoundContext;
  freeze: FreezeRoundContext;
}

/** Starts everything under `root`; `cleanup` stops it, last started first. */
export async function startSystem(
  root: string,
  seed: Seed,
  totalBytes: number,
  cleanup: Cleanup,
): Promise<SystemUnderTest> {
  const server = await startDevServer({
    port: await freePort(),
    uiPort: null,
    logFile: path.join(root, 'temporal.log'),
  });
  cleanup.add('dev server', () => server.stop());
  const bundle = await bundleWorkflowCode({
    ...SESSION_WORKFLOWS,
    logger: { trace() {}, debug() {}, info() {}, warn: console.warn, error: console.error, log() {} },
  });
  const nativeConnection = await NativeConnection.connect({ address: server.address });
  cleanup.add('worker connection', () => nativeConnection.close());
  const connection = await Connection.connect({ address: server.address });
  cleanup.add('client connection', () => connection.close());

  const probe = new Probe();
  const recorder = new Recorder(probe, server.process.pid);
  const runId = randomUUID().slice(0, 8);
  const taskQueue = `bench-${runId}`;
  const hostTaskQueue = `${taskQueue}@host-1`;
  const snapshotsDir = path.join(root, 'snapshots');
  const workspace = new ProbedWorkspaceRuntime(
    { rootDir: path.join(root, 'workspaces'), defaultStopGraceMs: 2_000 },
    probe,
  );
  const real = productionStore(snapshotsDir);
  const workers = await createWorkers({
    connection: nativeConnection,
    client: new Client({ connection }),
    namespace: 'default',
    taskQueue,
    hostTaskQueue,
    deps: {
      store: new ProbedStore(real, probe),
      timeline: real,
      runtimes: { workspace, memory: new MemoryRuntime() },
      hostTaskQueue,
    },
    workflowBundle: { code: bundle.code },
  });
  const running = workers.run();
  running.catch((error: unknown) => console.error(`workers stopped: ${errorText(error)}`));
  cleanup.add('workers', async () => {
    workers.shutdown();
    await running.catch(() => undefined);
    await workspace.stopAll();
  });
  const sessions = new SessionClient({ client: new Client({ connection }), taskQueue });

  const direct = new ProbedWorkspaceRuntime(
    { rootDir: path.join(root, 'direct-workspaces'), defaultStopGraceMs: 2_000 },
    probe,
  );
  cleanup.add('direct runtime', () => direct.stopAll());
  const directStore = new ProbedStore(productionStore(path.join(root, 'direct-snapshots')), probe);

  // Freeze rounds: the same capture with pre-copy and without (the baseline), on runtimes of their own.
  const freezeRuntime = (name: string, precopy: boolean) => {
    const runtime = new ProbedWorkspaceRuntime(
      { rootDir: path.join(root, `freeze-${name}`), defaultStopGraceMs: 2_000, precopy },
      probe,
    );
    cleanup.add(`freeze runtime ${name}`, () => runtime.stopAll());
    return runtime;
  };

  return {
    recorder,
    session: { sessions, recorder, cleanup, seed, snapshotsDir, runId },
    direct: { runtime: direct, store: directStore, recorder, seed },
    freeze: {
      precopy: freezeRuntime('precopy', true),
      whole: freezeRuntime('whole', false),
      store: directStore,
      recorder,
      seed,
      totalBytes,
    },
  };
}
