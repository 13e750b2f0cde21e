import { randomUUID } from 'node:crypto';
import { TimeoutFailure, WorkflowFailedError, type Client } from '@temporalio/client';
import type { ReadTimelineInput } from '../activities/activity-inputs';
import { ERROR_CODES } from '../domain/error-codes';
import { SessionRuntimeError } from '../domain/errors';
import type { TimelineLog, TimelinePage } from '../snapshots';

type TimelineReadWorkflow = (input: ReadTimelineInput) => Promise<TimelinePage>;

/** How long a read waits for a worker to serve it before it says none did. */
const READ_TIMEOUT_MS = 60_000;

/**
 * A session's stored timeline read through a worker: one short `timelineReadWorkflow` on the sessions' task queue,
 * whose activity reads the page with the worker's store and keys. What a client, the CLI or the gateway uses, so that
 * none of them holds a master key or a bucket credential.
 */
export function workerTimeline(client: Client, taskQueue: string, tenant: string): Pick<TimelineLog, 'readTimeline'> {
  return {
    async readTimeline(sessionId, options = {}): Promise<TimelinePage> {
      const input: ReadTimelineInput = { sessionId, tenant, from: options.from ?? 1, limit: options.limit ?? 1000 };
      try {
        return await client.workflow.execute<TimelineReadWorkflow>('timelineReadWorkflow', {
          taskQueue,
          workflowId: `timeline-read-${sessionId}-${randomUUID()}`,
          args: [input],
          workflowExecutionTimeout: READ_TIMEOUT_MS,
          staticSummary: `reads timeline entries ${input.from}… of session ${sessionId}`,
        });
      } catch (err) {
        if (err instanceof WorkflowFailedError && err.cause instanceof TimeoutFailure) {
          throw new SessionRuntimeError(
            ERROR_CODES.RuntimeFailed,
            `no worker read the timeline of session ${sessionId} within ${READ_TIMEOUT_MS / 1000} s: ` +
              `is a worker polling task queue ${taskQueue}?`,
            sessionId,
            { cause: err },
          );
        }
        throw err;
      }
    },
  };
}
