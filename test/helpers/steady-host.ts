import { Context } from '@temporalio/activity';
import { NativeConnection, Worker } from '@temporalio/worker';
import { watchTaskQueue } from '../../src/api';
import type { HostLeaseInput } from '../../src/activities/activity-inputs';

/**
 * A worker host that only answers its monitor, standing for one whose instances all keep running: its lease beats
 * until its worker stops, and it answers when asked. A test drives the monitor with attachments of its own.
 */
export interface SteadyHost {
  /** Every lease the host was given, in order. */
  leases: HostLeaseInput[];
  /** Stops polling, as a host going away: the lease under way ends with the worker. */
  stop(): Promise<void>;
  /** Polls again, as the host coming back. */
  start(): Promise<void>;
  close(): Promise<void>;
}

export async function startSteadyHost(address: string, hostTaskQueue: string): Promise<SteadyHost> {
  const connection = await NativeConnection.connect({ address });
  const leases: HostLeaseInput[] = [];
  let running: { worker: Worker; done: Promise<void> } | undefined;
  const start = async () => {
    const worker = await Worker.create({
      connection,
      taskQueue: watchTaskQueue(hostTaskQueue),
      activities: {
        async holdHostLease(input: HostLeaseInput) {
          leases.push(input);
          const ctx = Context.current();
          for (;;) {
            ctx.heartbeat();
            await ctx.sleep(500);
          }
        },
        async describeHost() {
          return { incarnation: 'steady', sessions: leases.at(-1)?.instances.length ?? 0 };
        },
      },
    });
    running = { worker, done: worker.run() };
  };
  const stop = async () => {
    if (!running) return;
    running.worker.shutdown();
    await running.done;
    running = undefined;
  };
  await start();
  return {
    leases,
    start,
    stop,
    async close() {
      await stop();
      await connection.close();
    },
  };
}
