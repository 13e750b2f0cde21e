import {
  type ActivityOptions,
  CancellationScope,
  condition,
  getExternalWorkflowHandle,
  isCancellation,
  log,
  makeContinueAsNewFunc,
  patched,
  proxyActivities,
  setDefaultSignalHandler,
  setHandler,
  workflowInfo,
} from '@temporalio/workflow';
import type { ExitCursor, HostLeaseResult, SessionActivities, TellSessionsInput } from '../activities';
import { continuedFleetTaskQueue, sessionsTaskQueueOf } from '../api/fleet';
import { attachRuntimeSignal, hostStartedSignal, runtimeReportSignal, watchTaskQueue } from '../api/messages';
import { HostAttachment, HostWorkflowInput, type RuntimeReport } from '../domain/records';
import { issueSummary, parse } from './inputs';
import { failureMessage, neverStarted } from './failures';
import {
  LATE_QUESTION_PATCH,
  MONITOR_BOUND_PATCH,
  MONITOR_CONTINUES_PATCH,
  QUESTION_CONTROL_PATCH,
  TELL_BY_ACTIVITY_PATCH,
} from './patches';

/**
 * Without a session's own setting, a host is lost once its lease went 5 s without a heartbeat and the host then did
 * not answer for 5 s more. A live host freezes its instances 5 s after it last heard from the server (HostFence), at
 * least 5 s before then.
 */
export const DEFAULT_MONITOR_HEARTBEAT_TIMEOUT_MS = 5_000;
export const DEFAULT_MONITOR_HOST_TIMEOUT_MS = 5_000;

/**
 * A run continues as new at this many events even before the server suggests it (4,096). A task that misses its
 * sticky worker replays the whole run, and each attachment costs the SDK about half a millisecond of replay on a quiet
 * machine (bench/monitor/run.ts): a run past the suggestion, as one grows when attachments pile up behind a slow task,
 * could not replay within the 10 s task timeout on a loaded host, and then never completes a task again.
 */
export const MONITOR_RUN_EVENTS = 2_000;

/**
 * One per worker host: the host's liveness and its instances' ends, for all of its sessions at once. It holds one
 * lease activity on the host (one heartbeat for the host, not one per session, and no activity slot per session),
 * passes on the exits the lease reports, and, when the lease stops beating and the host does not answer either, tells
 * every attached session its host is lost. A host that is only cut off from Temporal answers once the server is back,
 * and keeps its sessions.
 */
export async function hostWorkflow(raw: HostWorkflowInput): Promise<void> {
  const input = parse(HostWorkflowInput, raw);
  const bounded = patched(MONITOR_BOUND_PATCH);
  const tooLong = () =>
    workflowInfo().continueAsNewSuggested || (bounded && workflowInfo().historyLength >= MONITOR_RUN_EVENTS);
  const attached = new Map<string, HostAttachment>((input.attached ?? []).map((a) => [a.instanceId, a]));
  let cursor: ExitCursor | undefined = input.cursor;
  let lease: CancellationScope | undefined;
  let leaseTimeouts: Timeouts | undefined;
  let restarted = false;

  let resting = false;
  const rest = async (ms: number) => {
    resting = true;
    try {
      await condition(() => !resting || restarted || tooLong(), ms);
    } finally {
      resting = false;
    }
  };

  setHandler(attachRuntimeSignal, (rawAttachment) => {
    const attachment = HostAttachment.safeParse(rawAttachment);
    if (!attachment.success) {
      log.warn('attachRuntime refused', { issues: issueSummary(attachment.error) });
      return;
    }
    attached.set(attachment.data.instanceId, attachment.data);
    resting = false;
    // An attachment comes with every session started here, and a lease is held for a round of minutes: a run that
    // waited for the lease to return would grow by thousands of events past the server's suggestion. The lease is
    // cancelled, and the next run asks for one that lists what this one knew.
    if (lease && tooLong() && patched(MONITOR_CONTINUES_PATCH)) {
      lease.cancel();
      return;
    }
    // A session that wants its host's loss noticed sooner than the lease under way would notice it: lease again. The
    // lease already has the tightest of the others, so only this one's need be looked at (a host may hold thousands).
    if (leaseTimeouts && tighter(timeoutsOf([attachment.data]), leaseTimeouts)) lease?.cancel();
  });
  setHandler(hostStartedSignal, (started) => {
    // Logged, not trusted: whoever can signal may send anything.
    const said = (started as { incarnation?: unknown } | undefined)?.incarnation;
    const incarnation = typeof said === 'string' ? said.slice(0, 100) : 'unknown';
    log.info('worker host started', { hostTaskQueue: input.hostTaskQueue, incarnation, attached: attached.size });
    // The lease under way is held by the dead incarnation: the new one answers at once what it does not know.
    restarted = true;
    lease?.cancel();
  });
  setDefaultSignalHandler((name) => log.warn('unknown signal to a host monitor', { name }));

  while (!tooLong()) {
    await condition(() => attached.size > 0 || tooLong());
    if (attached.size === 0) break;
    restarted = false;
    const timeouts = (leaseTimeouts = timeoutsOf(attached.values()));
    const scope = (lease = new CancellationScope());
    try {
      const result = await scope.run(() =>
        leaseOn(input.hostTaskQueue, timeouts).holdHostLease({
          instances: [...attached.keys()],
          after: cursor,
          hostTimeoutMs: timeouts.hostTimeoutMs,
        }),
      );
      cursor = result.cursor;
      await passOn(result);
      // Old results carry no restMs: their replay schedules no timer. A new attachment or a restart ends the rest.
      if (result.restMs) await rest(result.restMs);
    } catch (err) {
      if (scope.consideredCancelled || restarted) continue;
      if (isCancellation(err)) throw err;
      // Lost contact with the lease. A Temporal outage does that to a live host too: ask before declaring anything.
      if (await answers(input.hostTaskQueue, timeouts)) continue;
      await hostLost(`its worker host ${input.hostTaskQueue} stopped answering: ${failureMessage(err)}`);
    } finally {
      lease = undefined;
      leaseTimeouts = undefined;
    }
  }
  await makeContinueAsNewFunc<typeof hostWorkflow>({ taskQueue: continuedFleetTaskQueue(workflowInfo().taskQueue) })({
    hostTaskQueue: input.hostTaskQueue,
    attached: [...attached.values()],
    cursor,
  });

  async function passOn(result: HostLeaseResult): Promise<void> {
    for (const id of result.released) attached.delete(id);
    const reports: [HostAttachment, RuntimeReport][] = [];
    for (const { instanceId, exit } of result.exits) {
      const a = attached.get(instanceId);
      if (!a) continue;
      attached.delete(instanceId);
      const { exitCode, signal } = exit;
      reports.push([a, { outcome: 'exited', instanceId, exitCode, signal, stoppedByHost: exit.requested }]);
    }
    for (const instanceId of result.missing) {
      const a = attached.get(instanceId);
      if (!a) continue;
      attached.delete(instanceId);
      const reason = `its worker host ${input.hostTaskQueue} no longer has it (the worker restarted, or the instance's own host lost it)`;
      reports.push([a, { outcome: 'lost', instanceId, reason }]);
    }
    await tell(reports);
  }

  async function hostLost(reason: string): Promise<void> {
    const reports = [...attached.values()].map((a): [HostAttachment, RuntimeReport] => [
      a,
      { outcome: 'lost', instanceId: a.instanceId, reason },
    ]);
    attached.clear();
    log.warn('worker host lost', { hostTaskQueue: input.hostTaskQueue, sessions: reports.length, reason });
    await tell(reports);
  }
}

/**
 * The server refuses a workflow task that would leave more signals to other workflows pending than this (its
 * `limit.numPendingSignals.error`, 2,000 by default), and refuses it again at every retry: a monitor that told all
 * its sessions at once would never tell them.
 */
export const PENDING_SIGNALS_LIMIT = 2_000;
/** Reports sent together: half the limit, each batch acknowledged before the next (unpatched); one activity's worth. */
export const TELL_BATCH = PENDING_SIGNALS_LIMIT / 2;

/**
 * Each session gets its report; a session that has ended since needs none. The reports go in batches to `tellSessions`
 * on the sessions' queue, which any worker runs, all batches at once: each batch costs the monitor three events, the
 * signals none, and a worker that dies while telling leaves its batch to another. Retried until told: a report lost
 * is a session that never learns its host is gone.
 */
async function tell(reports: [HostAttachment, RuntimeReport][]): Promise<void> {
  // Nothing to tell asks for no patch: most rounds end with nothing, and their histories stay as they were.
  if (reports.length > 0 && patched(TELL_BY_ACTIVITY_PATCH)) {
    const teller = proxyActivities<SessionActivities>({
      taskQueue: sessionsTaskQueueOf(workflowInfo().taskQueue),
      startToCloseTimeout: '10 minutes',
      heartbeatTimeout: '30 seconds',
      retry: { initialInterval: '1s', backoffCoefficient: 2, maximumInterval: '30s' },
    });
    const batches: TellSessionsInput['reports'][] = [];
    for (let i = 0; i < reports.length; i += TELL_BATCH) {
      batches.push(
        reports.slice(i, i + TELL_BATCH).map(([a, report]) => ({ sessionWorkflowId: a.sessionWorkflowId, report })),
      );
    }
    await Promise.all(batches.map((batch) => teller.tellSessions({ reports: batch })));
    return;
  }
  const signal = ([a, report]: [HostAttachment, RuntimeReport]) =>
    getExternalWorkflowHandle(a.sessionWorkflowId).signal(runtimeReportSignal, report);
  // Up to the limit, all at once, as every release did (and every recorded history has); above it, in batches.
  if (reports.length <= PENDING_SIGNALS_LIMIT) {
    await Promise.allSettled(reports.map(signal));
    return;
  }
  for (let i = 0; i < reports.length; i += TELL_BATCH) {
    await Promise.allSettled(reports.slice(i, i + TELL_BATCH).map(signal));
  }
}

interface Timeouts {
  heartbeatTimeoutMs: number;
  hostTimeoutMs: number;
}

/** The tightest of the attached sessions' liveness options. */
function timeoutsOf(attached: Iterable<HostAttachment>): Timeouts {
  let heartbeatTimeoutMs = DEFAULT_MONITOR_HEARTBEAT_TIMEOUT_MS;
  let hostTimeoutMs = DEFAULT_MONITOR_HOST_TIMEOUT_MS;
  for (const a of attached) {
    heartbeatTimeoutMs = Math.min(heartbeatTimeoutMs, a.heartbeatTimeoutMs ?? DEFAULT_MONITOR_HEARTBEAT_TIMEOUT_MS);
    hostTimeoutMs = Math.min(hostTimeoutMs, a.hostTimeoutMs ?? DEFAULT_MONITOR_HOST_TIMEOUT_MS);
  }
  return { heartbeatTimeoutMs, hostTimeoutMs };
}

function tighter(a: Timeouts, b: Timeouts): boolean {
  return a.heartbeatTimeoutMs < b.heartbeatTimeoutMs || a.hostTimeoutMs < b.hostTimeoutMs;
}

/** The lease runs on the host's liveness queue: a host busy with captures still beats. */
function leaseOn(hostTaskQueue: string, t: Timeouts) {
  return proxyActivities<SessionActivities>({
    taskQueue: watchTaskQueue(hostTaskQueue),
    scheduleToStartTimeout: t.hostTimeoutMs,
    startToCloseTimeout: '2 hours',
    heartbeatTimeout: t.heartbeatTimeoutMs,
    // No retries: a lease that stops beating is a question for the host (`answers`), not something to repeat blindly.
    retry: { maximumAttempts: 1 },
  });
}

/**
 * A question recorded as not picked up more than this after its own timeout was due tells of a server running behind
 * (its timers and its task dispatch late alike), not of a host gone: it is asked again.
 */
export const LATE_QUESTION_SLACK_MS = 10_000;
/** Questions asked in all while each comes back late: a server behind for good still lets a dead host be declared. */
export const MAX_LATE_QUESTIONS = 3;
/**
 * Questions asked in all while no worker picks up a question any of them may answer either: the fleet could not
 * recover the host's sessions meanwhile anyway, but a fleet that never answers still lets a dead host be declared.
 */
export const MAX_BEHIND_QUESTIONS = 12;

/** Whether the host picks up a question that does no work within hostTimeoutMs. */
async function answers(hostTaskQueue: string, t: Timeouts): Promise<boolean> {
  const question: ActivityOptions = {
    scheduleToStartTimeout: t.hostTimeoutMs,
    startToCloseTimeout: '10 seconds',
    retry: { maximumAttempts: 1 },
  };
  const ask = proxyActivities<SessionActivities>({ ...question, taskQueue: watchTaskQueue(hostTaskQueue) });
  const anyWorker = proxyActivities<SessionActivities>({
    ...question,
    taskQueue: sessionsTaskQueueOf(workflowInfo().taskQueue),
  });
  for (let asked = 1; ; asked++) {
    const askedAt = Date.now();
    // The same question at the same time on the sessions' queue, which every worker polls: when nobody picks that up
    // either, the server or the whole fleet is behind (its dispatch can fall behind while its timers keep time:
    // docs/design.md §10), not this host gone.
    const control = patched(QUESTION_CONTROL_PATCH)
      ? anyWorker.askAnyWorker().then(
          () => true,
          (err: unknown) => !neverStarted(err),
        )
      : undefined;
    try {
      await ask.describeHost();
      return true;
    } catch (err) {
      // On a dev server minutes behind, a live host's question was recorded unanswered 3.5 minutes after it was due.
      const unanswered = neverStarted(err);
      const lateBy = Date.now() - askedAt - t.hostTimeoutMs;
      const late = unanswered && lateBy > LATE_QUESTION_SLACK_MS;
      const behind = unanswered && control !== undefined && !(await control);
      const limit = behind ? MAX_BEHIND_QUESTIONS : MAX_LATE_QUESTIONS;
      if (!(late || behind) || asked >= limit || !patched(LATE_QUESTION_PATCH)) return false;
      log.warn('the question to a host was not picked up while the server was behind: asking again', {
        hostTaskQueue,
        lateByMs: lateBy,
        nobodyPickedUpTheControl: behind,
        asked,
      });
    }
  }
}
