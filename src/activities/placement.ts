import { WorkflowNotFoundError, WorkflowUpdateFailedError, type Client } from '@temporalio/client';
import { fleetTaskQueue, fleetWorkflowId, hostLoadSignal, placeManyUpdate, placeUpdate } from '../api/fleet';
import {
  MAX_PLACEMENT_BATCH,
  type HostLoadReport,
  type PlacementDecision,
  type PlacementRequest,
} from '../domain/placement';
import { messageOf, toError } from '../errors';
import type { HostState } from './host-state';

/** How often a host reports its load when it does not change; a change is reported within CHANGE_POLL_MS. */
export const DEFAULT_REPORT_EVERY_MS = 5_000;
const CHANGE_POLL_MS = 200;
/** Below placeSession's start-to-close timeout (10 s): the activity fails by itself and is retried. */
const PLACE_TIMEOUT_MS = 8_000;
/** How long a worker asks a directory without `placeMany` one placement at a time before it tries a batch again. */
const OLD_DIRECTORY_RECHECK_MS = 60_000;

export interface FleetMemberOptions {
  client: Client;
  /** The shared task queue: the directory runs there, one per queue. */
  taskQueue: string;
  hostTaskQueue: string;
  /** The worker id a placement may name; the part of the host task queue after its last `@` when omitted. */
  workerId?: string;
  labels?: string[];
  capacity: number;
  host: HostState;
  everyMs?: number;
}

interface PlacementWaiter {
  request: PlacementRequest;
  settle(outcome: { ok: true; decision: PlacementDecision | undefined } | { ok: false; error: unknown }): void;
}

/**
 * This worker host's membership in the fleet directory (`fleetWorkflow`): it reports the host's load there, and asks
 * the directory where a session goes. Workers share nothing but Temporal, so the directory is a workflow: one
 * writer that sees every report and every placement in one order.
 */
export class FleetMember {
  private readonly everyMs: number;
  private timer: NodeJS.Timeout | undefined;
  private sending: Promise<void> | undefined;
  private lastSent = '';
  private lastSentAt = 0;
  private stopped = false;
  /** Placements asked for while an update to the directory is under way. */
  private readonly waiting: PlacementWaiter[] = [];
  private placing = false;
  /** Until when the directory is taken for one of an earlier release (no `placeMany`): a rolling upgrade ends. */
  private oneByOneUntil = 0;

  constructor(private readonly options: FleetMemberOptions) {
    this.everyMs = options.everyMs ?? DEFAULT_REPORT_EVERY_MS;
  }

  /** Reports at once (starting the directory if it is not running), then whenever the load changes. */
  async start(): Promise<void> {
    await this.send(this.report());
    this.timer = setInterval(() => this.tick(), CHANGE_POLL_MS);
    this.timer.unref();
  }

  /** Reports now, after any report under way: for a change that must be known before what follows it (a drain). */
  async publish(): Promise<void> {
    await this.sending?.catch(() => undefined);
    await this.send(this.report());
  }

  /** Tells the directory this host is gone, so that it is offered nothing more; best effort. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    await this.sending?.catch(() => undefined);
    await this.send({ ...this.report(), gone: true }).catch(() => undefined);
  }

  /**
   * The directory's decision, or undefined when there is no directory to ask (the caller then places here).
   *
   * One update to the directory is in flight from this worker at a time: the placements asked for meanwhile wait, and
   * go together in the next one (`placeMany`). A workflow answers a few updates in flight quickly and many of them
   * hardly at all (bench/README.md, Fleet directory). The update waits for a worker to run the directory; it gives up
   * after PLACE_TIMEOUT_MS and the placements are retried. A caller that gives up sooner (`signal`: this worker
   * shutting down) is answered at once; a decision made for it later lapses as any reservation does.
   */
  place(request: PlacementRequest, signal?: AbortSignal): Promise<PlacementDecision | undefined> {
    return new Promise((resolve, reject) => {
      if (signal?.aborted) return reject(toError(signal.reason));
      // A caller that gave up may already be in a batch under way: its answer, when it comes, is for no one.
      let settled = false;
      const finish = (done: () => void) => {
        if (settled) return;
        settled = true;
        signal?.removeEventListener('abort', onAbort);
        done();
      };
      const onAbort = () => {
        const at = this.waiting.indexOf(waiter);
        if (at >= 0) this.waiting.splice(at, 1);
        finish(() => reject(toError(signal!.reason)));
      };
      const waiter: PlacementWaiter = {
        request,
        settle: (outcome) => finish(() => (outcome.ok ? resolve(outcome.decision) : reject(toError(outcome.error)))),
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      this.waiting.push(waiter);
      void this.sendPlacements();
    });
  }

  private async sendPlacements(): Promise<void> {
    if (this.placing) return;
    this.placing = true;
    try {
      while (this.waiting.length > 0) {
        const batch = this.waiting.splice(0, MAX_PLACEMENT_BATCH);
        try {
          const decisions = await this.ask(batch.map((w) => w.request));
          batch.forEach((w, i) => w.settle({ ok: true, decision: decisions?.[i] }));
        } catch (error) {
          for (const w of batch) w.settle({ ok: false, error });
        }
      }
    } finally {
      this.placing = false;
    }
  }

  /** One update for the batch; `place` for each when the directory predates `placeMany` (a rolling upgrade). */
  private async ask(requests: PlacementRequest[]): Promise<(PlacementDecision | undefined)[] | undefined> {
    const { client } = this.options;
    const handle = client.workflow.getHandle(fleetWorkflowId(this.options.taskQueue));
    const within = <T>(fn: () => Promise<T>) => client.withDeadline(Date.now() + PLACE_TIMEOUT_MS, fn);
    try {
      if (Date.now() >= this.oneByOneUntil) {
        try {
          return await within(() => handle.executeUpdate(placeManyUpdate, { args: [{ requests }] }));
        } catch (err) {
          if (!(err instanceof WorkflowUpdateFailedError && /No registered handler/.test(messageOf(err.cause))))
            throw err;
          this.oneByOneUntil = Date.now() + OLD_DIRECTORY_RECHECK_MS;
        }
      }
      return await Promise.all(
        requests.map((request) => within(() => handle.executeUpdate(placeUpdate, { args: [request] }))),
      );
    } catch (err) {
      if (err instanceof WorkflowNotFoundError) return undefined;
      throw err;
    }
  }

  report(): HostLoadReport {
    const { host, hostTaskQueue } = this.options;
    return {
      hostTaskQueue,
      workerId: this.options.workerId ?? hostTaskQueue.slice(hostTaskQueue.lastIndexOf('@') + 1),
      incarnation: host.incarnation,
      labels: this.options.labels ?? [],
      running: host.sessions().length + host.makingCount,
      capacity: this.options.capacity,
      draining: host.draining,
      begun: host.begun,
      everyMs: this.everyMs,
    };
  }

  private tick(): void {
    if (this.stopped || this.sending) return;
    const report = this.report();
    const changed = key(report) !== this.lastSent;
    if (!changed && Date.now() - this.lastSentAt < this.everyMs) return;
    this.sending = this.send(report)
      .catch((err: unknown) => console.warn(`fleet directory: could not report this host's load: ${messageOf(err)}`))
      .finally(() => (this.sending = undefined));
  }

  private async send(report: HostLoadReport): Promise<void> {
    await this.options.client.workflow.signalWithStart('fleetWorkflow', {
      workflowId: fleetWorkflowId(this.options.taskQueue),
      taskQueue: fleetTaskQueue(this.options.taskQueue),
      args: [{}],
      signal: hostLoadSignal,
      signalArgs: [report],
      staticSummary: `fleet directory of ${this.options.taskQueue}`,
    });
    this.lastSent = key(report);
    this.lastSentAt = Date.now();
  }
}

function key(r: HostLoadReport): string {
  return `${r.running}|${r.draining}|${r.begun}`;
}
