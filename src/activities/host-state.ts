import { randomUUID } from 'node:crypto';
import { DurableSessionsError } from '../errors';
import { type ExitInfo, RuntimeNotFoundError } from '../runtimes';

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
  private readonly hosted = new Map<string, string>();
  private readonly watched = new Set<string>();
  private readonly stopsBySession = new Set<string>();
  /** Instances whose command ended by itself: their sessions completed or failed, and have nothing here to drain. */
  private readonly endedBySelf = new Set<string>();
  /** The placements refused while draining, logged once. */
  private refusalsLogged = false;
  private exits: HostExit[] = [];
  /** The instances among `exits`, so that `knows` costs the same however many instances the monitor asks about. */
  private readonly exitIds = new Map<string, number>();
  /**
   * `sessions()` as last computed, until the hosted instances change: the fleet report asks for it every 200 ms, and
   * a host with ten thousand sessions must not rebuild that list while nothing happens.
   */
  private sessionList: string[] | undefined;
  private nextSeq = 1;
  private readonly waiters = new Set<() => void>();
  private inFlight = 0;
  /** Starts and restores begun by this incarnation: the fleet directory matches them to its placements. */
  private begunCount = 0;
  private drainingSince: number | undefined;

  /** An instance of `sessionId` now runs here; `exited` settles when it ends. */
  hosting(instanceId: string, sessionId: string, exited?: Promise<ExitInfo>): void {
    this.hosted.set(instanceId, sessionId);
    this.sessionList = undefined;
    if (!exited || this.watched.has(instanceId)) return;
    this.watched.add(instanceId);
    exited.then(
      (exit) => this.ended(instanceId, sessionId, exit),
      (error: unknown) => {
        this.watched.delete(instanceId);
        // Unknown to the runtime while the session still counts on it: an instance on a host of its own that the host
        // lost (or that could not be reached for too long). The monitor reports it missing, and so lost. Otherwise it
        // was disposed before it was watched: nothing ran, so nothing ended.
        if (error instanceof RuntimeNotFoundError && this.hosted.get(instanceId) === sessionId) {
          if (this.stopsBySession.has(instanceId)) return;
          this.hosted.delete(instanceId);
          this.sessionList = undefined;
          for (const wake of [...this.waiters]) wake();
        }
      },
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
    this.sessionList = undefined;
  }

  /**
   * Sessions with a running instance on this host, each once. One whose command ended by itself is not among them:
   * its session has ended, and a drain has nothing to move.
   */
  sessions(): string[] {
    if (!this.sessionList) {
      const running = [...this.hosted].filter(([instanceId]) => !this.endedBySelf.has(instanceId));
      this.sessionList = [...new Set(running.map(([, sessionId]) => sessionId))];
    }
    return [...this.sessionList];
  }

  /** How many sessions `sessions()` lists, without copying the list. */
  get sessionCount(): number {
    if (!this.sessionList) this.sessions();
    return this.sessionList!.length;
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
    return this.hosted.has(instanceId) || this.exitIds.has(instanceId);
  }

  /** Exits after `cursor`; those up to it are acknowledged and forgotten. */
  exitsAfter(cursor: ExitCursor | undefined): HostExit[] {
    const after = cursor?.incarnation === this.incarnation ? cursor.seq : 0;
    if (this.exits.length > 0 && this.exits[0]!.seq <= after) this.forget(this.exits.findIndex((e) => e.seq > after));
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
    if (!bySession && !exit.requested && this.hosted.has(instanceId)) {
      this.endedBySelf.add(instanceId);
      this.sessionList = undefined;
    }
    this.exits.push({ seq: this.nextSeq++, instanceId, sessionId, exit, bySession });
    this.exitIds.set(instanceId, (this.exitIds.get(instanceId) ?? 0) + 1);
    // Nobody acknowledges while no session is attached to the monitor: keep memory bounded meanwhile.
    if (this.exits.length > MAX_UNACKNOWLEDGED_EXITS) this.forget(this.exits.length - MAX_UNACKNOWLEDGED_EXITS);
    for (const wake of [...this.waiters]) wake();
  }

  /** Drops the oldest `count` exits (all of them for -1: `findIndex` found none to keep). */
  private forget(count: number): void {
    const dropped = count < 0 ? this.exits.splice(0) : this.exits.splice(0, count);
    for (const { instanceId } of dropped) {
      const left = this.exitIds.get(instanceId)! - 1;
      if (left > 0) this.exitIds.set(instanceId, left);
      else this.exitIds.delete(instanceId);
    }
  }
}
