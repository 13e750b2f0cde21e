/**
 * The closed set of failure `type` strings that cross the wire (ApplicationFailure.type).
 * Workflow, activities and clients all speak these; they are a public API: never rename one.
 */
export const ERROR_CODES = {
  /** The input failed schema validation; `details` carries the zod issues. */
  InvalidInput: 'InvalidInput',
  /** The control is not legal in the session's current state. */
  InvalidTransition: 'InvalidTransition',
  /** No session with that id exists. */
  SessionNotFound: 'SessionNotFound',
  /** A session with that id exists already (or existed): session ids are never reused. */
  SessionAlreadyExists: 'SessionAlreadyExists',
  /** The session has ended (stopped or failed for good): no control can change it. */
  SessionClosed: 'SessionClosed',
  /**
   * The session has failed (its command exited, its runtime was lost with no checkpoint, …): no control can change
   * it. `details` carry the failure: its code, message and, for a command that exited, exit code and last output.
   */
  SessionFailed: 'SessionFailed',
  /** The checkpoint's objects are not in the snapshot store. */
  SnapshotNotFound: 'SnapshotNotFound',
  /** The checkpoint's bytes do not match its manifest (digest, size, structure). */
  SnapshotCorrupt: 'SnapshotCorrupt',
  /** The checkpoint was written by a format or runtime version this worker cannot restore. */
  SnapshotIncompatible: 'SnapshotIncompatible',
  /** A checkpoint's object failed authentication: altered, swapped between sessions or checkpoints, or forged. */
  SnapshotTampered: 'SnapshotTampered',
  /** A key needed to read the checkpoint is not available: master key not configured, or data key destroyed. */
  KeyUnavailable: 'KeyUnavailable',
  /** The runtime could not be started, captured or stopped for a reason retries will not fix. */
  RuntimeFailed: 'RuntimeFailed',
  /** The runtime instance is gone (its host restarted or was lost). */
  RuntimeLost: 'RuntimeLost',
  /** No checkpoint of the session could be restored. */
  RestoreFailed: 'RestoreFailed',
  /** The snapshot store has no room or is read-only (ENOSPC, EDQUOT, EROFS): retrying will not help. */
  StoreFull: 'StoreFull',
  /**
   * The snapshot store did not answer (5xx, throttling, dropped connections) for longer than the worker's retry bound:
   * nothing half-written is visible, and a later attempt may succeed.
   */
  StoreUnavailable: 'StoreUnavailable',
  /**
   * The control names a stale epoch of the session (`ifHead`, `ifIndex`), or conflicts with one in flight; or a store
   * write names what the store holds already with other content (a timeline index). Nothing was changed.
   */
  Conflict: 'Conflict',
  /**
   * The session is handing over to its next workflow run (continue-as-new) and takes no new control for a moment;
   * nothing was changed. Send the same control again shortly (SessionClient does, by itself).
   */
  Busy: 'Busy',
  /** A message index would split a tool call from its result; the failure names the nearest safe index. */
  UnsafeMessageIndex: 'UnsafeMessageIndex',
  /** The idempotency key was used before with other input: nothing was done (a retry must send the same input). */
  IdempotencyKeyReused: 'IdempotencyKeyReused',
  /** No live worker host satisfies the session's placement (the host it names, the worker labels it requires). */
  NoEligibleHost: 'NoEligibleHost',
  /**
   * No worker answered for the session within the client's bound: none polls its task queue, or none that does
   * answers. What Temporal itself knows of the session (its search attributes) goes with the failure.
   */
  WorkerUnavailable: 'WorkerUnavailable',
} as const;

export type ErrorCode = (typeof ERROR_CODES)[keyof typeof ERROR_CODES];

/** Failure types an activity raises that no retry can fix: restore falls back instead of retrying. */
export const PERMANENT_SNAPSHOT_ERRORS: readonly ErrorCode[] = [
  ERROR_CODES.SnapshotNotFound,
  ERROR_CODES.SnapshotCorrupt,
  ERROR_CODES.SnapshotIncompatible,
  ERROR_CODES.SnapshotTampered,
];

export function isErrorCode(value: unknown): value is ErrorCode {
  return typeof value === 'string' && Object.values(ERROR_CODES).includes(value as ErrorCode);
}
