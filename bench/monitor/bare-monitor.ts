/**
 * The floor for bench/monitor/run.ts: a workflow of the monitor's name that keeps each attachment in a map and
 * holds one activity, as the monitor does, with nothing else: what the SDK costs an attachment by itself.
 */
import { condition, defineSignal, proxyActivities, setHandler } from '@temporalio/workflow';

const attach = defineSignal<[{ instanceId: string }]>('attachRuntime');

export async function hostWorkflow(): Promise<void> {
  const attached = new Map<string, unknown>();
  setHandler(attach, (a) => void attached.set(a.instanceId, a));
  await condition(() => attached.size > 0);
  const { holdHostLease } = proxyActivities<{ holdHostLease(instances: string[]): Promise<void> }>({
    startToCloseTimeout: '2 hours',
  });
  await holdHostLease([...attached.keys()]);
}
