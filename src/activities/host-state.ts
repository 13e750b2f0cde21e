import { randomUUID } from 'node:crypto';
import { DurableSessionsError } from '../errors';
import type { ExitInfo } from '../runtimes';

/** An instance of this host that ended, numbered in the order this incarnation of the host saw it. */
export interface HostExit {
  seq: number;
  instanceId: string;
  sessionId: string;
  exit: ExitInfo;
  /** Its session asked for the stop (pause, stop, drain): the session knows, and nobody needs to be told. */
  bySession: boolean;
}

const MAX_UNACKNOWLEDGED_EXITS = 10_000;

/**
 * Thrown when this worker host takes no new session: it is draining, or runs its limit of sessions. Retryable: the
 * retry waits for another worker, or for the next one to start once this one is gone.
 */
export class HostRefusedError extends DurableSessionsError {
  readonly code = 'HostRefused';
  override readonly retryable = true;
  constructor(
    message: string,
    readonly hostTaskQueue: string,
  ) {
    super(message);
  }
}

/** Exits are acknowledged by position: a position of another incarnation of the host acknowledges nothing here. */
export interface ExitCursor {
  incarnation: string;
  seq: number;
}

/**
 * What this worker host knows of itself: the sessions whose runtime instances it runs (so that a shutdown can drain
 * them and placement can skip a full host), whether it is draining (so that it takes no new sessions meanwhile), and
 * how its instances ended, kept until the host's monitor has acknowledged them.
 */
export class HostState {
  /** Differs for every process: a worker restarted on the same host is a new incarnation of it. */
  readonly incarnation = randomUUID();
  /** Stops this host's instances when it cannot renew its lease (none: nothing here to fence). */
  readonly fence: HostFence | undefined;
  private readonly hosted = new Map<string, string>();
  private readonly watched = new Set<string>();
  private readonly stopsBySession = new Set<string>();
  /** Instances whose command ended by itself: their sessions completed or failed, and have nothing here to drain. */
  private readonly endedBySelf = new Set<string>();
  /** The placements refused while draining, logged once. */
  private refusalsLogged = false;
  private exits: HostExit[] = [];
  private nextSeq = 1;
  private readonly waiters = new Set<() => void>();
  private inFlight = 0;
  /** Starts and restores begun by this incarnation: the fleet directory matches them to its placements. */
  private begunCount = 0;
  private drainingSince: number | undefined;

  constructor(options: { fence?: HostFence } = {}) {
    this.fence = options.fence;
  }

  /** An instance of `sessionId` now runs here; `exited` settles when it ends. */
  hosting(instanceId: string, sessionId: string, exited?: Promise<ExitInfo>): void {
    this.hosted.set(instanceId, sessionId);
    if (!exited || this.watched.has(instanceId)) return;
    this.watched.add(instanceId);
    exited.then(
      (exit) => this.ended(instanceId, sessionId, exit),
      // Unknown to the runtime (disposed before it was watched): nothing ran, so nothing ended.
      () => this.watched.delete(instanceId),
    );
  }

  /** The session is stopping its instance itself: the exit that follows is not news to it. */
  stopRequested(instanceId: string): void {
    this.stopsBySession.add(instanceId);
  }

  /** The instance is gone from this host (disposed, or never made). */
  released(instanceId: string): void {
    this.hosted.delete(instanceId);
    this.endedBySelf.delete(instanceId);
  }

  /**
   * Sessions with a running instance on this host, each once. One whose command ended by itself is not among them:
   * its session has ended, and a drain has nothing to move.
   */
  sessions(): string[] {
    const running = [...this.hosted].filter(([instanceId]) => !this.endedBySelf.has(instanceId));
    return [...new Set(running.map(([, sessionId]) => sessionId))];
  }

  /**
   * Whether this refusal of a placement while draining is the first: the draining host refuses every placement until
   * it goes, which is expected and worth one line in the log, not one per attempt.
   */
  firstRefusal(): boolean {
    const first = !this.refusalsLogged;
    this.refusalsLogged = true;
    return first;
  }

  /** Whether this incarnation runs the instance, or saw it end and has not had that acknowledged. */
  knows(instanceId: string): boolean {
    return this.hosted.has(instanceId) || this.exits.some((e) => e.instanceId === instanceId);
  }

  /** Exits after `cursor`; those up to it are acknowledged and forgotten. */
  exitsAfter(cursor: ExitCursor | undefined): HostExit[] {
    const after = cursor?.incarnation === this.incarnation ? cursor.seq : 0;
    this.exits = this.exits.filter((e) => e.seq > after);
    return [...this.exits];
  }

  /** The position of the newest exit. */
  get cursor(): ExitCursor {
    return { incarnation: this.incarnation, seq: this.nextSeq - 1 };
  }

  /** Resolves at the next exit, or when `signal` aborts. */
  nextExit(signal: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        this.waiters.delete(done);
        signal.removeEventListener('abort', done);
        resolve();
      };
      this.waiters.add(done);
      signal.addEventListener('abort', done);
    });
  }

  /** Runs `make` (a start or restore of an instance here), counted until it settles. */
  async making<T>(make: () => Promise<T>): Promise<T> {
    this.inFlight++;
    this.begunCount++;
    try {
      return await make();
    } finally {
      this.inFlight--;
    }
  }

  /** Starts and restores this incarnation has begun. */
  get begun(): number {
    return this.begunCount;
  }

  /** Starts and restores under way on this host. */
  get makingCount(): number {
    return this.inFlight;
  }

  startDraining(): void {
    this.drainingSince ??= Date.now();
  }

  get draining(): boolean {
    return this.drainingSince !== undefined;
  }

  private ended(instanceId: string, sessionId: string, exit: ExitInfo): void {
    this.watched.delete(instanceId);
    const bySession = this.stopsBySession.delete(instanceId);
    // Not by the session, and not by this host's shutdown (which ends every instance and drains first).
    if (!bySession && !exit.requested && this.hosted.has(instanceId)) this.endedBySelf.add(instanceId);
    this.exits.push({ seq: this.nextSeq++, instanceId, sessionId, exit, bySession });
    // Nobody acknowledges while no session is attached to the monitor: keep memory bounded meanwhile.
    if (this.exits.length > MAX_UNACKNOWLEDGED_EXITS)
      this.exits.splice(0, this.exits.length - MAX_UNACKNOWLEDGED_EXITS);
    for (const wake of [...this.waiters]) wake();
  }
}

/** What a host fences: the instances that run as processes of their own on it (the workspace runtime's). */
export interface FenceTarget {
  /** Freezes every running instance not fenced yet; returns their ids. */
  fence(): string[];
  fencedInstances(): string[];
  /** Resumes those of `ids` that are fenced. */
  unfence(ids: Iterable<string>): number;
  /** Kills those of `ids` that are fenced, without resuming them first. */
  killFenced(ids: Iterable<string>): number;
}

export interface HostFenceOptions {
  target: FenceTarget;
  /**
   * Records a heartbeat of the lease (by its task token) and resolves once the server has acknowledged it: unlike the
   * SDK's own heartbeats, which are sent in the background, this says when the server last heard from the host.
   */
  recordHeartbeat: (taskToken: Uint8Array) => Promise<void>;
  log?: (message: string) => void;
  /** How often the deadline is checked (default 100 ms). */
  checkEveryMs?: number;
}

/**
 * Between two leases (one returned, the next not yet acknowledged): the monitor schedules the next lease as it takes
 * the last one's result, and declares the host lost only after that lease was not picked up within the host timeout,
 * and a question to the host was not either: twice the host timeout, which is at least 1 s.
 */
const BETWEEN_LEASES_MS = 1_500;

/** Lease heartbeats recorded at once, at most: a server that does not answer does not pile them up. */
const MAX_RECORDS_IN_FLIGHT = 3;

/**
 * Self-fencing. The host's monitor declares the host lost, and its sessions may be restored on another worker, no
 * sooner than the lease's heartbeat timeout plus the host timeout (≥ 1 s) after the last heartbeat the server recorded
 * (docs/design.md §6). The host counts from the moment it sent the last heartbeat the server acknowledged, which the
 * server recorded no earlier: once the heartbeat timeout has passed from there without another, it freezes its
 * instances (SIGSTOP), so they are stopped before any copy of them can start elsewhere. A lease acknowledged again
 * (the host was only cut off, and its monitor still counts it live) resumes the instances it lists; those it does not
 * list twice in a row are no longer attached to the monitor (their sessions were told the host was lost), and are
 * killed. The stop a recovering session sends its old host also kills a fenced instance at once.
 */
export class HostFence {
  private deadline = Number.POSITIVE_INFINITY;
  private readonly timer: NodeJS.Timeout;
  private recordsInFlight = 0;
  /** Fenced instances a lease did not list, and which lease that was. */
  private readonly unlisted = new Map<string, string>();
  private freshLeaseWanted = false;
  private returnedAt = 0;
  private readonly log: (message: string) => void;

  constructor(private readonly options: HostFenceOptions) {
    this.log = options.log ?? ((message) => console.log(message));
    this.timer = setInterval(() => this.check(), options.checkEveryMs ?? 100);
    this.timer.unref();
  }

  /**
   * A beat of the lease `taskToken`, with `heartbeatTimeoutMs`, that watches `instances`. Never throws: an unanswered
   * record only leaves the deadline where it was.
   */
  beat(lease: { taskToken: Uint8Array; heartbeatTimeoutMs: number; instances: readonly string[] }): void {
    if (this.recordsInFlight >= MAX_RECORDS_IN_FLIGHT) return;
    this.recordsInFlight++;
    const sentAt = Date.now();
    this.options
      .recordHeartbeat(lease.taskToken)
      .then(
        () => this.acknowledged(sentAt, lease),
        (err: unknown) => {
          // Cancelled: the monitor ended the lease itself (a tighter attachment, a restarted worker), so it is live.
          if ((err as { name?: string } | undefined)?.name === 'ActivityCancelledError')
            this.acknowledged(sentAt, lease);
        },
      )
      .finally(() => this.recordsInFlight--);
  }

  /** The lease returns now; the monitor waits `restMs` before the next. */
  leaseReturned(restMs = 0): void {
    this.freshLeaseWanted = false;
    this.returnedAt = Date.now();
    this.deadline = Math.min(this.deadline, Date.now() + restMs + BETWEEN_LEASES_MS);
  }

  /** Fenced instances wait for the monitor's current list: the lease under way should end now. */
  get wantsFreshLease(): boolean {
    return this.freshLeaseWanted;
  }

  /** Whether the host is fenced now. */
  get fenced(): boolean {
    return Date.now() >= this.deadline;
  }

  close(): void {
    clearInterval(this.timer);
  }

  private acknowledged(
    sentAt: number,
    lease: { taskToken: Uint8Array; heartbeatTimeoutMs: number; instances: readonly string[] },
  ): void {
    // A beat of a lease that has returned since says nothing of the next lease, which the monitor now waits on.
    if (sentAt < this.returnedAt) return;
    const deadline = sentAt + lease.heartbeatTimeoutMs;
    this.deadline = this.deadline === Number.POSITIVE_INFINITY ? deadline : Math.max(this.deadline, deadline);
    if (this.fenced) return;
    const fenced = this.options.target.fencedInstances();
    if (fenced.length === 0) return;
    const leaseId = Buffer.from(lease.taskToken).toString('base64');
    const listed = new Set(lease.instances);
    const resumed = this.options.target.unfence(fenced.filter((id) => listed.has(id)));
    const gone: string[] = [];
    for (const id of fenced.filter((i) => !listed.has(i))) {
      const earlier = this.unlisted.get(id);
      if (earlier !== undefined && earlier !== leaseId) gone.push(id);
      else if (earlier === undefined) {
        this.unlisted.set(id, leaseId);
        this.freshLeaseWanted = true;
      }
    }
    for (const id of [...fenced.filter((i) => listed.has(i)), ...gone]) this.unlisted.delete(id);
    const killed = this.options.target.killFenced(gone);
    if (resumed + killed > 0) {
      this.log(
        `host lease renewed: resumed ${resumed} fenced session process group(s)` +
          (killed > 0 ? `, killed ${killed} no longer attached to this host` : ''),
      );
    }
  }

  private check(): void {
    if (!this.fenced) return;
    const fenced = this.options.target.fence();
    if (fenced.length > 0) {
      this.log(
        `host lease not renewed within its heartbeat timeout: froze ${fenced.length} session process group(s) ` +
          `until it is (their sessions may be recovered on another worker)`,
      );
    }
  }
}
