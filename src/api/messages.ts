import { defineQuery, defineSignal, defineUpdate } from '@temporalio/workflow';
import type {
  CheckpointInput,
  CheckpointRef,
  PauseInput,
  ResumeInput,
  RuntimeKind,
  StartSessionInput,
  StopInput,
  VerificationResult,
  VerifyInput,
} from '../domain/schemas';
import type { Phase } from '../domain/session-state';

/**
 * Every message of the session workflow, defined once for the workflow and every client.
 * The string names are the wire API (Web UI, `temporal` CLI, other languages): never rename them.
 */

export const DEFAULT_TASK_QUEUE = 'durable-sessions';

/** One workflow per session; its id is derived from the session id so callers can address it. */
export function sessionWorkflowId(sessionId: string): string {
  return `session-${sessionId}`;
}

export interface RuntimeInstanceRef {
  instanceId: string;
  kind: RuntimeKind;
  /** The task queue of the worker host the instance lives on. */
  hostTaskQueue: string;
  location: string;
  pid?: number;
  startedAt: string;
}

export interface ResumeResult {
  /** The checkpoint whose state is now running. */
  restoredFrom: CheckpointRef;
  /** Set when the requested checkpoint could not be restored and an older one was used. */
  fallbackFrom?: { checkpointId: string; reason: string }[];
  runtime: RuntimeInstanceRef;
}

export interface StopResult {
  phase: 'completed';
  finalCheckpoint: CheckpointRef | null;
}

export interface FailureInfo {
  type: string;
  message: string;
  at: string;
}

export type TimelineEntry =
  | { kind: 'checkpoint'; at: string; checkpoint: CheckpointRef; reason?: string }
  | { kind: 'restored'; at: string; checkpointId: string; instanceId: string; cause: 'resume' | 'recovery' }
  | { kind: 'fallback'; at: string; fromCheckpointId: string; toCheckpointId: string | null; reason: string }
  | { kind: 'runtime-exited'; at: string; exitCode: number | null; signal: string | null }
  | { kind: 'runtime-lost'; at: string; instanceId: string; reason: string }
  | { kind: 'checkpoint-deleted'; at: string; checkpointId: string; reason: 'retention' }
  | ({ kind: 'verified'; cause: 'background' | 'request' } & VerificationResult);

export interface SessionStatus {
  sessionId: string;
  phase: Phase;
  runtimeKind: RuntimeKind;
  runtime: RuntimeInstanceRef | null;
  /** The newest checkpoint the session's current state descends from. */
  head: CheckpointRef | null;
  checkpointCount: number;
  /** Controls accepted and not yet finished. */
  pendingControls: number;
  failure: FailureInfo | null;
  /** The last restore, with any fallback it took. */
  lastRestore: { checkpointId: string; at: string; fallbackFrom: string[] } | null;
  /** The newest verification of a checkpoint (background or requested), whatever it found. */
  lastVerification: VerificationResult | null;
  /** A fire-and-forget control that could not be applied (signals have no caller to tell). */
  lastRejectedSignal: { signal: string; reason: string; at: string } | null;
  startedAt: string;
  updatedAt: string;
}

export interface SessionWorkflowInput {
  spec: StartSessionInput;
  /** State carried across continue-as-new; absent on the first run. */
  carried?: unknown;
}

export const checkpointUpdate = defineUpdate<CheckpointRef, [CheckpointInput]>('checkpoint');
export const pauseUpdate = defineUpdate<CheckpointRef, [PauseInput]>('pause');
export const resumeUpdate = defineUpdate<ResumeResult, [ResumeInput]>('resume');
export const stopUpdate = defineUpdate<StopResult, [StopInput]>('stop');
/** Reads checkpoints back from the store on a worker (every chunk authenticated); changes nothing but the record. */
export const verifyUpdate = defineUpdate<VerificationResult[], [VerifyInput]>('verify');

/** Fire-and-forget twins of the updates: same inputs, no result, rejections show in `status`. */
export const checkpointSignal = defineSignal<[CheckpointInput]>('requestCheckpoint');
export const pauseSignal = defineSignal<[PauseInput]>('requestPause');
export const resumeSignal = defineSignal<[ResumeInput]>('requestResume');
export const stopSignal = defineSignal<[StopInput]>('requestStop');

export const statusQuery = defineQuery<SessionStatus>('status');
export const timelineQuery = defineQuery<TimelineEntry[]>('timeline');
