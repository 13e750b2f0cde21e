import type { Readable } from 'node:stream';
import type { RuntimeExitDetails } from '../domain/records';
import type { RuntimeSpec } from '../domain/schemas';
import { ERROR_CODES } from '../domain/error-codes';
import { DurableSessionsError } from '../errors';
import type { StateSource } from '../snapshots';

/** How a runtime instance ended. `requested` is true when `stop` caused it. */
export interface ExitInfo {
  exitCode: number | null;
  signal: string | null;
  requested: boolean;
}

/** What `describe` reports of a live instance (shown in status and the Web UI). */
export interface RuntimeInstanceInfo {
  instanceId: string;
  sessionId: string;
  kind: RuntimeSpec['kind'];
  version: string;
  /** Where it lives: a directory for `workspace`, 'memory' for the in-process runtime. */
  location: string;
  pid?: number;
  /** Where the instance's output goes: the workspace command's log file; undefined for the in-process runtime. */
  output?: string;
  startedAt: string;
  running: boolean;
}

export interface StartRequest<S extends RuntimeSpec = RuntimeSpec> {
  sessionId: string;
  /** Unique per start or restore; a restored session gets a new instance (a fresh directory). */
  instanceId: string;
  spec: S;
}

/**
 * What a restored instance is told about where its state came from. A fork (or branch) of a session starts from a
 * checkpoint of another session: the instance must take a fresh identity — its own session id, new random seeds —
 * rather than carry on as a clone of the source (two forks of one checkpoint that read the same ids or seeds would
 * collide wherever those matter: a lock, an account, a random name).
 */
export interface ForkOrigin {
  sessionId: string;
  checkpointId: string;
}

export interface RestoreRequest<S extends RuntimeSpec = RuntimeSpec> extends StartRequest<S> {
  /** Set when the state is a checkpoint of another session (the first of a fork or branch). */
  forkedFrom?: ForkOrigin;
  /**
   * The captured state. The stream fails (before 'end') if the bytes do not verify: the runtime must
   * then clean up what it extracted, start nothing, and reject with the stream's error unchanged.
   */
  state: Readable;
  /** The checkpoint the state is: a runtime may take it as the base of its next {@link CapturedState}. */
  checkpointId?: string;
}

/**
 * A capture that names what did not change since the instance's last stored checkpoint (its `base`). The caller
 * stores it and then calls `stored` with the checkpoint it became: the base of the next capture. A capture that is
 * never stored (failed, abandoned) changes nothing; the next one is relative to the same base as before.
 */
export interface CapturedState extends StateSource {
  stored(checkpointId: string): void;
}

/**
 * Where a runtime's instances live, which decides who can reach one and what the loss of a worker means for it.
 *
 * - `host`: in the worker's process or on its host (memory, conversation, workspace). Only that worker reaches an
 *   instance, every activity on it runs on the worker's own task queue, and the instance ends with the host: the
 *   session is recovered elsewhere from its newest checkpoint.
 * - `anywhere`: on a host of its own (a sandbox platform). Any worker reaches an instance, and it outlives the worker
 *   that drove it: another worker adopts the same instance rather than restoring it.
 */
export type RuntimePlacement = 'host' | 'anywhere';

/**
 * One kind of runtime a session can live in. An implementation manages many instances, keyed by instance id.
 *
 * A start or restore whose instance id is already live adopts it (answers with it, starts nothing) when it is the same
 * session's, and refuses it otherwise; one whose id is still being made is busy (retryable); what a crashed attempt
 * left under the id is discarded. A retried start or restore never makes a second instance.
 */
export interface SessionRuntime<S extends RuntimeSpec = RuntimeSpec> {
  readonly kind: S['kind'];
  readonly placement: RuntimePlacement;
  /** Recorded in every checkpoint; restore refuses state captured by an incompatible version. */
  readonly version: string;
  /** Whether this runtime can restore state captured by `version`. */
  canRestore(version: string): boolean;
  start(request: StartRequest<S>): Promise<RuntimeInstanceInfo>;
  /**
   * For runtimes placed `anywhere`: takes over a live instance of the session from the worker that drove it (dead, or
   * draining), fenced so that the worker before is refused from now on (withFence). Makes nothing: an instance its
   * host does not know is RuntimeNotFoundError. Answers the instance as it is, running or ended.
   */
  takeOver?(request: { instanceId: string; sessionId: string }): Promise<RuntimeInstanceInfo>;
  restore(request: RestoreRequest<S>): Promise<RuntimeInstanceInfo>;
  /**
   * A consistent point-in-time stream of the instance's state. The instance may be frozen while the
   * stream is read; it resumes when the stream ends, errors or is destroyed.
   */
  capture(instanceId: string): Promise<Readable>;
  /**
   * Optional: `capture`, with the runs that are unchanged since the last stored checkpoint named instead of read.
   * Same consistency as `capture`. Callers use it when present.
   */
  captureState?(instanceId: string): Promise<CapturedState>;
  /** Stops the instance (gracefully, then forcibly after the grace period) and frees its compute. */
  stop(instanceId: string, options?: { graceMs?: number }): Promise<ExitInfo>;
  /** Resolves when the instance ends, however it ends. Rejects with RuntimeNotFoundError for an unknown id. */
  waitForExit(instanceId: string, signal?: AbortSignal): Promise<ExitInfo>;
  /** The instance as the runtime knows it now (asked of wherever it lives); undefined for an id it does not know. */
  describe(instanceId: string): Promise<RuntimeInstanceInfo | undefined>;
  /**
   * Optional: when the instance last showed activity (ISO-8601), for the idle-pause policy: a workspace's newest file
   * change or output, a memory instance's last write. Undefined when it cannot tell.
   */
  lastActivity?(instanceId: string): Promise<string | undefined>;
  /** Removes what a stopped instance left on this host (its directory). */
  dispose(instanceId: string): Promise<void>;
  /**
   * Optional: how the instance's command ended, once it ended by itself with a failure (exit code, last lines of
   * output, where what it left is kept); undefined while it runs or when it was stopped.
   */
  failureOf?(instanceId: string): Promise<RuntimeExitDetails | undefined>;

  // The worker's lifecycle, for runtimes that hold something on its host (processes, directories).

  /**
   * Optional: runs before any activity on this worker, so that what a worker that died on this host left running or
   * on disk is gone before a recovered session could run beside it.
   */
  recoverHost?(): Promise<unknown>;
  /** Optional: the worker stops; instances still running end with it (they recover from their checkpoints). */
  stopAll?(): Promise<void>;
  /** Optional: the worker's process is exiting, however it exits: synchronously, nothing of the runtime outlives it. */
  killAll?(): void;
  /**
   * Optional: freezes and thaws instances for the host's self-fence (docs/design.md §6), for a runtime whose instances
   * would otherwise run on after the host lost its lease.
   */
  readonly fenceTarget?: FenceTarget;
}

/** What the host's self-fence asks of a runtime (src/activities/host-fence.ts). */
export interface FenceTarget {
  runningInstances(): { instanceId: string; startedAtMs: number }[];
  fence(instanceIds: Iterable<string>): string[];
  fencedInstances(): string[];
  unfence(instanceIds: Iterable<string>): number;
  killFenced(instanceIds: Iterable<string>): number;
}

/**
 * The adopt rule for a live instance a start or restore names again (SessionRuntime): undefined when `live` is
 * undefined, its info when it is the request's session, refused when it is another's.
 */
export function adoptLive<I extends { sessionId: string }>(
  request: StartRequest,
  live: I | undefined,
  info: (instance: I) => RuntimeInstanceInfo,
): RuntimeInstanceInfo | undefined {
  if (!live) return undefined;
  if (live.sessionId !== request.sessionId) {
    throw new RuntimeFailedError(`runtime instance ${request.instanceId} belongs to another session on this worker`);
  }
  return info(live);
}

/**
 * `adopt` for a restore: the adopted instance, or undefined when there is none and the state must be read. The state
 * stream is released whenever it will not be read (adopted, or refused).
 */
export function adoptForRestore(
  request: RestoreRequest,
  adopt: () => RuntimeInstanceInfo | undefined,
): RuntimeInstanceInfo | undefined {
  let adopted: RuntimeInstanceInfo | undefined;
  try {
    adopted = adopt();
  } catch (error) {
    request.state.destroy();
    throw error;
  }
  if (adopted) request.state.destroy();
  return adopted;
}

/** Thrown when an instance id is not known to this worker (it was never here, or the worker restarted). */
export class RuntimeNotFoundError extends DurableSessionsError {
  /** For its session, an instance its host does not know is lost. */
  readonly code = ERROR_CODES.RuntimeLost;
  constructor(readonly instanceId: string) {
    super(`runtime instance ${instanceId} is not running on this worker`);
  }
}

/**
 * Thrown when a runtime cannot do what was asked yet, for a reason a retry can fix: an instance still being started,
 * a file that changed while it was captured. Retryable.
 */
export class RuntimeBusyError extends DurableSessionsError {
  readonly code = 'RuntimeBusy';
  override readonly retryable = true;
}

/** Thrown when a runtime cannot do what was asked for a reason a retry will not fix (bad command, …). */
export class RuntimeFailedError extends DurableSessionsError {
  readonly code = ERROR_CODES.RuntimeFailed;
}

/**
 * Thrown by `start` when the command exited with a failure before it had run for its settle window: `details` say how
 * it ended, its last lines of output, and where its directory and log are kept for a look.
 */
export class RuntimeExitedError extends RuntimeFailedError {
  constructor(
    message: string,
    readonly details: RuntimeExitDetails,
  ) {
    super(message);
  }
}
