/**
 * The project's workers (createWorkers) in a process of their own, on a workflow bundle the test built:
 * `node --import tsx test/helpers/workflow-call-worker.ts <address> <task queue> <bundle path> <directory>`.
 * Prints "polling" once they poll; a fatal error in a workflow thread ends this process, not the test's.
 */
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { NativeConnection } from '@temporalio/worker';
import { MemoryRuntime } from '../../src/runtimes';
import { ChunkedSnapshotStore } from '../../src/snapshots';
import { createWorkers } from '../../src/worker';
import { installQuietRuntime } from './temporal';

async function main(): Promise<void> {
  const [address, taskQueue, bundlePath, dir] = process.argv.slice(2) as [string, string, string, string];
  installQuietRuntime();
  const clientConnection = await Connection.connect({ address });
  const connection = await NativeConnection.connect({ address });
  const hostTaskQueue = `${taskQueue}@host`;
  const workers = await createWorkers({
    connection,
    client: new Client({ connection: clientConnection }),
    namespace: 'default',
    taskQueue,
    hostTaskQueue,
    deps: {
      // Nothing is captured here: the store is only what the workers need to start.
      store: new ChunkedSnapshotStore({ rootDir: path.join(dir, 'snapshots'), keyring: null }),
      runtimes: { memory: new MemoryRuntime() },
      hostTaskQueue,
    },
    workflowBundle: { codePath: bundlePath },
  });
  const running = workers.run();
  console.log('polling');
  process.once('SIGTERM', () => workers.shutdown());
  await running;
  await connection.close();
  await clientConnection.close();
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
