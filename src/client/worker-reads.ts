import { randomUUID } from 'node:crypto';
import { TimeoutFailure, WorkflowFailedError, type Client, type WorkflowHandle } from '@temporalio/client';
import type { ReadTimelineInput, VerifyStoredInput } from '../activities/activity-inputs';
import type { VerificationResult } from '../api/messages';
import { ERROR_CODES } from '../domain/error-codes';
import { SessionRuntimeError } from '../domain/errors';
import type { TimelineLog, TimelinePage } from '../snapshots';

/**
 * What a client, the CLI or the gateway reads of the snapshot store, it reads through a worker: one short workflow on
 * the sessions' task queue whose activity reads with the worker's store and keys. So none of them holds a master key
 * or a bucket credential.
 */

type TimelineReadWorkflow = (input: ReadTimelineInput) => Promise<TimelinePage>;
type CheckpointVerifyWorkflow = (input: VerifyStoredInput) => Promise<VerificationResult[]>;

/** How long a read waits for a worker to take it up before it says none did. */
const READ_TIMEOUT_MS = 60_000;
/**
 * A verification reads every checkpoint the session keeps: as long as a large session's reads take, once a worker
 * took it up within READ_TIMEOUT_MS.
 */
const VERIFY_TIMEOUT_MS = 30 * 60_000;

/** A session's stored timeline read through a worker: one `timelineReadWorkflow` a page. */
export function workerTimeline(client: Client, taskQueue: string, tenant: string): Pick<TimelineLog, 'readTimeline'> {
  return {
    readTimeline(sessionId, options = {}): Promise<TimelinePage> {
      const input: ReadTimelineInput = { sessionId, tenant, from: options.from ?? 1, limit: options.limit ?? 1000 };
      return onWorker(taskQueue, sessionId, 'read the timeline', READ_TIMEOUT_MS, () =>
        client.workflow.execute<TimelineReadWorkflow>('timelineReadWorkflow', {
          taskQueue,
          workflowId: `timeline-read-${sessionId}-${randomUUID()}`,
          args: [input],
          workflowExecutionTimeout: READ_TIMEOUT_MS,
          staticSummary: `reads timeline entries ${input.from}… of session ${sessionId}`,
        }),
      );
    },
  };
}

/** The stored checkpoints of a session that has ended, verified through a worker: one `checkpointVerifyWorkflow`. */
export function workerVerify(
  client: Client,
  taskQueue: string,
  tenant: string,
): (sessionId: string, checkpointId?: string) => Promise<VerificationResult[]> {
  return (sessionId, checkpointId) => {
    const input: VerifyStoredInput = { sessionId, tenant, ...(checkpointId !== undefined ? { checkpointId } : {}) };
    const done = 'verified the checkpoints';
    return onWorker(taskQueue, sessionId, done, VERIFY_TIMEOUT_MS, async () => {
      const handle = await client.workflow.start<CheckpointVerifyWorkflow>('checkpointVerifyWorkflow', {
        taskQueue,
        workflowId: `checkpoint-verify-${sessionId}-${randomUUID()}`,
        args: [input],
        workflowExecutionTimeout: VERIFY_TIMEOUT_MS,
        staticSummary: `verifies ${checkpointId ?? 'the stored checkpoints'} of session ${sessionId}, which has ended`,
      });
      return takenUpWithin(handle, READ_TIMEOUT_MS, () => unserved(taskQueue, sessionId, done, READ_TIMEOUT_MS));
    });
  };
}

/** Runs a worker's read; one that no worker did within its time says so (`done`: what none did). */
async function onWorker<T>(
  taskQueue: string,
  sessionId: string,
  done: string,
  timeoutMs: number,
  run: () => Promise<T>,
): Promise<T> {
  try {
    return await run();
  } catch (err) {
    if (err instanceof WorkflowFailedError && err.cause instanceof TimeoutFailure) {
      throw unserved(taskQueue, sessionId, done, timeoutMs, err);
    }
    throw err;
  }
}

function unserved(taskQueue: string, sessionId: string, done: string, ms: number, cause?: unknown): Error {
  return new SessionRuntimeError(
    ERROR_CODES.RuntimeFailed,
    `no worker ${done} of session ${sessionId} within ${ms / 1000} s: is a worker polling task queue ${taskQueue}?`,
    sessionId,
    cause !== undefined ? { cause } : {},
  );
}

/**
 * The workflow's result; but one that no worker has taken up `withinMs` after its start (its history still only its
 * start and first task) is ended, and the caller hears `error()` then, not after the workflow's whole time.
 */
async function takenUpWithin<T>(handle: WorkflowHandle, withinMs: number, error: () => Error): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const untaken = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      void (async () => {
        const { raw } = await handle.describe();
        if (Number(raw.workflowExecutionInfo?.historyLength ?? 0) > 2) return;
        reject(error());
        await handle.terminate('no worker took it up');
      })().catch(() => undefined);
    }, withinMs);
  });
  try {
    return (await Promise.race([handle.result(), untaken])) as T;
  } finally {
    clearTimeout(timer);
  }
}
