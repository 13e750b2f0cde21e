import {
  deprecatePatch,
  log,
  patched,
  proxyActivities,
  proxyLocalActivities,
  type ActivityOptions,
} from '@temporalio/workflow';
import type { SessionActivities } from '../activities';
import { watchTaskQueue, type RuntimeInstanceRef } from '../api/messages';
import { ERROR_CODES, PERMANENT_SNAPSHOT_ERRORS } from '../domain/error-codes';
import { runtimeLabel, type LivenessOptions, type RuntimeKind } from '../domain/schemas';
import type { PlacementConstraints } from '../domain/placement';
import { neverStarted } from './failures';
import { LEAN_PATCH, PLACEMENT_REQUEST_PATCH, WATCH_QUEUE_PATCH } from './patches';

/** An activity proxy (remote or local): the SDK takes a call's own options through `executeWithOptions`. */
interface WithOptions<A extends unknown[], R> {
  executeWithOptions(options: { summary?: string }, args: A): Promise<R>;
}

/**
 * Calls `activity` with the one-line summary the Web UI shows on its events (`capture 000003 (pause)`). A summary is
 * user metadata beside the command, not part of it: histories recorded without summaries replay unchanged.
 * (`executeWithOptions` is experimental in SDK 1.24; this is its one caller.)
 */
export function summarized<A extends unknown[], R>(
  summary: string,
  activity: WithOptions<A, R>,
  ...args: A
): Promise<R> {
  return activity.executeWithOptions({ summary }, args);
}

/** Transient I/O (store unavailable, disk hiccup) is retried with backoff; typed permanent errors are not. */
const IO_RETRY: ActivityOptions['retry'] = {
  initialInterval: '1s',
  backoffCoefficient: 2,
  maximumInterval: '30s',
  maximumAttempts: 10,
  nonRetryableErrorTypes: [
    ...PERMANENT_SNAPSHOT_ERRORS,
    ERROR_CODES.KeyUnavailable,
    ERROR_CODES.RuntimeFailed,
    ERROR_CODES.RuntimeLost,
    ERROR_CODES.StoreFull,
    ERROR_CODES.SessionAlreadyExists,
  ],
};

/** Store work that any worker can do. */
export const shared = proxyActivities<SessionActivities>({
  startToCloseTimeout: '1 minute',
  retry: IO_RETRY,
});

/** The id claim is one small write to the store, done by the worker running the workflow task. */
export const local = proxyLocalActivities<SessionActivities>({
  startToCloseTimeout: '10 seconds',
  retry: IO_RETRY,
});

/** Verification reads a whole checkpoint on any worker: long, so it heartbeats its progress. */
export const verifier = proxyActivities<SessionActivities>({
  startToCloseTimeout: '2 hours',
  heartbeatTimeout: '1 minute',
  retry: IO_RETRY,
});

/**
 * Placement does no work, so a short timeout: a placement handed to a worker that was shutting down is retried on
 * another within seconds instead of after a minute.
 */
const placement = proxyActivities<SessionActivities>({
  startToCloseTimeout: '10 seconds',
  // A host that is full or draining refuses; the next attempt is soon, and likely lands on another host. With every
  // host refusing, the attempts go on for about two minutes.
  retry: { ...IO_RETRY, initialInterval: '200ms', backoffCoefficient: 1.5, maximumInterval: '5s', maximumAttempts: 30 },
});

/**
 * Activities that touch a runtime instance run on the task queue of the worker host it lives on.
 * scheduleToStartTimeout makes a host that has gone away show up as a failure instead of a wait forever.
 */
export function onHost(hostTaskQueue: string, liveness: LivenessOptions = {}) {
  return proxyActivities<SessionActivities>({
    taskQueue: hostTaskQueue,
    startToCloseTimeout: '2 hours',
    scheduleToStartTimeout: liveness.hostTimeoutMs ?? 60_000,
    // A host that stops beating is gone: what runs there is noticed as soon as the watcher notices it.
    heartbeatTimeout: liveness.heartbeatTimeoutMs ?? 30_000,
    retry: IO_RETRY,
  });
}

/** The activities of one worker host. */
export type HostActivities = ReturnType<typeof onHost>;

/** The watcher's heartbeat timeout is how fast a dead host is noticed. */
export function watcherOn(hostTaskQueue: string, liveness: LivenessOptions = {}) {
  deprecatePatch(WATCH_QUEUE_PATCH);
  return proxyActivities<SessionActivities>({
    taskQueue: watchTaskQueue(hostTaskQueue),
    startToCloseTimeout: '2 hours',
    scheduleToStartTimeout: liveness.hostTimeoutMs ?? 60_000,
    heartbeatTimeout: liveness.heartbeatTimeoutMs ?? 30_000,
    // No retries: a watcher that stops heartbeating means its host is gone or cut off, and recovery handles it.
    retry: { maximumAttempts: 1 },
  });
}

/** A question to a host that does no work: answered within seconds by a live host, or not at all. */
export function askHost(hostTaskQueue: string, liveness: LivenessOptions = {}) {
  return proxyActivities<SessionActivities>({
    taskQueue: hostTaskQueue,
    scheduleToStartTimeout: liveness.hostTimeoutMs ?? 60_000,
    startToCloseTimeout: '10 seconds',
    retry: { maximumAttempts: 1 },
  });
}

/** How many hosts a start or restore is offered to when the chosen one never picks it up. */
const PLACEMENT_ATTEMPTS = 3;

/**
 * Places the session on a live host and runs `work` there. A host that never picks the work up within
 * `hostTimeoutMs` (it went away between placement and the work, or is stalled) did nothing, so the session is
 * placed again, up to PLACEMENT_ATTEMPTS times; any other failure is the work's own and is returned as it is.
 */
export async function onPlacedHost<T>(
  spec: { liveness?: LivenessOptions; placement?: PlacementConstraints; runtime?: { kind: RuntimeKind } },
  purpose: string,
  work: (host: HostActivities) => Promise<T>,
): Promise<T> {
  const avoid: string[] = [];
  const constraints = constraintsOf(spec);
  for (let attempt = 1; ; attempt++) {
    const again = attempt > 1 ? `, attempt ${attempt}: the last host never picked it up` : '';
    const summary = `choose a host to ${purpose}${again}`;
    const { hostTaskQueue } = patched(PLACEMENT_REQUEST_PATCH)
      ? await summarized(summary, placement.placeSession, {
          ...(constraints ? { constraints } : {}),
          ...(avoid.length ? { avoid: [...avoid] } : {}),
        })
      : await summarized(summary, placement.placeSession);
    try {
      return await work(onHost(hostTaskQueue, spec.liveness));
    } catch (err) {
      avoid.push(hostTaskQueue);
      if (attempt >= PLACEMENT_ATTEMPTS || !neverStarted(err)) throw err;
      log.warn('placed host did not pick the work up; placing again', { hostTaskQueue, attempt });
    }
  }
}

/**
 * The session's placement, and the label of the workers that offer its runtime when only some do (`runtime:remote`):
 * a remote session goes only to workers configured with the sandbox hosts.
 */
function constraintsOf(spec: {
  placement?: PlacementConstraints;
  runtime?: { kind: RuntimeKind };
}): PlacementConstraints | undefined {
  const label = spec.runtime && runtimeLabel(spec.runtime.kind);
  if (!label) return spec.placement;
  return { ...spec.placement, workerLabels: [...(spec.placement?.workerLabels ?? []), label] };
}

/** Stops the runtime and frees what it held; `why` (pause, stop, …) is in the summaries the Web UI shows. */
export async function stopAndDispose(host: HostActivities, runtime: RuntimeInstanceRef, why: string): Promise<void> {
  deprecatePatch(LEAN_PATCH);
  await summarized(`stop runtime (${why})`, host.stopRuntime, { instance: runtime, dispose: true });
}
