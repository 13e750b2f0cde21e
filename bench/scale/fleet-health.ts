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
  /**
   * The monitors' questions to their hosts after a failed lease (`describeHost`), the ones not picked up in time, and
   * the control questions beside them (`askAnyWorker`) not picked up either: a host asked again for a server behind.
   */
  questions: { asked: number; unpicked: number; controlsUnpicked: number };
  /** What the monitors told sessions (`tellSessions`): batches, sessions signalled, and sessions already ended. */
  told: { batches: number; told: number; gone: number };
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
    questions: { asked: 0, unpicked: 0, controlsUnpicked: 0 },
    told: { batches: 0, told: 0, gone: 0 },
  };
  const { payloadConverter } = client.options.loadedDataConverter;
  const during = (e: temporal.api.history.v1.IHistoryEvent) => Number(e.eventTime?.seconds) * 1_000 <= +until;
  const query = "WorkflowType = 'fleetWorkflow' OR WorkflowType = 'hostWorkflow'";
  for await (const run of client.workflow.list({ query })) {
    const kind = run.type === 'fleetWorkflow' ? 'directory' : 'monitors';
    health.runs[kind]++;
    const events = (await client.workflow.getHandle(run.workflowId, run.runId).fetchHistory()).events ?? [];
    const scheduledAs = new Map<number, string>();
    for (const e of events) {
      const taskTimeout = e.workflowTaskTimedOutEventAttributes;
      if (taskTimeout) {
        health.taskTimeouts[kind]++;
        if (taskTimeout.timeoutType === TimeoutType.TIMEOUT_TYPE_SCHEDULE_TO_START) health.stickyTimeouts[kind]++;
      }
      if (e.eventType === EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED) health.taskFailures[kind]++;
      const scheduled = e.activityTaskScheduledEventAttributes;
      const name = scheduled?.activityType?.name;
      if (name) scheduledAs.set(Number(e.eventId), name);
      if (name === 'holdHostLease') {
        const bytes = (scheduled!.input?.payloads ?? []).reduce((sum, p) => sum + (p.data?.length ?? 0), 0);
        health.largestLeaseBytes = Math.max(health.largestLeaseBytes, bytes);
      }
      if (name === 'describeHost' && during(e)) health.questions.asked++;
      if (name === 'tellSessions' && during(e)) health.told.batches++;
      const completed = e.activityTaskCompletedEventAttributes;
      if (completed && scheduledAs.get(Number(completed.scheduledEventId)) === 'tellSessions' && during(e)) {
        const result = payloadConverter.fromPayload<{ told: number; gone: number }>(completed.result!.payloads![0]!);
        health.told.told += result.told;
        health.told.gone += result.gone;
      }
      const timedOut = e.activityTaskTimedOutEventAttributes;
      if (!timedOut || !during(e)) continue;
      const of = scheduledAs.get(Number(timedOut.scheduledEventId));
      if (of === 'holdHostLease') {
        health.leaseTimeouts++;
        const timeoutKind = timeoutName(timedOut.failure?.timeoutFailureInfo?.timeoutType);
        health.leaseTimeoutKinds[timeoutKind] = (health.leaseTimeoutKinds[timeoutKind] ?? 0) + 1;
      }
      if (of === 'describeHost') health.questions.unpicked++;
      if (of === 'askAnyWorker') health.questions.controlsUnpicked++;
    }
  }
  return health;
}

/** `HEARTBEAT` for TIMEOUT_TYPE_HEARTBEAT. */
function timeoutName(type: number | null | undefined): string {
  return (TimeoutType[type ?? 0] ?? 'UNKNOWN').replace('TIMEOUT_TYPE_', '');
}
