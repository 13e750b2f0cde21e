/**
 * What the fleet's own workflows went through in a run, read from their histories (every run of each, continue-as-new
 * included): the signs of a directory or monitor that falls behind, which stalled earlier runs of this benchmark.
 */
import type { Client } from '@temporalio/client';
import { temporal } from '@temporalio/proto';

export interface FleetHealth {
  /** Runs of the directory and of the monitors read. */
  runs: { directory: number; monitors: number };
  /** Workflow tasks the server timed out, and ones the worker failed. */
  taskTimeouts: { directory: number; monitors: number };
  taskFailures: { directory: number; monitors: number };
  /** Leases (`holdHostLease`) that ended in a timeout: a host taken for silent. */
  leaseTimeouts: number;
  /** The largest input a lease was scheduled with: it lists every instance the monitor watches. */
  largestLeaseBytes: number;
}

const { EventType } = temporal.api.enums.v1;

export async function fleetHealth(client: Client): Promise<FleetHealth> {
  const health: FleetHealth = {
    runs: { directory: 0, monitors: 0 },
    taskTimeouts: { directory: 0, monitors: 0 },
    taskFailures: { directory: 0, monitors: 0 },
    leaseTimeouts: 0,
    largestLeaseBytes: 0,
  };
  const query = "WorkflowType = 'fleetWorkflow' OR WorkflowType = 'hostWorkflow'";
  for await (const run of client.workflow.list({ query })) {
    const kind = run.type === 'fleetWorkflow' ? 'directory' : 'monitors';
    health.runs[kind]++;
    const events = (await client.workflow.getHandle(run.workflowId, run.runId).fetchHistory()).events ?? [];
    const leases = new Set<number>();
    for (const e of events) {
      if (e.eventType === EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT) health.taskTimeouts[kind]++;
      if (e.eventType === EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED) health.taskFailures[kind]++;
      const scheduled = e.activityTaskScheduledEventAttributes;
      if (scheduled?.activityType?.name === 'holdHostLease') {
        leases.add(Number(e.eventId));
        const bytes = (scheduled.input?.payloads ?? []).reduce((sum, p) => sum + (p.data?.length ?? 0), 0);
        health.largestLeaseBytes = Math.max(health.largestLeaseBytes, bytes);
      }
      const timedOut = e.activityTaskTimedOutEventAttributes;
      if (timedOut && leases.has(Number(timedOut.scheduledEventId))) health.leaseTimeouts++;
    }
  }
  return health;
}
