import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import { fleetTaskQueue, fleetWorkflowId, hostLoadSignal, placeUpdate } from '../api/fleet';
import type { HostLoadReport, PlacementDecision, PlacementRequest } from '../domain/placement';
import { messageOf } from '../errors';
import type { HostState } from './host-state';

/** How often a host reports its load when it does not change; a change is reported within CHANGE_POLL_MS. */
export const DEFAULT_REPORT_EVERY_MS = 5_000;
const CHANGE_POLL_MS = 200;
/** Below placeSession's start-to-close timeout (10 s): the activity fails by itself and is retried. */
const PLACE_TIMEOUT_MS = 8_000;

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
   * The directory's decision, or undefined when there is no directory to ask (the caller then places here). The
   * update waits for a worker to run the directory: it gives up at `signal` (this worker shutting down, which
   * would otherwise wait for it) or after PLACE_TIMEOUT_MS, and the placement is retried.
   */
  async place(request: PlacementRequest, signal?: AbortSignal): Promise<PlacementDecision | undefined> {
    const { client } = this.options;
    const handle = client.workflow.getHandle(fleetWorkflowId(this.options.taskQueue));
    const ask = () => handle.executeUpdate(placeUpdate, { args: [request] });
    try {
      return await client.withDeadline(Date.now() + PLACE_TIMEOUT_MS, () =>
        signal ? client.withAbortSignal(signal, ask) : ask(),
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
