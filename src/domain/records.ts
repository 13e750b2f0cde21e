import { z } from 'zod';
import {
  CheckpointId,
  CheckpointRef,
  IdempotencyKey,
  RetentionPolicy,
  RuntimeKindSchema,
  SessionId,
  SessionPolicies,
  StartSessionInput,
  TimelineIndex,
  verificationFields,
} from './schemas';
import { PHASES } from './session-state';
import { strictObject } from './strict';

/**
 * What the session workflow records and reports, as schemas: the workflow parses the state it is handed at
 * continue-as-new with these, so a forged or damaged `carried` fails the run with InvalidInput instead of a
 * workflow-task failure loop.
 */

const Timestamp = z.string().max(64);
const Text = z.string().max(64 * 1024);

export const RuntimeInstanceRef = strictObject({
  instanceId: z.string().min(1).max(300),
  kind: RuntimeKindSchema,
  /** The task queue of the worker host the instance lives on. */
  hostTaskQueue: z.string().min(1).max(400),
  location: z.string().max(4096),
  /** Where the runtime's output goes (the command's log file), when it has one. */
  output: z.string().max(4096).optional(),
  pid: z.number().int().optional(),
  startedAt: Timestamp,
  /**
   * The session's generation when this worker took the instance: the fencing token of every call on it (absent: 1).
   * Only runtimes placed `anywhere` are sent it; for them a worker the session moved past is refused.
   */
  fence: z.number().int().min(1).optional(),
});
export type RuntimeInstanceRef = z.infer<typeof RuntimeInstanceRef>;

/**
 * How long a workspace start waits for its command to stay alive before it answers (DS_START_SETTLE_MS): more than three
 * times what the slowest command measured that fails at once (`npm run dev` in an empty directory) took to exit on a
 * loaded 2-core host (bench/README.md, Start settle window).
 */
export const DEFAULT_START_SETTLE_MS = 2_000;

/** How long what a failed command left stays on its host (DS_FAILED_RETENTION_MS): a week, to be looked at. */
export const DEFAULT_FAILED_RETENTION_MS = 7 * 24 * 60 * 60_000;

/**
 * How a runtime's command ended, when that is why the session failed: exit code or signal, the last lines of its
 * output, and where its directory and log stay on its host (`host`, the host's task queue) until `keptUntil`.
 */
export const RuntimeExitDetails = strictObject({
  exitCode: z.number().int().nullable().optional(),
  signal: z.string().max(64).nullable().optional(),
  outputTail: z.array(z.string().max(2000)).max(100).optional(),
  location: z.string().max(4096).optional(),
  output: z.string().max(4096).optional(),
  host: z.string().max(400).optional(),
  keptUntil: Timestamp.optional(),
});
export type RuntimeExitDetails = z.infer<typeof RuntimeExitDetails>;

export const FailureInfo = strictObject({
  type: z.string().max(100),
  message: Text,
  at: Timestamp,
  ...RuntimeExitDetails.shape,
});
export type FailureInfo = z.infer<typeof FailureInfo>;

/** A fire-and-forget control that could not be applied (signals have no caller to tell). */
export const RejectedSignal = strictObject({ signal: z.string().max(300), reason: Text, at: Timestamp });
export type RejectedSignal = z.infer<typeof RejectedSignal>;

/**
 * Fields every timeline entry has. `index` is stable for the life of the session (1, 2, 3…, never reused or
 * renumbered); `branch` is the branch the session was on. Both are absent on entries recorded before indices.
 */
const base = {
  index: TimelineIndex.optional(),
  branch: z.number().int().min(0).optional(),
  at: Timestamp,
};

/** Where a checkpoint stands: written (`durable`), read back and authenticated (`verified`), or found bad. */
export const Durability = z.enum(['durable', 'verified', 'failed-verification']);
export type Durability = z.infer<typeof Durability>;

const RestoreCause = z.enum(['resume', 'recovery', 'drain', 'rewind', 'fork']);

/** A session's lineage: the session and checkpoint a fork started from. */
export const ForkOrigin = strictObject({
  sessionId: SessionId,
  checkpointId: CheckpointId,
  /** The checkpoint's index in the source's timeline. */
  index: TimelineIndex.optional(),
});
export type ForkOrigin = z.infer<typeof ForkOrigin>;

export const TimelineEntry = z.discriminatedUnion('kind', [
  strictObject({
    kind: z.literal('checkpoint'),
    ...base,
    checkpoint: CheckpointRef,
    reason: Text.optional(),
    durability: Durability.optional(),
    /** Conversation runtime: the number of messages the checkpoint holds. */
    messageIndex: z.number().int().min(0).optional(),
    /** A later `regenerate` replaced the turn this checkpoint holds: kept, hidden from the default view. */
    regenerated: z.boolean().optional(),
  }),
  strictObject({
    kind: z.literal('restored'),
    ...base,
    checkpointId: CheckpointId,
    instanceId: z.string(),
    cause: RestoreCause,
  }),
  strictObject({
    kind: z.literal('fallback'),
    ...base,
    fromCheckpointId: CheckpointId,
    toCheckpointId: CheckpointId.nullable(),
    reason: Text,
  }),
  /**
   * The session had no checkpoint when its runtime was lost: it started again from its spec (its first state), not
   * from a checkpoint. The work since its start is lost; nothing else is.
   */
  strictObject({ kind: z.literal('restarted-from-spec'), ...base, instanceId: z.string(), reason: Text }),
  /** No checkpoint could be restored: the session waits, paused, for a resume once the store is repaired. */
  strictObject({ kind: z.literal('restore-failed'), ...base, cause: RestoreCause, reason: Text }),
  /** A control failed for a reason an operator must see (a full store, say); the session went on as it was. */
  strictObject({
    kind: z.literal('control-failed'),
    ...base,
    control: z.string().max(50),
    type: z.string(),
    reason: Text,
  }),
  strictObject({
    kind: z.literal('runtime-exited'),
    ...base,
    exitCode: z.number().int().nullable(),
    signal: z.string().nullable(),
  }),
  strictObject({ kind: z.literal('runtime-lost'), ...base, instanceId: z.string(), reason: Text }),
  /**
   * The worker that drove a runtime placed `anywhere` was lost or drained: another worker took the same instance over,
   * with a higher generation, without a restore. The worker before is refused by the instance's host from now on.
   */
  strictObject({
    kind: z.literal('taken-over'),
    ...base,
    instanceId: z.string(),
    host: z.string(),
    generation: z.number().int().min(1),
    reason: Text,
  }),
  strictObject({
    kind: z.literal('checkpoint-deleted'),
    ...base,
    checkpointId: CheckpointId,
    reason: z.literal('retention'),
  }),
  strictObject({
    kind: z.literal('verified'),
    ...base,
    cause: z.enum(['background', 'request']),
    ...verificationFields,
  }),
  strictObject({ kind: z.literal('signal-rejected'), ...base, signal: RejectedSignal.shape.signal, reason: Text }),
  /** The session went back to `to`: a new branch starts there; what came after is kept on the old one. */
  strictObject({
    kind: z.literal('rewound'),
    ...base,
    to: CheckpointId,
    toIndex: TimelineIndex.optional(),
    /** The branch the session left, and its tip (the safety checkpoint, when one was taken). */
    fromBranch: z.number().int().min(0),
    fromHead: CheckpointId.nullable(),
    safetyCheckpointId: CheckpointId.optional(),
    reason: Text.optional(),
  }),
  /** New sessions were started from a checkpoint of this one (the source is unchanged). */
  strictObject({
    kind: z.literal('forked'),
    ...base,
    checkpointId: CheckpointId,
    checkpointIndex: TimelineIndex.optional(),
    forks: z.array(strictObject({ sessionId: SessionId, checkpointId: CheckpointId })).max(64),
    /** The fork replaces the source's last turn (`regenerate`): `replaces` is the checkpoint that holds it. */
    regenerate: z.boolean().optional(),
    replaces: CheckpointId.optional(),
  }),
  /** The first entry of a fork: where its state came from. */
  strictObject({ kind: z.literal('forked-from'), ...base, from: ForkOrigin }),
  strictObject({
    kind: z.literal('configured'),
    ...base,
    policies: SessionPolicies.optional(),
    retention: RetentionPolicy.optional(),
  }),
  /** A policy acted: an automatic pause or stop, or an automatic checkpoint skipped for want of activity. */
  strictObject({
    kind: z.literal('policy'),
    ...base,
    action: z.enum(['pause', 'stop', 'checkpoint-skipped']),
    reason: Text,
  }),
  /** Conversation runtime: messages appended (a checkpoint, when one was asked for, is its own entry). */
  strictObject({
    kind: z.literal('appended'),
    ...base,
    firstIndex: z.number().int().min(0),
    count: z.number().int().min(1),
  }),
]);
export type TimelineEntry = z.infer<typeof TimelineEntry>;

/** The outcome of a control sent with an idempotency key: a repeat of the key gets the same outcome. */
export const RememberedResult = strictObject({
  key: IdempotencyKey,
  control: z.enum([
    'checkpoint',
    'pause',
    'resume',
    'stop',
    'rewind',
    'fork',
    'branch',
    'configure',
    'append',
    'regenerate',
  ]),
  /** The input's digest (`inputFingerprint`), absent for keys remembered before digests were kept. */
  input: z
    .string()
    .regex(/^[0-9a-f]{32}$/)
    .optional(),
  outcome: z.union([
    strictObject({ ok: z.literal(true), value: z.unknown() }),
    strictObject({ ok: z.literal(false), type: z.string().max(100), message: Text }),
  ]),
});
export type RememberedResult = z.infer<typeof RememberedResult>;

/** A branch's newest checkpoint. */
export const BranchTip = strictObject({ branch: z.number().int().min(0), checkpointId: CheckpointId.nullable() });
export type BranchTip = z.infer<typeof BranchTip>;

/** Checkpoints, timeline entries and forks a run keeps in its state (the rest is in the store's timeline). */
export const WINDOW = { checkpoints: 128, timeline: 64, tips: 64, forks: 64, turns: 1000 } as const;
const WINDOW_TURNS = WINDOW.turns;

/**
 * What the run-control features keep: bounded, so a session that takes 100,000 checkpoints hands the same small
 * state to each new run. The full timeline is in the snapshot store.
 */
export const RunControlState = strictObject({
  /** The index the next timeline entry gets. */
  nextIndex: TimelineIndex,
  /** Entries recorded and not yet in the store's timeline (appended at the next idle moment), oldest first. */
  unflushed: z.array(TimelineEntry).max(100_000),
  branch: z.number().int().min(0),
  nextBranch: z.number().int().min(1),
  tips: z.array(BranchTip).max(WINDOW.tips),
  /** Checkpoints the session has (taken and not deleted by retention); the state keeps the newest few. */
  checkpointCount: z.number().int().min(0),
  /** Runs of the workflow so far, this one included. */
  runs: z.number().int().min(1),
  policies: SessionPolicies,
  retention: RetentionPolicy.optional(),
  forkedFrom: ForkOrigin.nullable(),
  /** The newest forks made from this session (`forkCount` counts them all). */
  forks: z.array(strictObject({ sessionId: SessionId, checkpointId: CheckpointId, at: Timestamp })).max(WINDOW.forks),
  forkCount: z.number().int().min(0),
  lastActivityAt: Timestamp,
  lastCheckpointAt: Timestamp.nullable(),
  /** When the session last became paused (for `stopPausedAfterMs`). */
  pausedAt: Timestamp.nullable(),
  lastVerification: strictObject(verificationFields).nullable(),
  /**
   * Fire-and-forget controls that arrived while the run was handing over to the next (continue-as-new): the next run
   * applies them first, in arrival order.
   */
  deferredSignals: z
    .array(strictObject({ signal: z.string().max(300), input: z.unknown() }))
    .max(20_000)
    .optional(),
  /** Conversation runtime: messages held, and the cuts that would split a tool call from its result. */
  messageCount: z.number().int().min(0).optional(),
  unsafeCuts: z
    .array(strictObject({ callId: z.string().max(200), from: z.number().int().min(0), to: z.number().int().min(0) }))
    .max(1_000_000)
    .optional(),
  /** Conversation runtime: where the newest assistant turns began (their first assistant message), oldest first. */
  turnStarts: z.array(z.number().int().min(0)).max(WINDOW_TURNS).optional(),
});
export type RunControlState = z.infer<typeof RunControlState>;

/** Everything one run of a session's workflow hands to the next at continue-as-new. */
export const CarriedState = strictObject({
  spec: StartSessionInput,
  phase: z.enum(PHASES),
  runtime: RuntimeInstanceRef.nullable(),
  /**
   * Grows each time another worker takes over the session's runtime: the fence its calls carry to a sandbox host.
   * Absent: 1.
   */
  generation: z.number().int().min(1).optional(),
  head: CheckpointRef.nullable(),
  checkpoints: z.array(CheckpointRef),
  timeline: z.array(TimelineEntry),
  nextSequence: z.number().int().min(1),
  failure: FailureInfo.nullable(),
  lastRestore: strictObject({
    checkpointId: CheckpointId,
    at: Timestamp,
    fallbackFrom: z.array(CheckpointId),
  }).nullable(),
  lastRejectedSignal: RejectedSignal.nullable(),
  /** The newest refused signals, newest last (bounded). Absent in state carried by earlier versions. */
  rejectedSignals: z.array(RejectedSignal).optional(),
  results: z.array(RememberedResult),
  startedAt: Timestamp,
  updatedAt: Timestamp,
  // Run control. Each is absent in state carried by versions before it; `runControlOf` fills them in.
  runControl: RunControlState.optional(),
});
export type CarriedState = z.infer<typeof CarriedState>;

/** The session workflow's argument, as `temporal workflow start --input` or another SDK must send it. */
export const SessionWorkflowInput = strictObject({
  spec: StartSessionInput,
  /** State carried across continue-as-new; absent on the first run. */
  carried: CarriedState.optional(),
  /** A fork's first run: the checkpoint, already in the store under the new session, it starts from. */
  fork: strictObject({
    from: ForkOrigin,
    checkpoint: CheckpointRef,
    /** The owner the source claimed the new session id for, in the store. */
    claimOwner: z.string().min(1).max(300),
    paused: z.boolean().optional(),
    /** Conversation runtime: what the source knew of the messages at the checkpoint. */
    conversation: strictObject({
      unsafeCuts: z.array(
        strictObject({ callId: z.string().max(200), from: z.number().int().min(0), to: z.number().int().min(0) }),
      ),
      turnStarts: z.array(z.number().int().min(0)).max(1000),
    }).optional(),
  }).optional(),
  /**
   * A fork of a session that has ended (no workflow left to ask): this first run makes its first checkpoint from the
   * source's itself (claiming its id for itself), then runs like any fork.
   */
  forkOfEnded: strictObject({
    from: ForkOrigin,
    /** The source's checkpoint, as the source recorded it (its digest is checked on restore). */
    source: CheckpointRef,
    label: z.string().max(200).optional(),
    paused: z.boolean().optional(),
  }).optional(),
});
export type SessionWorkflowInput = z.infer<typeof SessionWorkflowInput>;

/** A running instance a session asks its host's monitor to watch (signal `attachRuntime` to the host workflow). */
export const HostAttachment = strictObject({
  instanceId: z.string().min(1).max(300),
  /** The session workflow told when the instance ends or its host is lost. */
  sessionWorkflowId: z.string().min(1).max(1000),
  /** The session's liveness options: the monitor notices a lost host within the tightest of its sessions'. */
  heartbeatTimeoutMs: z.number().int().min(3_000).max(3_600_000).optional(),
  hostTimeoutMs: z.number().int().min(1_000).max(3_600_000).optional(),
});
export type HostAttachment = z.infer<typeof HostAttachment>;

/** What a host's monitor tells a session about its instance (signal `runtimeReport`). */
export const RuntimeReport = z.discriminatedUnion('outcome', [
  strictObject({
    outcome: z.literal('exited'),
    instanceId: z.string().min(1).max(300),
    exitCode: z.number().int().nullable(),
    signal: z.string().max(50).nullable(),
    /** Stopped by its host (a shutdown that could not drain it), not by the session. */
    stoppedByHost: z.boolean(),
  }),
  strictObject({ outcome: z.literal('lost'), instanceId: z.string().min(1).max(300), reason: Text }),
]);
export type RuntimeReport = z.infer<typeof RuntimeReport>;

/** The host workflow's argument; what it watches is carried across continue-as-new. */
export const HostWorkflowInput = strictObject({
  hostTaskQueue: z.string().min(1).max(400),
  attached: z.array(HostAttachment).optional(),
  cursor: strictObject({ incarnation: z.string().max(100), seq: z.number().int().min(0) }).optional(),
});
export type HostWorkflowInput = z.infer<typeof HostWorkflowInput>;
