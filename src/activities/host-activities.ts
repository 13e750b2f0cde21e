/** The activities of the worker host itself: placement, the host's liveness lease, and what it says of itself. */
import { setTimeout as delay } from 'node:timers/promises';
import { ApplicationFailure, Context, log } from '@temporalio/activity';
import { WorkflowNotFoundError } from '@temporalio/client';
import { ApplicationFailureCategory } from '@temporalio/common';
import { ERROR_CODES } from '../domain/error-codes';
import { type PlacementRequest, satisfies } from '../domain/placement';
import { runtimeReportSignal } from '../api/messages';
import type { HostLeaseInput, HostLeaseResult, TellSessionsInput, TellSessionsResult } from './activity-inputs';
import { HostRefusedError } from './host-state';
import {
  type ActivityContext,
  MAX_HEARTBEAT_MS,
  MAX_RELEASED_PER_ROUND,
  DEFAULT_MAX_SESSIONS,
  heartbeatEvery,
  toFailure,
} from './activity-context';

/** Signals one tellSessions sends at a time. */
const TELL_CONCURRENCY = 20;

export function hostActivities(ctx: ActivityContext) {
  const { deps, host } = ctx;
  return {
    /**
     * Runs on the shared queue and asks the fleet directory for the least-loaded live host that satisfies the
     * session's placement. Without a directory (none reported yet), the worker that picked this up takes the session.
     */
    async placeSession(request: PlacementRequest = {}): Promise<{ hostTaskQueue: string }> {
      const queue = deps.hostTaskQueue;
      if (host.draining) {
        // A worker on its way out asks nothing of the directory (its shutdown would cancel the question): it hands the
        // placement back to another worker, with one line in the log and no warning with a stack for every attempt.
        const refusal = `worker host ${queue} is draining: it takes no new sessions`;
        if (host.firstRefusal()) log.info(`${refusal}: placements go to other workers`);
        throw ApplicationFailure.create({
          type: 'HostRefused',
          message: refusal,
          category: ApplicationFailureCategory.BENIGN,
        });
      }
      const decision = await deps.placement?.place(request, Context.current().cancellationSignal);
      if (decision?.ok) return { hostTaskQueue: decision.hostTaskQueue };
      if (decision?.reason === 'unsatisfiable') {
        throw ApplicationFailure.create({
          type: ERROR_CODES.NoEligibleHost,
          message: decision.message,
          nonRetryable: true,
        });
      }
      if (decision?.reason === 'busy') {
        throw ApplicationFailure.create({
          type: 'HostRefused',
          message: decision.message,
          category: ApplicationFailureCategory.BENIGN,
        });
      }
      const self = { hostTaskQueue: queue, workerId: queue.slice(queue.lastIndexOf('@') + 1) };
      if (!satisfies({ ...self, labels: deps.workerLabels ?? [] }, request.constraints)) {
        throw toFailure(new HostRefusedError(`worker host ${queue} does not satisfy the placement`, queue));
      }
      const limit = deps.maxSessions ?? DEFAULT_MAX_SESSIONS;
      if (host.sessionCount >= limit) {
        throw toFailure(
          new HostRefusedError(`worker host ${queue} runs ${limit} sessions, its limit: placing elsewhere`, queue),
        );
      }
      return { hostTaskQueue: deps.hostTaskQueue };
    },

    /**
     * The host's one liveness lease, held by its monitor workflow: it heartbeats for the whole host while it waits for
     * an instance to end, and returns what the monitor must pass on — exits nobody asked for, and `instances` (the
     * ones the monitor watches) that this incarnation of the host does not know, because a worker before it died.
     * Exits the sessions asked for are returned as `released`, in batches, as the round ends.
     */
    async holdHostLease(input: HostLeaseInput): Promise<HostLeaseResult> {
      const ctx = Context.current();
      const heartbeatMs = Math.min(deps.watchHeartbeatMs ?? MAX_HEARTBEAT_MS, heartbeatEvery(ctx));
      const roundEnds = Date.now() + (deps.leaseRoundMs ?? 10 * 60_000);
      const heartbeatTimeoutMs = ctx.info.heartbeatTimeoutMs ?? MAX_HEARTBEAT_MS;
      const lease = {
        taskToken: ctx.info.taskToken,
        instances: new Set(input.instances),
        heartbeatTimeoutMs,
        hostTimeoutMs: input.hostTimeoutMs ?? heartbeatTimeoutMs,
      };
      deps.fence?.leaseStarted(lease);
      let returned = false;
      try {
        const result = await leaseRounds();
        returned = true;
        return result;
      } finally {
        deps.fence?.leaseEnded(lease, returned);
      }

      async function leaseRounds(): Promise<HostLeaseResult> {
        for (;;) {
          // Asked each time: an instance on a host of its own can go missing while this worker runs.
          const missing = input.instances.filter((id) => !host.knows(id));
          const exits = host.exitsAfter(input.after);
          const news = exits.filter((e) => !e.bySession);
          if (
            missing.length > 0 ||
            news.length > 0 ||
            exits.length >= MAX_RELEASED_PER_ROUND ||
            Date.now() >= roundEnds
          ) {
            const quiet = missing.length === 0 && news.length === 0;
            return {
              cursor: host.cursor,
              exits: news.map(({ instanceId, exit }) => ({ instanceId, exit })),
              released: exits.filter((e) => e.bySession).map((e) => e.instanceId),
              missing,
              ...(quiet && deps.leaseRestMs ? { restMs: deps.leaseRestMs } : {}),
            };
          }
          ctx.heartbeat();
          void deps.fence?.beat(lease);
          const wake = AbortSignal.any([ctx.cancellationSignal, AbortSignal.timeout(heartbeatMs)]);
          await host.nextExit(wake);
          // An exit seldom comes alone (a shutdown, a crashed process group): let its companions join the report.
          if (!wake.aborted) await delay(50);
          if (ctx.cancellationSignal.aborted) throw ctx.cancellationSignal.reason;
        }
      }
    },

    /**
     * Signals each session its report, from the worker's client rather than from the monitor workflow: the monitor's
     * history then holds one activity per batch, not two events and a pending signal per session. A retry resumes
     * after the reports the last heartbeat counted; one told twice ignores the second (a report about an instance
     * that is no longer its current one changes nothing).
     */
    async tellSessions({ reports }: TellSessionsInput): Promise<TellSessionsResult> {
      const ctx = Context.current();
      const client = deps.client;
      // Retried, and so taken by another worker: every worker createWorkers makes has one.
      if (!client) throw new Error(`worker host ${deps.hostTaskQueue} has no client to tell sessions with`);
      const resumed = ctx.info.heartbeatDetails as Partial<TellSessionsResult> | undefined;
      let told = resumed?.told ?? 0;
      let gone = resumed?.gone ?? 0;
      for (let i = told + gone; i < reports.length; i += TELL_CONCURRENCY) {
        if (ctx.cancellationSignal.aborted) throw ctx.cancellationSignal.reason;
        const sent = await Promise.all(
          reports.slice(i, i + TELL_CONCURRENCY).map(({ sessionWorkflowId, report }) =>
            client.workflow
              .getHandle(sessionWorkflowId)
              .signal(runtimeReportSignal, report)
              .then(
                () => true,
                (err: unknown) => {
                  if (err instanceof WorkflowNotFoundError) return false;
                  throw err;
                },
              ),
          ),
        );
        const signalled = sent.filter(Boolean).length;
        told += signalled;
        gone += sent.length - signalled;
        ctx.heartbeat({ told, gone });
      }
      return { told, gone };
    },

    /** Answered at once by whichever worker picks it up: whether the fleet takes any work at all (the monitor's control). */
    async askAnyWorker(): Promise<{ hostTaskQueue: string }> {
      return { hostTaskQueue: deps.hostTaskQueue };
    },

    /** Answered at once by a live host: its incarnation (a new one means a worker restarted here). */
    async describeHost(): Promise<{ incarnation: string; sessions: number }> {
      return { incarnation: host.incarnation, sessions: host.sessionCount };
    },
  };
}
