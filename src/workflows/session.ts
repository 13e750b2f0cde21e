import type { SearchAttributeUpdatePair } from '@temporalio/common';
import { log, patched, setCurrentDetails, upsertSearchAttributes, uuid4, workflowInfo } from '@temporalio/workflow';
import {
  sessionWorkflowId,
  type PhaseChange,
  type RuntimeInstanceRef,
  type SessionStatus,
  type TimelineEntry,
} from '../api/messages';
import {
  checkpointCountKey,
  failureCodeKey,
  headCheckpointKey,
  lastCheckpointAtKey,
  sessionHostKey,
  sessionRuntimeKey,
  sessionStateKey,
  sessionTenantKey,
} from '../api/search-attributes';
import { isDefaultTenant } from '../domain/names';
import { ERROR_CODES, type ErrorCode } from '../domain/error-codes';
import {
  WINDOW,
  type CarriedState,
  type RejectedSignal,
  type RunControlState,
  type RuntimeExitDetails,
  type SessionWorkflowInput,
} from '../domain/records';
import { foldTimeline } from '../domain/timeline';
import { describeSession, type PendingWork } from '../domain/operator-view';
import { summarize, type Message } from '../domain/conversation';
import { RUNTIME_PLACEMENT, StartSessionInput, type CheckpointRef, type VerificationResult } from '../domain/schemas';
import { isFinal, transition, type Control, type Phase, type SessionEvent } from '../domain/session-state';
import { failure, failureMessage, invalidTransition, typeOf } from './failures';
import { parse } from './inputs';
import { LEAN_PATCH, POLICY_CLOCK_PATCH, PROGRESS_ATTRIBUTES_PATCH, retiredPatch } from './patches';

/** Everything a run hands to the next one at continue-as-new. */
export type SessionState = CarriedState & { rejectedSignals: RejectedSignal[]; runControl: RunControlState };

/** Refused signals kept in status (each is in the timeline as well). */
const MAX_REJECTED_SIGNALS = 10;

/** Phase changes a status shows (a reader polling every 250 ms misses none unless 16 come between two reads). */
const MAX_PHASE_CHANGES = 16;

/**
 * The session as this run holds it: the state it carries, the phase transitions (all but a refused id claim, which
 * fails the run before anything is published), and what it shows of itself (search attributes, Web UI details,
 * status, timeline). The runtime reference and the failure are also set by restore, recovery and the controller.
 */
export class Session {
  /** The phase last published as a search attribute (a new run publishes its own). */
  private published: Phase | undefined;
  /** The progress attributes last published, as JSON (a new run publishes its own). */
  private publishedProgress: string | undefined;
  /** What the control queue holds, for the Web UI's details (the queue sets it as it is made). */
  pendingOperations: () => PendingWork['operations'] = () => [];
  /** Why a stop was asked for: the current details say it even when no final checkpoint recorded it. */
  stopReason: string | undefined;
  /**
   * The phases this run went through, newest last, numbered from its start: a reader that polls the status sees each
   * one, not only those it happened to catch. Memory only (a query, never a command): a replay rebuilds it.
   */
  private readonly phases: PhaseChange[];

  constructor(readonly state: SessionState) {
    this.phases = [{ n: 0, phase: state.phase, at: state.updatedAt }];
  }

  get id(): string {
    return this.state.spec.sessionId;
  }

  /** What every activity input of a session of another tenant than `default` names, so it finds its store. */
  get tenancy(): { tenant?: string } {
    const { tenant } = this.state.spec;
    return isDefaultTenant(tenant) ? {} : { tenant };
  }

  apply(event: SessionEvent): void {
    const { state } = this;
    const result = transition(state.phase, event);
    if (!result.ok) throw invalidTransition(result.reason);
    const before = state.phase;
    state.phase = result.phase;
    if (result.phase === 'failed' && !state.failure) {
      state.failure = { type: ERROR_CODES.RuntimeFailed, message: result.failureReason ?? 'failed', at: now() };
    }
    this.touch();
    if (result.phase !== before) {
      this.phases.push({ n: this.phases.at(-1)!.n + 1, phase: result.phase, at: state.updatedAt });
      if (this.phases.length > MAX_PHASE_CHANGES) this.phases.shift();
    }
  }

  fail(type: ErrorCode, message: string, details?: RuntimeExitDetails): void {
    if (isFinal(this.state.phase)) return;
    // Set first, so that what apply() publishes (status, Web UI details) names the real failure.
    this.state.failure = { type, message, at: now(), ...details };
    this.apply({ type: 'failed', reason: message });
  }

  touch(): void {
    const { state } = this;
    state.updatedAt = now();
    const updates: SearchAttributeUpdatePair[] = [];
    // The patch is asked only when the phase is unchanged: recorded histories have its marker exactly there.
    if (this.published !== state.phase || !retiredPatch(LEAN_PATCH)) {
      const { tenant } = this.tenancy;
      updates.push(
        { key: sessionStateKey, value: state.phase },
        { key: sessionRuntimeKey, value: state.spec.runtime.kind },
        // A raw start may not have set it; `default` sessions are found without it (and their histories unchanged).
        ...(tenant ? [{ key: sessionTenantKey, value: tenant }] : []),
      );
      this.published = state.phase;
    }
    updates.push(...this.progressUpdates());
    // One upsert for all that changed: one command and one event, not one per kind of attribute.
    if (updates.length > 0) upsertSearchAttributes(updates);
    this.publishDetails();
  }

  /** The Web UI's current details follow every change; setting them is no command, so histories are unchanged. */
  publishDetails(): void {
    setCurrentDetails(this.describe());
  }

  /**
   * Host, checkpoint count, head, last checkpoint and failure code as search attributes, when one of them changed.
   * The patch is asked only then, as with LEAN_PATCH: histories recorded before it have no such upsert anywhere.
   */
  private progressUpdates(): SearchAttributeUpdatePair[] {
    const { state } = this;
    const rc = state.runControl;
    const values = {
      host: state.runtime?.hostTaskQueue ?? null,
      count: rc.checkpointCount,
      head: state.head?.checkpointId ?? null,
      at: rc.lastCheckpointAt,
      failure: state.failure?.type ?? null,
    };
    const json = JSON.stringify(values);
    if (json === this.publishedProgress || !patched(PROGRESS_ATTRIBUTES_PATCH)) return [];
    this.publishedProgress = json;
    return [
      { key: sessionHostKey, value: values.host },
      { key: checkpointCountKey, value: values.count },
      { key: headCheckpointKey, value: values.head },
      { key: lastCheckpointAtKey, value: values.at === null ? null : new Date(values.at) },
      { key: failureCodeKey, value: values.failure },
    ];
  }

  get runControl(): RunControlState {
    return this.state.runControl;
  }

  /**
   * Gives the entry the next stable index and the current branch, keeps it in the recent window, and queues it for
   * the store's timeline. Returns the entry as recorded.
   */
  record(entry: TimelineEntry): TimelineEntry {
    const rc = this.state.runControl;
    const recorded = { ...entry, index: rc.nextIndex, branch: rc.branch } as TimelineEntry;
    rc.nextIndex++;
    const { timeline } = this.state;
    timeline.push(recorded);
    if (timeline.length > WINDOW.timeline) timeline.splice(0, timeline.length - WINDOW.timeline);
    rc.unflushed.push(recorded);
    this.publishDetails();
    return recorded;
  }

  /** These entries are in the store's timeline now. */
  flushed(entries: readonly TimelineEntry[]): void {
    if (entries.length === 0) return;
    const done = new Set(entries.map((e) => e.index));
    const rc = this.state.runControl;
    rc.unflushed = rc.unflushed.filter((e) => !done.has(e.index));
  }

  /** The recent window with what is not yet in the store, each checkpoint marked with what later entries say. */
  recentTimeline(): TimelineEntry[] {
    const { timeline } = this.state;
    const first = timeline[0]?.index ?? Infinity;
    const older = this.state.runControl.unflushed.filter((e) => (e.index ?? 0) < first);
    return foldTimeline([...older, ...timeline]);
  }

  /** A new checkpoint: head and tip of the current branch, in the window of checkpoints the state keeps. */
  addCheckpoint(ref: CheckpointRef): void {
    const { state } = this;
    const rc = state.runControl;
    state.checkpoints.push(ref);
    state.head = ref;
    rc.checkpointCount++;
    rc.lastCheckpointAt = patched(POLICY_CLOCK_PATCH) ? now() : ref.createdAt;
    this.setTip(rc.branch, ref.checkpointId);
    this.trimCheckpoints();
  }

  /**
   * Conversation runtime: the session now holds the messages of `ref` (a rewind, a fallback, a fork's first state).
   * Results after its cut are gone, so the cuts they made unsafe are safe again.
   */
  restoredTo(ref: CheckpointRef): void {
    const rc = this.state.runControl;
    const n = ref.messageCount;
    if (rc.messageCount === undefined || n === undefined) return;
    rc.messageCount = n;
    rc.unsafeCuts = (rc.unsafeCuts ?? []).filter((span) => span.to < n);
    rc.turnStarts = (rc.turnStarts ?? []).filter((start) => start < n);
  }

  setTip(branch: number, checkpointId: string | null): void {
    const { tips } = this.state.runControl;
    const existing = tips.find((t) => t.branch === branch);
    if (existing) existing.checkpointId = checkpointId;
    else tips.push({ branch, checkpointId });
    if (tips.length > WINDOW.tips) tips.splice(0, tips.length - WINDOW.tips);
  }

  /** Beyond the window, the oldest checkpoints leave the state (not the store): the head and branch tips stay. */
  private trimCheckpoints(): void {
    const { state } = this;
    const keep = new Set([state.head?.checkpointId, ...state.runControl.tips.map((t) => t.checkpointId)]);
    while (state.checkpoints.length > WINDOW.checkpoints) {
      const i = state.checkpoints.findIndex((c) => !keep.has(c.checkpointId));
      if (i < 0) break;
      state.checkpoints.splice(i, 1);
    }
  }

  /** Every refused signal is kept: the newest few in status, each one in the timeline. */
  rejectSignal(signal: string, err: unknown): void {
    const { state } = this;
    const reason = err instanceof Error ? err.message : String(err);
    log.warn('signal rejected', { signal, reason });
    const rejected = { signal: signal.slice(0, 300), reason, at: now() };
    state.lastRejectedSignal = rejected;
    state.rejectedSignals.push(rejected);
    if (state.rejectedSignals.length > MAX_REJECTED_SIGNALS) state.rejectedSignals.shift();
    this.record({ kind: 'signal-rejected', ...rejected });
  }

  /** A control that failed is recorded where an operator looks (the timeline), not only told to its caller. */
  controlFailed(control: Control | 'drain', err: unknown): void {
    this.record({
      kind: 'control-failed',
      at: now(),
      control,
      type: typeOf(err) ?? ERROR_CODES.RuntimeFailed,
      reason: failureMessage(err),
    });
  }

  /** The same spec again is a harmless repeat; another spec under a session id in use is refused. */
  checkSameSpec(spec: unknown): void {
    const asked = parse(StartSessionInput, spec);
    if (!sameJson(asked, this.state.spec)) {
      throw failure(
        ERROR_CODES.SessionAlreadyExists,
        `session ${this.id} exists with another spec: session ids are never reused`,
      );
    }
  }

  /** A resume or verify may name only a checkpoint the session has. */
  checkKnownCheckpoint(checkpointId: string | undefined): void {
    if (checkpointId !== undefined && !this.state.checkpoints.some((c) => c.checkpointId === checkpointId)) {
      throw failure(ERROR_CODES.SnapshotNotFound, `session ${this.id} has no checkpoint ${checkpointId}`);
    }
  }

  requireRuntime(): RuntimeInstanceRef {
    if (!this.state.runtime) throw failure(ERROR_CODES.RuntimeLost, `session ${this.id} has no running runtime`);
    return this.state.runtime;
  }

  /**
   * The fence of a start or restore: the session's generation, for runtimes placed `anywhere` (their host refuses a
   * worker the session moved past); nothing for the others, whose instances end with their worker.
   */
  get fencing(): { fence?: number } {
    return RUNTIME_PLACEMENT[this.state.spec.runtime.kind] === 'anywhere' ? { fence: this.state.generation ?? 1 } : {};
  }

  /** Another worker takes the runtime over: the generation grows, and the worker before is fenced off. */
  nextGeneration(): number {
    this.state.generation = (this.state.generation ?? 1) + 1;
    return this.state.generation;
  }

  /**
   * The instance ids of one start or restore, one per placement it takes. A host's instance ends with its worker, so
   * each placement makes a new one. One on a host of its own outlives a worker that died while making it: every
   * placement names the same id, so the next worker adopts what the first made (or what its host discarded is made
   * again), never a second copy beside it.
   */
  instanceIdsOfAttempts(): () => string {
    if (RUNTIME_PLACEMENT[this.state.spec.runtime.kind] !== 'anywhere') return () => this.newInstanceId();
    const id = this.newInstanceId();
    return () => id;
  }

  newInstanceId(): string {
    return `${this.id}-${uuid4().slice(0, 8)}`;
  }

  status(pendingControls: number): SessionStatus {
    const { state } = this;
    return {
      sessionId: this.id,
      ...this.tenancy,
      phase: state.phase,
      runtimeKind: state.spec.runtime.kind,
      runtime: state.runtime,
      head: state.head,
      checkpointCount: state.runControl.checkpointCount,
      pendingControls,
      failure: state.failure,
      lastRestore: state.lastRestore,
      lastRejectedSignal: state.lastRejectedSignal,
      rejectedSignals: state.rejectedSignals,
      lastVerification: this.lastVerification(),
      startedAt: state.startedAt,
      updatedAt: state.updatedAt,
      recentPhases: [...this.phases],
      ...this.runControlStatus(),
    };
  }

  private runControlStatus() {
    const rc = this.state.runControl;
    return {
      headIndex: this.state.head?.index ?? null,
      timelineLength: rc.nextIndex - 1,
      branch: rc.branch,
      tips: rc.tips,
      runs: rc.runs,
      policies: rc.policies,
      retention: rc.retention ?? null,
      forkedFrom: rc.forkedFrom,
      forks: rc.forks,
      forkCount: rc.forkCount,
      lastActivityAt: rc.lastActivityAt,
      ...(rc.messageCount !== undefined ? { messageCount: rc.messageCount } : {}),
    };
  }

  /** The newest verification of a checkpoint, whatever it found. */
  lastVerification(): VerificationResult | null {
    return this.state.runControl.lastVerification;
  }

  /** Markdown shown as "current details" in the Web UI. */
  describe(): string {
    const { state } = this;
    return describeSession({
      state,
      pending: {
        operations: this.pendingOperations(),
        waitingSignals: (state.runControl.deferredSignals ?? []).map((s) => s.signal),
      },
      lastVerification: this.lastVerification(),
      ...(this.stopReason ? { stopReason: this.stopReason } : {}),
    });
  }
}

/** The state a previous run handed over, or a new session's. */
export function stateOf(input: SessionWorkflowInput): SessionState {
  if (input.carried) return carriedState(input);
  const state = initialState(input.spec);
  if (input.fork) startsAsFork(state, input.fork);
  return state;
}

/** A fork's first state: paused at the checkpoint it was forked at, which is its first timeline entry but one. */
export function startsAsFork(state: SessionState, fork: NonNullable<SessionWorkflowInput['fork']>): void {
  const rc = state.runControl;
  rc.forkedFrom = fork.from;
  if (fork.conversation && fork.checkpoint.messageCount !== undefined) {
    rc.messageCount = fork.checkpoint.messageCount;
    rc.unsafeCuts = fork.conversation.unsafeCuts;
    rc.turnStarts = fork.conversation.turnStarts;
  }
  state.phase = 'paused';
  rc.pausedAt = state.startedAt;
  const at = state.startedAt;
  const entries: TimelineEntry[] = [
    { kind: 'forked-from', index: 1, branch: 0, at, from: fork.from },
    {
      kind: 'checkpoint',
      index: 2,
      branch: 0,
      at,
      checkpoint: { ...fork.checkpoint, index: 2, branch: 0 },
      durability: 'durable',
    },
  ];
  state.timeline.push(...entries);
  rc.unflushed.push(...entries);
  rc.nextIndex = 3;
  const ref = { ...fork.checkpoint, index: 2, branch: 0 };
  state.checkpoints.push(ref);
  state.head = ref;
  state.nextSequence = ref.sequence + 1;
  rc.checkpointCount = 1;
  rc.lastCheckpointAt = patched(POLICY_CLOCK_PATCH) ? now() : ref.createdAt;
  rc.tips.push({ branch: 0, checkpointId: ref.checkpointId });
}

/** Clients find a session by its derived workflow id; a session run under another id is unreachable. */
function checkWorkflowId(spec: StartSessionInput): void {
  const expected = sessionWorkflowId(spec.sessionId, spec.tenant);
  if (workflowInfo().workflowId !== expected) {
    throw failure(ERROR_CODES.InvalidInput, `session ${spec.sessionId} must run as workflow ${expected}`);
  }
}

/** The state a previous run handed over: it must be this session's, under the spec it was started with. */
function carriedState(input: SessionWorkflowInput): SessionState {
  const carried = input.carried!;
  checkWorkflowId(carried.spec);
  if (!sameJson(carried.spec, input.spec)) {
    throw failure(ERROR_CODES.InvalidInput, 'the carried state belongs to another spec than the one given');
  }
  const state = { ...carried, rejectedSignals: carried.rejectedSignals ?? [] } as SessionState;
  state.runControl = carried.runControl
    ? { ...carried.runControl, runs: carried.runControl.runs + 1 }
    : upgraded(state);
  return state;
}

/**
 * State carried by a version before run control: its timeline gets indices in the order it was recorded (and goes to
 * the store at the next flush), its checkpoints the indices of their entries.
 */
function upgraded(state: SessionState): RunControlState {
  const rc = newRunControl(state.spec, state.updatedAt);
  state.timeline = state.timeline.map((e, i) => ({ ...e, index: i + 1, branch: 0 }));
  rc.unflushed = [...state.timeline];
  rc.nextIndex = state.timeline.length + 1;
  const indexOf = new Map(
    state.timeline.flatMap((e) => (e.kind === 'checkpoint' ? [[e.checkpoint.checkpointId, e.index!] as const] : [])),
  );
  const indexed = (c: CheckpointRef): CheckpointRef => {
    const index = indexOf.get(c.checkpointId);
    return index === undefined ? c : { ...c, index, branch: 0 };
  };
  state.checkpoints = state.checkpoints.map(indexed);
  if (state.head) state.head = indexed(state.head);
  rc.checkpointCount = state.checkpoints.length;
  rc.lastCheckpointAt = state.head?.createdAt ?? null;
  rc.tips = [{ branch: 0, checkpointId: state.head?.checkpointId ?? null }];
  rc.pausedAt = state.phase === 'paused' ? state.updatedAt : null;
  // Only the window stays in the state.
  if (state.timeline.length > WINDOW.timeline) state.timeline = state.timeline.slice(-WINDOW.timeline);
  rc.runs = 2;
  return rc;
}

function newRunControl(spec: StartSessionInput, at: string): RunControlState {
  return {
    nextIndex: 1,
    unflushed: [],
    branch: 0,
    nextBranch: 1,
    tips: [],
    checkpointCount: 0,
    runs: 1,
    policies: spec.policies ?? {},
    ...(spec.retention ? { retention: spec.retention } : {}),
    forkedFrom: null,
    forks: [],
    forkCount: 0,
    lastActivityAt: at,
    lastCheckpointAt: null,
    pausedAt: null,
    lastVerification: null,
    ...(spec.runtime.kind === 'conversation' ? conversationOf(spec.runtime.messages ?? []) : {}),
  };
}

/** What a conversation's seed messages give the state: their count, unsafe cuts and last assistant turn. */
function conversationOf(messages: readonly Message[]): Partial<RunControlState> {
  const summary = summarize(messages);
  return {
    messageCount: summary.messageCount,
    unsafeCuts: [...summary.unsafeCuts],
    turnStarts: turnStartsIn(messages, undefined, 0),
  };
}

/** Where assistant turns start among `messages` (the first at `firstIndex`; `previousRole` is the one before it). */
export function turnStartsIn(
  messages: readonly { role: string }[],
  previousRole: string | undefined,
  firstIndex: number,
) {
  const starts: number[] = [];
  let last = previousRole;
  for (const [i, m] of messages.entries()) {
    if (m.role === 'assistant' && last !== 'assistant' && last !== 'tool') starts.push(firstIndex + i);
    last = m.role;
  }
  return starts;
}

function initialState(spec: StartSessionInput): SessionState {
  checkWorkflowId(spec);
  const at = now();
  return {
    spec,
    phase: 'starting',
    runtime: null,
    head: null,
    checkpoints: [],
    timeline: [],
    nextSequence: 1,
    failure: null,
    lastRestore: null,
    lastRejectedSignal: null,
    rejectedSignals: [],
    results: [],
    startedAt: at,
    updatedAt: at,
    runControl: newRunControl(spec, at),
  };
}

/** Specs are compared as the JSON they travel as (the workflow sandbox has no deep-equal). */
function sameJson(a: unknown, b: unknown): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}

export function now(): string {
  return new Date().toISOString();
}
