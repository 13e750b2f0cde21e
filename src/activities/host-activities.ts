/** The activities of the worker host itself: placement, the host's liveness lease, and what it says of itself. */
import { setTimeout as delay } from 'node:timers/promises';
import { ApplicationFailure, Context, log } from '@temporalio/activity';
import { ApplicationFailureCategory } from '@temporalio/common';
import { ERROR_CODES } from '../domain/error-codes';
import { type PlacementRequest, satisfies } from '../domain/placement';
import type { HostLeaseInput, HostLeaseResult } from './activity-inputs';
import { HostRefusedError } from './host-state';
import {
  type ActivityContext,
  MAX_HEARTBEAT_MS,
  MAX_RELEASED_PER_ROUND,
  DEFAULT_MAX_SESSIONS,
  heartbeatEvery,
  toFailure,
} from './activity-context';

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

    /** Answered at once by a live host: its incarnation (a new one means a worker restarted here). */
    async describeHost(): Promise<{ incarnation: string; sessions: number }> {
      return { incarnation: host.incarnation, sessions: host.sessionCount };
    },
  };
}
