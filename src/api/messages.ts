import { defineQuery, defineSignal, defineUpdate } from '@temporalio/workflow';
import type {
  AppendInput,
  RegenerateInput,
  BranchInput,
  CheckpointInput,
  CheckpointRef,
  ConfigureInput,
  ForkInput,
  RetentionPolicy,
  RewindInput,
  SessionPolicies,
  TouchInput,
  PauseInput,
  ResumeInput,
  RuntimeKind,
  StartSessionInput,
  DrainInput,
  StopInput,
  VerifyInput,
} from '../domain/schemas';
import type { VerificationResult } from '../domain/schemas';
import type {
  BranchTip,
  FailureInfo,
  ForkOrigin,
  HostAttachment,
  RejectedSignal,
  RuntimeInstanceRef,
  RuntimeReport,
  TimelineEntry,
} from '../domain/records';
import { DEFAULT_TENANT } from '../domain/names';
import type { Phase } from '../domain/session-state';

/**
 * Every message of the session workflow, defined once for the workflow and every client.
 * The string names are the wire API (Web UI, `temporal` CLI, other languages): never rename them.
 */

export const DEFAULT_TASK_QUEUE = 'durable-sessions';

/**
 * A session within its tenant: the id alone in the `default` tenant (as before tenants existed), `<id>@<tenant>` in
 * any other. Neither a session id nor a tenant contains "@", so two tenants' sessions never share a key.
 */
export function sessionKey(sessionId: string, tenant: string = DEFAULT_TENANT): string {
  return tenant === DEFAULT_TENANT ? sessionId : `${sessionId}@${tenant}`;
}

/** The session id and tenant of a session key. */
export function parseSessionKey(key: string): { sessionId: string; tenant: string } {
  const at = key.indexOf('@');
  return at < 0
    ? { sessionId: key, tenant: DEFAULT_TENANT }
    : { sessionId: key.slice(0, at), tenant: key.slice(at + 1) };
}

/**
 * One workflow per session; its id is derived from the session key so callers can address it: `session-<id>` in the
 * `default` tenant, `session-<id>@<tenant>` in another.
 */
export function sessionWorkflowId(sessionId: string, tenant?: string): string {
  return keyWorkflowId(sessionKey(sessionId, tenant));
}

/**
 * A session's static details on its Web UI page: its description, then its spec with the secrets left out (`env`
 * values, seed file contents, initial state and seed messages are named and sized, never shown).
 */
export function sessionDetails(spec: StartSessionInput): string {
  const { runtime } = spec;
  const bytes = (text: string) => `${new TextEncoder().encode(text).length} B`;
  const lines = [`runtime: ${runtime.kind}`];
  if (runtime.kind === 'workspace' || runtime.kind === 'remote') {
    lines.push(`command: \`${runtime.command.join(' ')}\``);
    const env = Object.keys(runtime.env ?? {});
    if (env.length) lines.push(`env: ${env.map((name) => `${name}=•••`).join(', ')}`);
    const files = Object.entries(runtime.files ?? {});
    if (files.length) lines.push(`seed files: ${files.map(([name, text]) => `${name} (${bytes(text)})`).join(', ')}`);
  } else if (runtime.kind === 'memory' && runtime.initialState !== undefined) {
    lines.push(`initial state: ${bytes(runtime.initialState)}`);
  } else if (runtime.kind === 'conversation' && runtime.messages?.length) {
    lines.push(`seed messages: ${runtime.messages.length}`);
  }
  if (spec.labels?.length) lines.push(`labels: ${spec.labels.join(', ')}`);
  if (spec.policies) lines.push(`policies: \`${JSON.stringify(spec.policies)}\``);
  if (spec.retention) lines.push(`retention: \`${JSON.stringify(spec.retention)}\``);
  return [...(spec.description ? [spec.description] : []), lines.join('\n\n')].join('\n\n---\n\n');
}

/**
 * The one line the Web UI's list and a session's page show for it: `workspace · build-42 · tenant acme · fork of
 * build-41` (the tenant outside `default`, the source of a fork).
 */
export function sessionSummary(
  spec: { sessionId: string; tenant?: string; runtime: { kind: string } },
  forkOf?: string,
): string {
  const tenant = spec.tenant ?? DEFAULT_TENANT;
  return [
    spec.runtime.kind,
    spec.sessionId,
    ...(tenant === DEFAULT_TENANT ? [] : [`tenant ${tenant}`]),
    ...(forkOf ? [`fork of ${forkOf}`] : []),
  ].join(' · ');
}

/** The workflow id of a session key. */
export function keyWorkflowId(key: string): string {
  return `session-${key}`;
}

/**
 * A host's liveness (its monitor's lease, the question whether it is still there, and the watchers of sessions that
 * predate the monitor) runs on a queue of its own beside the host's, so that it never waits behind the host's
 * controls (capture, stop), however busy the host is.
 */
export function watchTaskQueue(hostTaskQueue: string): string {
  return `${hostTaskQueue}/watch`;
}

/** One monitor workflow per worker host: it holds the host's one liveness lease and watches its sessions' instances. */
export function hostWorkflowId(hostTaskQueue: string): string {
  return `host-${hostTaskQueue}`;
}

/** Sent by a session to its host's monitor once its instance runs there. */
export const attachRuntimeSignal = defineSignal<[HostAttachment]>('attachRuntime');
/** Sent by a worker as it starts: a new incarnation of the host, whose predecessor's instances are gone. */
export const hostStartedSignal = defineSignal<[{ incarnation: string }]>('hostStarted');
/** Sent by a host's monitor to a session: its instance ended, or its host is lost. */
export const runtimeReportSignal = defineSignal<[RuntimeReport]>('runtimeReport');

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

export type { FailureInfo, RejectedSignal, RuntimeInstanceRef, TimelineEntry, VerificationResult };
export type { SessionWorkflowInput } from '../domain/records';

/** One phase a session went through: its number within the run, the phase and when it began. */
export interface PhaseChange {
  n: number;
  phase: Phase;
  at: string;
}

export interface SessionStatus {
  sessionId: string;
  /** Set for a session of another tenant than `default`. */
  tenant?: string;
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
  /** The newest fire-and-forget control that could not be applied (signals have no caller to tell). */
  lastRejectedSignal: RejectedSignal | null;
  /** The newest refused signals (at most ten), oldest first; each is in the timeline too. */
  rejectedSignals: RejectedSignal[];
  startedAt: string;
  updatedAt: string;
  /**
   * The phases this run went through, newest last (at most 16), numbered from the run's start: the gateway's event
   * stream sends each of them, not only those it happened to read. Absent from workers that predate it.
   */
  recentPhases?: PhaseChange[];
  /** The head's timeline index (null without a head, or for a head from before indices). */
  headIndex: number | null;
  /** Entries in the timeline so far: the newest index. */
  timelineLength: number;
  /** The branch the session is on (0 is its first; each rewind starts another), and the newest branches' tips. */
  branch: number;
  tips: BranchTip[];
  /** Runs of the session's workflow so far (continue-as-new starts another). */
  runs: number;
  policies: SessionPolicies;
  retention: RetentionPolicy | null;
  /** Where this session was forked from, and the newest forks made from it (`forkCount` counts them all). */
  forkedFrom: ForkOrigin | null;
  forks: { sessionId: string; checkpointId: string; at: string }[];
  forkCount: number;
  /** The newest activity the session knows of (runtime activity seen by a policy check, a `touch`, a control). */
  lastActivityAt: string;
  /** Conversation runtime: messages the session holds. */
  messageCount?: number;
}

export interface RewindResult {
  /** The checkpoint whose state the session now has (running, or on resume when it was paused). */
  restoredFrom: CheckpointRef;
  /** The checkpoint taken of a running session before it went back (trigger `rewind-safety`). */
  safetyCheckpoint: CheckpointRef | null;
  /** The new branch, which starts at `restoredFrom`. */
  branch: number;
  /** The new runtime instance; null for a paused session (it restores on resume). */
  runtime: RuntimeInstanceRef | null;
}

export interface ForkResult {
  /** The checkpoint the forks start from. */
  from: CheckpointRef;
  /** Each new session and its first checkpoint (in the new session's timeline, index 2). */
  forks: { sessionId: string; checkpoint: CheckpointRef }[];
}

/**
 * Answers once the session has started: its status when running, or the typed failure that ended the start. Sent
 * with the start (update-with-start), so a caller learns in one call whether its session runs. Its argument is the
 * start spec; a different spec under a session id that is in use is refused (SessionAlreadyExists).
 */
export const startUpdate = defineUpdate<SessionStatus, [StartSessionInput]>('start');
export const checkpointUpdate = defineUpdate<CheckpointRef, [CheckpointInput]>('checkpoint');
export const pauseUpdate = defineUpdate<CheckpointRef, [PauseInput]>('pause');
export const resumeUpdate = defineUpdate<ResumeResult, [ResumeInput]>('resume');
export const stopUpdate = defineUpdate<StopResult, [StopInput]>('stop');
/** Reads checkpoints back from the store on a worker (every chunk authenticated); changes nothing but the record. */
export const verifyUpdate = defineUpdate<VerificationResult[], [VerifyInput]>('verify');

/** Goes back to a checkpoint in place (same session): a new branch starts there; later checkpoints are kept. */
export const rewindUpdate = defineUpdate<RewindResult, [RewindInput]>('rewind');
/** New independent sessions whose first state is a checkpoint of this one; this one is unchanged. */
export const forkUpdate = defineUpdate<ForkResult, [ForkInput]>('fork');
/** A fork of the current state (a running session is checkpointed first). */
export const branchUpdate = defineUpdate<ForkResult, [BranchInput]>('branch');
/** Replaces the session's policies and/or retention; returns the status with them. */
export const configureUpdate = defineUpdate<SessionStatus, [ConfigureInput]>('configure');
/** The session is in use: its idle timer starts again. */
export const touchUpdate = defineUpdate<{ lastActivityAt: string }, [TouchInput]>('touch');

export interface AppendResult {
  /** Messages the conversation holds now, and the index the first appended one got. */
  messageCount: number;
  firstIndex: number;
  /** The checkpoint taken after the append (trigger `turn`), when one was asked for. */
  checkpoint: CheckpointRef | null;
}

/** Conversation runtime: appends messages, optionally checkpointing after them (trigger `turn`). */
export const appendUpdate = defineUpdate<AppendResult, [AppendInput]>('append');
/** Conversation runtime: a fork from just before the last assistant turn; the replaced turn is marked `regenerated`. */
export const regenerateUpdate = defineUpdate<ForkResult, [RegenerateInput]>('regenerate');

/** Fire-and-forget twins of the updates: same inputs, no result, rejections show in `status`. */
export const checkpointSignal = defineSignal<[CheckpointInput]>('requestCheckpoint');
export const pauseSignal = defineSignal<[PauseInput]>('requestPause');
export const resumeSignal = defineSignal<[ResumeInput]>('requestResume');
export const stopSignal = defineSignal<[StopInput]>('requestStop');
export const configureSignal = defineSignal<[ConfigureInput]>('requestConfigure');
export const touchSignal = defineSignal<[TouchInput]>('touch');
export const appendSignal = defineSignal<[AppendInput]>('requestAppend');

export interface DrainResult {
  /** Whether the session's runtime was stopped on the draining host (after a checkpoint, when one could be taken). */
  drained: boolean;
  /** The checkpoint the session resumes from elsewhere. */
  checkpoint: CheckpointRef | null;
  /** Why nothing was done (the session was not running there) or why no checkpoint was taken. */
  detail?: string;
}

/**
 * Sent by a worker that shuts down to each session it hosts: the session checkpoints (trigger `drain`), stops its
 * runtime there, and answers; then it is restored on another worker, or on the next one that starts.
 */
export const drainUpdate = defineUpdate<DrainResult, [DrainInput]>('drain');

export const statusQuery = defineQuery<SessionStatus>('status');
/** The recent window of the timeline (and what is not yet in the store), oldest first; the rest is in the store. */
export const timelineQuery = defineQuery<TimelineEntry[]>('timeline');
