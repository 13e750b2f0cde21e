import { z } from 'zod';
import { CheckpointId, CheckpointRef, IdempotencyKey, StartSessionInput, verificationFields } from './schemas';
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
  kind: z.enum(['workspace', 'memory', 'conversation']),
  /** The task queue of the worker host the instance lives on. */
  hostTaskQueue: z.string().min(1).max(400),
  location: z.string().max(4096),
  /** Where the runtime's output goes (the command's log file), when it has one. */
  output: z.string().max(4096).optional(),
  pid: z.number().int().optional(),
  startedAt: Timestamp,
});
export type RuntimeInstanceRef = z.infer<typeof RuntimeInstanceRef>;

export const FailureInfo = strictObject({ type: z.string().max(100), message: Text, at: Timestamp });
export type FailureInfo = z.infer<typeof FailureInfo>;

/** A fire-and-forget control that could not be applied (signals have no caller to tell). */
export const RejectedSignal = strictObject({ signal: z.string().max(300), reason: Text, at: Timestamp });
export type RejectedSignal = z.infer<typeof RejectedSignal>;

export const TimelineEntry = z.discriminatedUnion('kind', [
  strictObject({ kind: z.literal('checkpoint'), at: Timestamp, checkpoint: CheckpointRef, reason: Text.optional() }),
  strictObject({
    kind: z.literal('restored'),
    at: Timestamp,
    checkpointId: CheckpointId,
    instanceId: z.string(),
    cause: z.enum(['resume', 'recovery', 'drain']),
  }),
  strictObject({
    kind: z.literal('fallback'),
    at: Timestamp,
    fromCheckpointId: CheckpointId,
    toCheckpointId: CheckpointId.nullable(),
    reason: Text,
  }),
  /** No checkpoint could be restored: the session waits, paused, for a resume once the store is repaired. */
  strictObject({
    kind: z.literal('restore-failed'),
    at: Timestamp,
    cause: z.enum(['resume', 'recovery', 'drain']),
    reason: Text,
  }),
  /** A control failed for a reason an operator must see (a full store, say); the session went on as it was. */
  strictObject({
    kind: z.literal('control-failed'),
    at: Timestamp,
    control: z.string().max(50),
    type: z.string(),
    reason: Text,
  }),
  strictObject({
    kind: z.literal('runtime-exited'),
    at: Timestamp,
    exitCode: z.number().int().nullable(),
    signal: z.string().nullable(),
  }),
  strictObject({ kind: z.literal('runtime-lost'), at: Timestamp, instanceId: z.string(), reason: Text }),
  strictObject({
    kind: z.literal('checkpoint-deleted'),
    at: Timestamp,
    checkpointId: CheckpointId,
    reason: z.literal('retention'),
  }),
  strictObject({ kind: z.literal('verified'), cause: z.enum(['background', 'request']), ...verificationFields }),
  strictObject({ kind: z.literal('signal-rejected'), ...RejectedSignal.shape }),
]);
export type TimelineEntry = z.infer<typeof TimelineEntry>;

/** The outcome of a control sent with an idempotency key: a repeat of the key gets the same outcome. */
export const RememberedResult = strictObject({
  key: IdempotencyKey,
  control: z.enum(['checkpoint', 'pause', 'resume', 'stop']),
  outcome: z.union([
    strictObject({ ok: z.literal(true), value: z.unknown() }),
    strictObject({ ok: z.literal(false), type: z.string().max(100), message: Text }),
  ]),
});
export type RememberedResult = z.infer<typeof RememberedResult>;

/** Everything one run of a session's workflow hands to the next at continue-as-new. */
export const CarriedState = strictObject({
  spec: StartSessionInput,
  phase: z.enum(PHASES),
  runtime: RuntimeInstanceRef.nullable(),
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
});
export type CarriedState = z.infer<typeof CarriedState>;

/** The session workflow's argument, as `temporal workflow start --input` or another SDK must send it. */
export const SessionWorkflowInput = strictObject({
  spec: StartSessionInput,
  /** State carried across continue-as-new; absent on the first run. */
  carried: CarriedState.optional(),
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
