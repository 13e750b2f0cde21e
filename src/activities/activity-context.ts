/**
 * What every group of activities shares: the worker's dependencies, the host's state and meters, the runtime of a
 * kind, and the helpers that turn what the store and runtimes throw into what Temporal retries or fails.
 */
import { ApplicationFailure, type Context } from '@temporalio/activity';
import type { Client } from '@temporalio/client';
import type { RuntimeInstanceRef, TimelineEntry } from '../api/messages';
import { DEFAULT_TENANT, isDefaultTenant } from '../domain/names';
import { ERROR_CODES, isErrorCode } from '../domain/error-codes';
import { DurableSessionsError } from '../errors';
import { SessionMetrics, storeErrorKind } from '../metrics';
import type { CheckpointRef, RuntimeKind } from '../domain/schemas';
import type { RuntimeInstanceInfo, RuntimeRegistry, SessionRuntime } from '../runtimes';
import type { FindCheckpointInput, Tenancy, VerifyCheckpointInput } from './activity-inputs';
import type { HostFence } from './host-fence';
import { HostState } from './host-state';
import type { FleetMember } from './placement';
import {
  type ChunkedSnapshotStore,
  type CheckpointManifest,
  SnapshotNotFoundError,
  type SnapshotStore,
  SnapshotTamperedError,
  type TimelineLog,
  type TimelineRecord,
} from '../snapshots';

export interface ActivityDeps {
  store: SnapshotStore;
  /** Where session timelines go: the store's own log when omitted (both stores keep one). */
  timeline?: TimelineLog;
  runtimes: RuntimeRegistry;
  /** This worker's own task queue: activities that touch a runtime instance run where it lives. */
  hostTaskQueue: string;
  /** The sessions this host runs, and whether it is draining (a fresh one when not given). */
  host?: HostState;
  /** Freezes this host's session processes when it cannot renew its lease (docs/design.md §6); none without it. */
  fence?: HostFence;
  /** Placement skips a host that runs this many sessions (default 1000): a full host is never taken for a dead one. */
  maxSessions?: number;
  /** Where sessions go: the fleet directory this host reports to. Without it, whichever worker asks takes them. */
  placement?: Pick<FleetMember, 'place'>;
  /** The worker's client: a host's monitor tells its sessions through it (`tellSessions`). */
  client?: Pick<Client, 'workflow'>;
  /** This host's worker labels, which a placement may require. */
  workerLabels?: string[];
  /** How often a long-running watch reports liveness. */
  watchHeartbeatMs?: number;
  /** Where captures, restores and store errors are counted (a no-op meter when omitted). */
  metrics?: SessionMetrics;
  /** How long one watch round lasts before it returns `{ exited: false }` and the workflow watches again. */
  watchRoundMs?: number;
  /** How long the host's lease runs before it returns the exits its sessions asked for (default 10 minutes). */
  leaseRoundMs?: number;
  /**
   * How long the monitor waits between a quiet lease round and the next (default 0: it leases again at once). While
   * it waits, Temporal holds no activity for the host, so a time-skipping server can move time; an exit or the loss
   * of the host is noticed up to this much later.
   */
  leaseRestMs?: number;
}

/** The shared state of one worker's activities (createContext). */
export interface ActivityContext {
  deps: ActivityDeps;
  host: HostState;
  metrics: SessionMetrics;
  /** The seconds since `started`, and the error counted against the store when the store raised it. */
  measured: (operation: 'capture' | 'restore', started: bigint, err?: unknown) => number;
  /** The instance, registered with the host, whose monitor learns how it ends. */
  hosted: (ref: RuntimeInstanceRef, sessionId: string) => RuntimeInstanceRef;
  /** The runtime of a kind; a kind this worker does not offer is a non-retryable failure. */
  runtimeFor: (kind: RuntimeKind) => SessionRuntime;
}

export function createContext(deps: ActivityDeps): ActivityContext {
  const host = deps.host ?? new HostState();
  const metrics = deps.metrics ?? new SessionMetrics();
  const runtimeFor = (kind: RuntimeKind): SessionRuntime => {
    const runtime = deps.runtimes[kind];
    if (!runtime) {
      throw ApplicationFailure.nonRetryable(`this worker has no "${kind}" runtime`, ERROR_CODES.RuntimeFailed);
    }
    return runtime;
  };
  return {
    deps,
    host,
    metrics,
    measured: (operation, started, err) => {
      const kind = err === undefined ? undefined : storeErrorKind(err);
      if (kind) metrics.storeError(operation, kind);
      return Number(process.hrtime.bigint() - started) / 1e9;
    },
    hosted: (ref, sessionId) => {
      // The host, not an activity per session, learns how the instance ends: its monitor reports it.
      const exited = runtimeFor(ref.kind).waitForExit(ref.instanceId);
      host.hosting(ref.instanceId, sessionId, exited);
      return ref;
    },
    runtimeFor,
  };
}

/**
 * The manifest must be the checkpoint the session recorded when it was taken. History cannot be rewritten by whoever
 * can write the store, so a manifest that disagrees (planted, replaced or downgraded) is refused as tampered.
 */
export function checkRecorded(manifest: CheckpointManifest, input: VerifyCheckpointInput): void {
  const expected = input.expected;
  if (
    expected &&
    (manifest.formatVersion !== expected.formatVersion ||
      manifest.digest !== expected.digest ||
      (manifest.encryption ?? 'none') !== (expected.encryption ?? 'none'))
  ) {
    throw new SnapshotTamperedError(
      `checkpoint ${input.checkpointId} is not the one the session recorded (format ${manifest.formatVersion}, ` +
        `${manifest.encryption ?? 'none'}, ${manifest.digest}; recorded format ${expected.formatVersion}, ` +
        `${expected.encryption ?? 'none'}, ${expected.digest})`,
      'tampered',
      { sessionId: input.sessionId, checkpointId: input.checkpointId },
    );
  }
}

/** The store's fork (the chunked store has it; format 1 has no chunks to share). */
export type ForkingStore = Pick<ChunkedSnapshotStore, 'fork'>;

/**
 * The store of the input's tenant: the worker's own for `default`, else the one the store keeps for that tenant
 * (its own directory, the tenant bound into every object).
 */
export function storeOf(deps: ActivityDeps, { tenant }: Tenancy): SnapshotStore {
  if (isDefaultTenant(tenant)) return deps.store;
  if (!deps.store.forTenant) {
    // A configuration error no retry fixes.
    throw ApplicationFailure.nonRetryable(
      `this worker's snapshot store keeps only the "${DEFAULT_TENANT}" tenant, not "${tenant}"`,
      ERROR_CODES.InvalidInput,
    );
  }
  return deps.store.forTenant(tenant);
}

export function timelineOf(deps: ActivityDeps, tenancy: Tenancy): TimelineLog {
  if (deps.timeline && isDefaultTenant(tenancy.tenant)) return deps.timeline;
  const log = storeOf(deps, tenancy) as SnapshotStore & Partial<TimelineLog>;
  if (typeof log.appendTimeline !== 'function' || typeof log.readTimeline !== 'function') {
    // A configuration error no retry fixes: the worker was given a store without a timeline and no timeline.
    throw ApplicationFailure.nonRetryable(
      'this worker has no timeline log: give it a store that keeps one',
      ERROR_CODES.RuntimeFailed,
    );
  }
  return log as TimelineLog;
}

/** Entries as the store's log takes them: each with its index (the workflow gives every entry one). */
export function records(entries: readonly TimelineEntry[]): TimelineRecord[] {
  return entries.map((e) => {
    if (e.index === undefined) throw new TypeError(`a timeline entry (${e.kind}) has no index`);
    return e as TimelineRecord;
  });
}

/** Pages through the store's timeline for a checkpoint entry that matches (an index is one page read). */
export async function findInTimeline(log: TimelineLog, input: FindCheckpointInput): Promise<CheckpointRef | null> {
  const matches = (e: TimelineEntry): e is Extract<TimelineEntry, { kind: 'checkpoint' }> =>
    e.kind === 'checkpoint' &&
    (input.index !== undefined
      ? e.index === input.index
      : input.checkpointId !== undefined
        ? e.checkpoint.checkpointId === input.checkpointId
        : e.messageIndex === input.messageIndex);
  let from: number | null = input.index ?? 1;
  let found: CheckpointRef | null = null;
  while (from !== null) {
    const page: { entries: unknown[]; next: number | null } = await log.readTimeline(input.sessionId, {
      from,
      limit: input.index !== undefined ? 1 : 1000,
    });
    for (const raw of page.entries) {
      const e = raw as TimelineEntry;
      // The newest match wins for a message index (a rewound conversation passes the same count again).
      if (matches(e)) found = e.checkpoint;
      if (found && input.messageIndex === undefined) return found;
    }
    from = input.index !== undefined ? null : page.next;
  }
  return found;
}

export async function readManifestIfExists(store: SnapshotStore, sessionId: string, checkpointId: string) {
  try {
    return await store.readManifest(sessionId, checkpointId);
  } catch (err) {
    if (err instanceof SnapshotNotFoundError) return undefined;
    throw toFailure(err);
  }
}

export const MAX_HEARTBEAT_MS = 5_000;

/** Messages one readMessages answers at most. */
export const MAX_READ_MESSAGES = 1_000;

/** Exits sessions asked for, at most, before the lease returns them early (the monitor's list is kept short). */
export const MAX_RELEASED_PER_ROUND = 200;

export const DEFAULT_MAX_SESSIONS = 1_000;

/**
 * How often a long activity beats: a third of its heartbeat timeout (the session's `liveness.heartbeatTimeoutMs`), at
 * most every 5 s, so no timeout the spec allows can expire between two beats of a live worker.
 */
export function heartbeatEvery(ctx: Context): number {
  const timeoutMs = ctx.info.heartbeatTimeoutMs ?? 30_000;
  return Math.max(100, Math.min(MAX_HEARTBEAT_MS, Math.floor(timeoutMs / 3)));
}

const FIRST_REPORT_MS = 100;

/**
 * Progress arrives per chunk (thousands per GiB); a heartbeat is encoded and handed to the SDK's core each time, so
 * report at most every 500 ms. The SDK throttles what it sends to the server on top of this, but sends the first at
 * once: the first report waits FIRST_REPORT_MS, so that a small state's capture or restore (a few milliseconds) costs
 * the server no heartbeat.
 */
export function throttled(report: (bytesDone: number) => void, intervalMs = 500): (bytesDone: number) => void {
  let last = Date.now() - intervalMs + FIRST_REPORT_MS;
  return (bytesDone) => {
    const now = Date.now();
    if (now - last < intervalMs) return;
    last = now;
    report(bytesDone);
  };
}

/**
 * A typed error says what a retry can do: a retryable one stays retryable under its own code, one with a wire code
 * becomes a non-retryable failure of that type. Anything untyped (an I/O error the store or runtime did not type) is
 * thrown as is, and the retry policy retries it.
 */
export function toFailure(err: unknown): unknown {
  if (err instanceof ApplicationFailure || !(err instanceof DurableSessionsError)) return err;
  if (err.retryable) return ApplicationFailure.retryable(err.message, err.code);
  if (isErrorCode(err.code)) {
    return ApplicationFailure.create({ message: err.message, type: err.code, nonRetryable: true, cause: err });
  }
  return err;
}

export function toRef(info: RuntimeInstanceInfo, hostTaskQueue: string, fence?: number): RuntimeInstanceRef {
  return {
    instanceId: info.instanceId,
    kind: info.kind,
    hostTaskQueue,
    location: info.location,
    ...(info.output !== undefined ? { output: info.output } : {}),
    pid: info.pid,
    startedAt: info.startedAt,
    ...(fence !== undefined ? { fence } : {}),
  };
}
