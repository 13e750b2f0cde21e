/**
 * The system under test: one Temporal dev server (in memory, headless, a free port), the project's workers in this
 * process with the default store (chunked, encrypted) and a MemoryRuntime the bench can write to, and beside them a
 * worker for the bare baseline on a task queue of its own.
 */
import { randomUUID } from 'node:crypto';
import * as path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { bundleWorkflowCode, NativeConnection, Worker } from '@temporalio/worker';
import { SessionClient } from '../../src/client';
import { freePort, startDevServer } from '../../src/dev-server';
import { MemoryRuntime } from '../../src/runtimes';
import { createWorkers } from '../../src/worker';
import { SESSION_WORKFLOWS } from '../../src/workflow-bundle';
import { errorText, type Cleanup } from '../sessions/cleanup';
import { bareActivities } from './bare-workflow';
import { productionStore } from '../sessions/system';

export interface ControlsSystem {
  client: Client;
  sessions: SessionClient;
  /** The runtime the workers run memory sessions in: the bench writes the large states through it. */
  memory: MemoryRuntime;
  bareTaskQueue: string;
  runId: string;
}

const quietBundler = { trace() {}, debug() {}, info() {}, warn: console.warn, error: console.error, log() {} };

/** Starts everything under `root`; `cleanup` stops it, last started first. */
export async function startControlsSystem(root: string, suggestAt: number, cleanup: Cleanup): Promise<ControlsSystem> {
  const server = await startDevServer({
    port: await freePort(),
    uiPort: null,
    logFile: path.join(root, 'temporal.log'),
    extraArgs: ['--dynamic-config-value', `limit.historyCount.suggestContinueAsNew=${suggestAt}`],
  });
  cleanup.add('dev server', () => server.stop());
  const [sessionBundle, bareBundle] = await Promise.all([
    bundleWorkflowCode({ ...SESSION_WORKFLOWS, logger: quietBundler }),
    bundleWorkflowCode({ workflowsPath: require.resolve('./bare-workflow'), logger: quietBundler }),
  ]);
  const nativeConnection = await NativeConnection.connect({ address: server.address });
  cleanup.add('worker connection', () => nativeConnection.close());
  const connection = await Connection.connect({ address: server.address });
  cleanup.add('client connection', () => connection.close());
  const client = new Client({ connection });

  const runId = randomUUID().slice(0, 8);
  const taskQueue = `controls-${runId}`;
  const hostTaskQueue = `${taskQueue}@host-1`;
  const bareTaskQueue = `controls-bare-${runId}`;
  const store = productionStore(path.join(root, 'snapshots'));
  const memory = new MemoryRuntime();
  const workers = await createWorkers({
    connection: nativeConnection,
    client,
    namespace: 'default',
    taskQueue,
    hostTaskQueue,
    deps: { store, timeline: store, runtimes: { memory }, hostTaskQueue },
    workflowBundle: { code: sessionBundle.code },
  });
  const bareWorker = await Worker.create({
    connection: nativeConnection,
    namespace: 'default',
    taskQueue: bareTaskQueue,
    workflowBundle: { code: bareBundle.code },
    activities: bareActivities,
  });
  for (const [name, run] of [
    ['workers', workers.run()],
    ['bare worker', bareWorker.run()],
  ] as const) {
    run.catch((error: unknown) => console.error(`${name} stopped: ${errorText(error)}`));
    cleanup.add(name, async () => {
      if (name === 'workers') workers.shutdown();
      else bareWorker.shutdown();
      await run.catch(() => undefined);
    });
  }
  const sessions = new SessionClient({ client, taskQueue, timeline: store });
  return { client, sessions, memory, bareTaskQueue, runId };
}
