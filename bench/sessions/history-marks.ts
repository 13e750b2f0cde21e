/**
 * Where a resume spends its time between the client and the runtime: the events of the workflow's history the resume
 * added (update accepted, each activity scheduled, started and completed, the update completed), as marks on the same
 * clock as the probes. The server runs on this machine, so its event times and `performance.now()` share a clock.
 */
import { performance } from 'node:perf_hooks';
import type { temporal } from '@temporalio/proto';
import type { SessionHandle } from '../../src/client';

type HistoryEvent = temporal.api.history.v1.IHistoryEvent;

/** Marks by name, in `performance.now()` milliseconds; and how many workflow tasks and activities the resume took. */
export interface HistoryMarks {
  marks: Record<string, number>;
  workflowTasks: number;
  activities: string[];
}

const perfMs = (event: HistoryEvent): number =>
  Number(event.eventTime?.seconds ?? 0) * 1000 + (event.eventTime?.nanos ?? 0) / 1e6 - performance.timeOrigin;

/**
 * The marks of the last `update` (by name) in the session's history: `wf.accepted`, `<activity>.scheduled`,
 * `.started`, `.completed` for each activity it ran (the first of each name), `wf.updateCompleted`. Started events
 * of retried activities carry their start time, though the server writes them at completion.
 */
export async function historyMarks(session: SessionHandle, update: string): Promise<HistoryMarks> {
  const events = (await session.workflow.fetchHistory()).events ?? [];
  let from = -1;
  for (let i = events.length - 1; i >= 0 && from < 0; i--) {
    if (events[i]!.workflowExecutionUpdateAcceptedEventAttributes?.acceptedRequest?.input?.name === update) from = i;
  }
  if (from < 0) return { marks: {}, workflowTasks: 0, activities: [] };
  // The task that accepted the update completed just before the acceptance was written.
  const result: HistoryMarks = { marks: {}, workflowTasks: 1, activities: [] };
  const accepted = events[from]!;
  const updateId = accepted.workflowExecutionUpdateAcceptedEventAttributes?.protocolInstanceId;
  result.marks['wf.accepted'] = perfMs(accepted);
  const names = new Map<string, string>();
  const mark = (name: string, event: HistoryEvent) => (result.marks[name] ??= perfMs(event));
  for (const event of events.slice(from + 1)) {
    const scheduled = event.activityTaskScheduledEventAttributes;
    if (scheduled) {
      const name = scheduled.activityType?.name ?? '?';
      names.set(String(event.eventId), name);
      result.activities.push(name);
      mark(`${name}.scheduled`, event);
    }
    const started = event.activityTaskStartedEventAttributes;
    if (started) mark(`${names.get(String(started.scheduledEventId)) ?? '?'}.started`, event);
    const completed = event.activityTaskCompletedEventAttributes;
    if (completed) mark(`${names.get(String(completed.scheduledEventId)) ?? '?'}.completed`, event);
    if (event.workflowTaskCompletedEventAttributes) result.workflowTasks++;
    const done = event.workflowExecutionUpdateCompletedEventAttributes;
    if (done && done.meta?.updateId === updateId) {
      mark('wf.updateCompleted', event);
      break;
    }
  }
  return result;
}
