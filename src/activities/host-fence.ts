import { ActivityCancelledError, ActivityNotFoundError, ActivityResetError } from '@temporalio/client';
import type { FenceTarget, RuntimeRegistry } from '../runtimes';

/**
 * What a fence freezes, resumes and kills: the instances of every runtime of the registry that offers a fence target
 * (those whose instances are processes on this host: workspace). Instance ids are unique across runtimes.
 */
export function fenceTargetOf(runtimes: RuntimeRegistry): FenceTarget {
  const targets = Object.values(runtimes).flatMap((r) => (r?.fenceTarget ? [r.fenceTarget] : []));
  if (targets.length === 1) return targets[0]!;
  return {
    runningInstances: () => targets.flatMap((t) => t.runningInstances()),
    fence: (ids) => {
      const list = [...ids];
      return targets.flatMap((t) => t.fence(list));
    },
    fencedInstances: () => targets.flatMap((t) => t.fencedInstances()),
    unfence: (ids) => {
      const list = [...ids];
      return targets.reduce((n, t) => n + t.unfence(list), 0);
    },
    killFenced: (ids) => {
      const list = [...ids];
      return targets.reduce((n, t) => n + t.killFenced(list), 0);
    },
  };
}

/** The lease the host's monitor holds on this host (`holdHostLease`), as the fence sees it. */
export interface FenceLease {
  taskToken: Uint8Array;
  /** The instances the monitor watched when it asked for this lease. */
  instances: ReadonlySet<string>;
  /** The monitor declares the host lost no sooner than heartbeatTimeoutMs + hostTimeoutMs after its last beat. */
  heartbeatTimeoutMs: number;
  hostTimeoutMs: number;
}

export interface HostFenceOptions {
  target: FenceTarget;
  /** Records a heartbeat of the lease and resolves once the server has acknowledged it; rejects otherwise. */
  recordHeartbeat(taskToken: Uint8Array): Promise<void>;
  /** Any call the server answers: whether it can be reached again. */
  probe(): Promise<void>;
  /** A fenced instance that no lease takes back this long after the server answers again is killed. */
  orphanAfterMs?: number;
  log?(message: string): void;
}

/** Without a lease yet, the bound of the monitor's defaults (host-workflow.ts): min(heartbeat 5 s, host 5 s). */
export const DEFAULT_FENCE_BOUND_MS = 5_000;
const DEFAULT_ORPHAN_AFTER_MS = 30_000;
const TICK_MS = 200;

/**
 * Self-fencing (docs/design.md §6). The host's monitor may declare this host lost, and skip stopping the instances its
 * lease listed, no sooner than the lease's heartbeatTimeoutMs + hostTimeoutMs after the last beat the server recorded
 * (or 2 × hostTimeoutMs after the lease was asked for, if it never started), and only if the host did not answer it.
 * So an instance with no contact for min(heartbeatTimeoutMs, hostTimeoutMs) since it started — no answer to the probe
 * sent every quarter of that, no lease started, no lease beat acknowledged — is frozen first, at least hostTimeoutMs
 * before any recovery. Frozen rather than killed: a host only cut off from Temporal for a while loses no work. What
 * lifts the fence:
 * - an acknowledged beat of a lease that lists the instance: the monitor still holds it, so it resumes;
 * - one that does not list it, while an earlier lease did or a lease died (timed out, cancelled) while it was frozen:
 *   the monitor may have let it go and its session may run elsewhere, so it is killed;
 * - one that does not list it otherwise: it was attached after that lease began, and the lease being alive means the
 *   monitor has declared nothing, so it resumes;
 * - no lease taking it back within orphanAfterMs of the server answering again: it is killed.
 */
export class HostFence {
  private readonly target: FenceTarget;
  private readonly options: HostFenceOptions;
  private lastContact = -Infinity;
  private boundMs = DEFAULT_FENCE_BOUND_MS;
  private lease: FenceLease | undefined;
  /** Instances some lease of this incarnation listed. */
  private readonly listed = new Set<string>();
  /** Fenced instances that were frozen when a lease died: only a lease that lists them may resume them. */
  private readonly condemned = new Set<string>();
  private answeredAt: number | undefined;
  private probing = false;
  private probedAt = -Infinity;
  private timer: NodeJS.Timeout | undefined;

  constructor(options: HostFenceOptions) {
    this.options = options;
    this.target = options.target;
  }

  /** Monotonic milliseconds: a wall clock set back must not lift a fence. */
  private now(): number {
    return performance.now();
  }

  start(): void {
    this.timer ??= setInterval(() => this.tick(), TICK_MS);
    this.timer.unref();
  }

  close(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }

  /** The monitor's lease started here: the server has just heard from this host. */
  leaseStarted(lease: FenceLease): void {
    this.lease = lease;
    this.boundMs = Math.min(lease.heartbeatTimeoutMs, lease.hostTimeoutMs);
    this.contact(this.now(), lease);
    this.forgetEnded();
    for (const id of lease.instances) this.listed.add(id);
  }

  /**
   * The lease returned (`returned`), or died: timed out or cancelled, its monitor may be giving the host up. Until the
   * next one, the bound runs from the last contact.
   */
  leaseEnded(lease: FenceLease, returned: boolean): void {
    if (this.lease?.taskToken === lease.taskToken) this.lease = undefined;
    if (!returned) for (const id of this.target.fencedInstances()) this.condemned.add(id);
  }

  /** Records a beat of the lease through a call the server answers; an acknowledged one counts from when it was sent. */
  async beat(lease: FenceLease): Promise<void> {
    const sentAt = this.now();
    try {
      await this.options.recordHeartbeat(lease.taskToken);
    } catch (err) {
      // Not acknowledged: it proves nothing. A lease the server no longer runs has died, though.
      const over = [ActivityNotFoundError, ActivityCancelledError, ActivityResetError].some((e) => err instanceof e);
      if (over) this.leaseEnded(lease, false);
      return;
    }
    const current = this.lease;
    if (current?.taskToken === lease.taskToken) this.contact(sentAt, current);
  }

  /** Checks the bound: freezes what ran too long without contact, kills what no lease took back. */
  tick(): void {
    const now = this.now();
    if (now - this.probedAt >= this.boundMs / 4) this.probeServer();
    const due = this.target
      .runningInstances()
      .filter((i) => now - Math.max(this.lastContact, i.startedAtMs - performance.timeOrigin) > this.boundMs)
      .map((i) => i.instanceId);
    const fenced = this.target.fence(due);
    if (fenced.length > 0) {
      this.log(`froze ${fenced.length} session process group(s): no lease contact for ${this.boundMs} ms`);
    }
    const held = this.target.fencedInstances();
    if (held.length === 0) {
      this.condemned.clear();
      this.answeredAt = undefined;
      return;
    }
    if (
      this.answeredAt !== undefined &&
      now - this.answeredAt > (this.options.orphanAfterMs ?? DEFAULT_ORPHAN_AFTER_MS)
    ) {
      const killed = this.target.killFenced(held);
      if (killed > 0) this.log(`killed ${killed} fenced session process group(s): no lease took them back`);
    }
  }

  private contact(at: number, lease: FenceLease): void {
    this.lastContact = Math.max(this.lastContact, at);
    const held = this.target.fencedInstances();
    if (held.length === 0) return;
    this.answeredAt ??= this.now();
    const resume: string[] = [];
    const kill: string[] = [];
    for (const id of held) {
      if (lease.instances.has(id)) resume.push(id);
      else if (this.condemned.has(id) || this.listed.has(id)) kill.push(id);
      else resume.push(id);
    }
    for (const id of held) this.condemned.delete(id);
    const resumed = this.target.unfence(resume);
    const killed = this.target.killFenced(kill);
    if (resumed > 0) this.log(`resumed ${resumed} fenced session process group(s): the lease is acknowledged again`);
    if (killed > 0) this.log(`killed ${killed} fenced session process group(s): their host's monitor let them go`);
  }

  private forgetEnded(): void {
    const running = new Set(this.target.runningInstances().map((i) => i.instanceId));
    for (const id of this.listed) if (!running.has(id)) this.listed.delete(id);
    for (const id of this.condemned) if (!running.has(id)) this.condemned.delete(id);
  }

  /**
   * Asks the server anything: an answer is contact too, so a host that only waits for its monitor's next lease (a
   * busy monitor, a fresh instance not yet attached) is not fenced while the server hears it.
   */
  private probeServer(): void {
    if (this.probing) return;
    this.probing = true;
    const sentAt = (this.probedAt = this.now());
    this.options.probe().then(
      () => {
        this.probing = false;
        this.lastContact = Math.max(this.lastContact, sentAt);
        if (this.target.fencedInstances().length > 0) this.answeredAt ??= this.now();
      },
      () => {
        this.probing = false;
      },
    );
  }

  private log(message: string): void {
    (this.options.log ?? console.log)(message);
  }
}
