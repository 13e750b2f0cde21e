/**
 * What the fleet's own workflows went through in a run, read from their histories (every run of each, continue-as-new
 * included): the signs of a directory or monitor that falls behind, which stalled earlier runs of this benchmark.
 */
import type { Client } from '@temporalio/client';
import { temporal } from '@temporalio/proto';

export interface FleetHealth {
  /** Runs of the directory and of the monitors read. */
  runs: { directory: number; monitors: number };
  /**
   * Workflow tasks the server timed out, and of them the ones no worker picked up from its sticky queue in time (the
   * server then hands them to any worker: a delay, not a lost task); and the ones the worker failed.
   */
  taskTimeouts: { directory: number; monitors: number };
  stickyTimeouts: { directory: number; monitors: number };
  taskFailures: { directory: number; monitors: number };
  /** Leases (`holdHostLease`) that ended in a timeout while the run lasted: a host taken for silent. */
  leaseTimeouts: number;
  /** The same by kind of timeout (`HEARTBEAT`: the host's lease stopped beating; `SCHEDULE_TO_START`: not picked up). */
  leaseTimeoutKinds: Record<string, number>;
  /** The largest input a lease was scheduled with: it lists every instance the monitor watches. */
  largestLeaseBytes: number;
}

const { EventType, TimeoutType } = temporal.api.enums.v1;

/** `until`: the end of the run; the worker's last lease times out once the benchmark stops it, and is not counted. */
export async function fleetHealth(client: Client, until: Date): Promise<FleetHealth> {
  const health: FleetHealth = {
    runs: { directory: 0, monitors: 0 },
    taskTimeouts: { directory: 0, monitors: 0 },
    stickyTimeouts: { directory: 0, monitors: 0 },
    taskFailures: { directory: 0, monitors: 0 },
    leaseTimeouts: 0,
    leaseTimeoutKinds: {},
    largestLeaseBytes: 0,
  };
  const query = "WorkflowType = 'fleetWorkflow' OR WorkflowType = 'hostWorkflow'";
  for await (const run of client.workflow.list({ query })) {
    const kind = run.type === 'fleetWorkflow' ? 'directory' : 'monitors';
    health.runs[kind]++;
    const events = (await client.workflow.getHandle(run.workflowId, run.runId).fetchHistory()).events ?? [];
    const leases = new Set<number>();
    for (const e of events) {
      const taskTimeout = e.workflowTaskTimedOutEventAttributes;
      if (taskTimeout) {
        health.taskTimeouts[kind]++;
        if (taskTimeout.timeoutType === TimeoutType.TIMEOUT_TYPE_SCHEDULE_TO_START) health.stickyTimeouts[kind]++;
      }
      if (e.eventType === EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED) health.taskFailures[kind]++;
      const scheduled = e.activityTaskScheduledEventAttributes;
      if (scheduled?.activityType?.name === 'holdHostLease') {
        leases.add(Number(e.eventId));
        const bytes = (scheduled.input?.payloads ?? []).reduce((sum, p) => sum + (p.data?.length ?? 0), 0);
        health.largestLeaseBytes = Math.max(health.largestLeaseBytes, bytes);
      }
      const timedOut = e.activityTaskTimedOutEventAttributes;
      if (timedOut && leases.has(Number(timedOut.scheduledEventId)) && Number(e.eventTime?.seconds) * 1_000 <= +until) {
        health.leaseTimeouts++;
        const timeoutKind = timeoutName(timedOut.failure?.timeoutFailureInfo?.timeoutType);
        health.leaseTimeoutKinds[timeoutKind] = (health.leaseTimeoutKinds[timeoutKind] ?? 0) + 1;
      }
    }
  }
  return health;
}

/** `HEARTBEAT` for TIMEOUT_TYPE_HEARTBEAT. */
function timeoutName(type: number | null | undefined): string {
  return (TimeoutType[type ?? 0] ?? 'UNKNOWN').replace('TIMEOUT_TYPE_', '');
}
