import { deprecatePatch } from '@temporalio/workflow';

/**
 * The `patched()` ids of the session workflow. Each one is recorded in the histories of the sessions that ran with it,
 * and its absence in those that ran without: an id is never renamed, and its old branch stays while such a session
 * may still replay. A release replays the histories of the two minor releases before it (docs/design.md §8.3): a patch
 * that both of them had is retired (`deprecatePatch`), its old branch deleted.
 */

/**
 * A retired patch where a condition still reads it: records the deprecated marker, as `deprecatePatch` does, and takes
 * the new branch. The old branch it leaves is never run; it goes with the next change to its file.
 */
export function retiredPatch(patchId: string): true {
  deprecatePatch(patchId);
  return true;
}

/**
 * Retired after v0.5.0 (since v0.2.0). Behaviour that differs from histories recorded before it: the session id
 * is claimed in the store before anything else, and what the store might still repair leaves a session paused
 * instead of failed.
 */
export const CONTRACTS_PATCH = 'strict-contracts';

/** Retired after v0.5.0 (since v0.2.0). Watchers wait on their host's watch queue, not on the queue its controls need. */
export const WATCH_QUEUE_PATCH = 'watchers-own-queue';

/**
 * Retired after v0.5.0 (since v0.2.0). A watcher that fails asks the host whether the instance still runs before the session
 * recovers elsewhere.
 */
export const ASK_HOST_PATCH = 'ask-host-before-recovery';

/**
 * Retired after v0.5.0 (since v0.3.0). The host's monitor workflow watches the instance (one lease per host), instead of an activity per session: the
 * session attaches its instance to it and hears back by signal (`runtimeReport`).
 */
export const HOST_MONITOR_PATCH = 'host-monitor';

/**
 * Retired after v0.5.0 (since v0.3.1). Fewer steps per lifecycle, each of them one workflow task less: stop and dispose are one activity, the id claim is a
 * local activity, and search attributes are upserted only when the phase changes.
 */
export const LEAN_PATCH = 'lean-lifecycle';

/**
 * Retired after v0.5.0 (since v0.4.0). Run control: the timeline goes to the snapshot store (local activity `appendTimeline`, when entries wait), and
 * policies run on timers.
 */
export const RUN_CONTROL_PATCH = 'run-control';

/**
 * Policies keep time by the workflow's clock alone: the last checkpoint is when the workflow recorded it (not the
 * host's `createdAt`), and a runtime's activity comes as an age (`idleFor`), not a host timestamp. A host whose clock
 * is behind the server's no longer makes every automatic checkpoint due at once.
 */
export const POLICY_CLOCK_PATCH = 'policy-workflow-clock';

/**
 * The session's progress as search attributes too (host, checkpoint count, head, last checkpoint, failure code),
 * upserted whenever one changes, so operators filter by them (`FailureCode = "SnapshotCorrupt"`, `SessionHost = …`).
 */
export const PROGRESS_ATTRIBUTES_PATCH = 'progress-search-attributes';

/**
 * A command that fails by itself is described by its host: its exit code, last lines of output and where its directory
 * and log are kept go into the session's failure (one more activity, asked of the host after the exit), and the failed
 * run's result carries the whole failure as its details.
 */
export const FAILURE_DETAILS_PATCH = 'failure-details';

/**
 * A signalled control the session's runtime kind cannot serve (`requestAppend` to a memory session) is refused as the
 * signal arrives, instead of being run and failing at the runtime.
 */
export const CONTROL_RUNTIMES_PATCH = 'control-runtime-kinds';

/**
 * A control's idempotency key is remembered with a digest of its input: the key sent again with other input is
 * refused (`IdempotencyKeyReused`) instead of answered with the first outcome.
 */
export const IDEMPOTENCY_DIGEST_PATCH = 'idempotency-input-digest';

/**
 * A placement names the session's constraints (`spec.placement`) and the hosts that never picked its work up: the
 * fleet directory then chooses among the live hosts that satisfy it, trying those others last.
 */
export const PLACEMENT_REQUEST_PATCH = 'placement-request';

/**
 * A session whose host is lost before its first checkpoint starts again from its spec (its first state), recorded as
 * `restarted-from-spec` in the timeline, instead of failing with RuntimeLost.
 */
export const RESTART_FROM_SPEC_PATCH = 'restart-from-spec';

/**
 * A pause whose runtime is lost while it captures is carried out on the recovered session (restored from its newest
 * checkpoint, or started again from its spec, then captured and stopped), instead of failing with the session left
 * running.
 */
export const PAUSE_THROUGH_LOSS_PATCH = 'pause-through-host-loss';

/**
 * Whom a lost host's sessions believe. The host's monitor, which declares a host lost only after its lease went
 * unrenewed and the host did not answer (by then the host has frozen its instances itself: docs/design.md §6), or
 * once the host restarted without the instance, is believed at once: recovery no longer first waits hostTimeoutMs
 * more on a stop the dead host cannot take. A control whose host does not answer no longer decides the host is lost
 * by itself: it waits for the monitor's word. A checkpoint whose runtime was lost under it recovers the session at
 * once and fails typed (RuntimeLost, "checkpoint not taken").
 */
export const MONITOR_DECIDES_PATCH = 'monitor-decides-host-loss';

/**
 * A control that stops the runtime after its checkpoint (pause, stop, rewind, drain) asks the host for both in one
 * activity: the host stops the instance only once the checkpoint is published, and a stop that fails there is left to
 * the stopRuntime activity as before. One activity and one workflow task fewer per pause.
 */
export const CAPTURE_THEN_STOP_PATCH = 'capture-then-stop';

/**
 * The host's monitor (not the session workflow) continues as new while a lease is held, once the server suggests it:
 * it cancels the lease at the next attachment and the next run asks for one. Before, a run held its lease for the
 * whole round (10 minutes), growing by an attachment per session started on the host, whatever the suggestion said.
 */
export const MONITOR_CONTINUES_PATCH = 'monitor-continues-during-lease';

/**
 * The host's monitor continues as new at a length of its own (`MONITOR_RUN_EVENTS`), not only at the server's
 * suggestion: a run replays within the workflow task timeout even on a loaded host.
 */
export const MONITOR_BOUND_PATCH = 'monitor-run-bound';

/**
 * The host's monitor asks a host again (up to `MAX_LATE_QUESTIONS` in all) when its question was recorded as not picked
 * up long after it was due: the server ran behind, and a live host is not declared lost for it.
 */
export const LATE_QUESTION_PATCH = 'late-question-asked-again';

/**
 * The host's monitor tells its sessions through an activity (`tellSessions`, a batch of reports each, signalled from the
 * worker's client), not with a signal of its own per session: each of those was pending in the monitor's state until
 * acknowledged, and a monitor telling thousands of sessions jammed in the server (docs/design.md §10).
 */
export const TELL_BY_ACTIVITY_PATCH = 'tell-sessions-by-activity';

/**
 * The host's monitor asks a control question beside each question to a host, on the sessions' queue that every worker
 * polls; when neither is picked up, the server or the fleet is behind, and the host is asked again (up to
 * `MAX_BEHIND_QUESTIONS` in all) instead of being declared lost.
 */
export const QUESTION_CONTROL_PATCH = 'question-with-control';
