import { log, patched, setCurrentDetails, upsertSearchAttributes, uuid4, workflowInfo } from '@temporalio/workflow';
import { sessionWorkflowId, type RuntimeInstanceRef, type SessionStatus, type TimelineEntry } from '../api/messages';
import { sessionRuntimeKey, sessionStateKey } from '../api/search-attributes';
import { ERROR_CODES, type ErrorCode } from '../domain/error-codes';
import type { CarriedState, RejectedSignal, SessionWorkflowInput } from '../domain/records';
import { StartSessionInput, type VerificationResult } from '../domain/schemas';
import { isFinal, transition, type Control, type Phase, type SessionEvent } from '../domain/session-state';
import { failure, failureMessage, invalidTransition, typeOf } from './failures';
import { parse } from './inputs';
import { LEAN_PATCH } from './patches';

/** Everything a run hands to the next one at continue-as-new. */
export type SessionState = CarriedState & { rejectedSignals: RejectedSignal[] };

/** Refused signals kept in status (each is in the timeline as well). */
const MAX_REJECTED_SIGNALS = 10;

/**
 * The session as this run holds it: the state it carries, the phase transitions (all but a refused id claim, which
 * fails the run before anything is published), and what it shows of itself (search attributes, Web UI details,
 * status, timeline). The runtime reference and the failure are also set by restore, recovery and the controller.
 */
export class Session {
  /** The phase last published as a search attribute (a new run publishes its own). */
  private published: Phase | undefined;

  constructor(readonly state: SessionState) {}

  get id(): string {
    return this.state.spec.sessionId;
  }

  apply(event: SessionEvent): void {
    const { state } = this;
    const result = transition(state.phase, event);
    if (!result.ok) throw invalidTransition(result.reason);
    state.phase = result.phase;
    if (result.phase === 'failed' && !state.failure) {
      state.failure = { type: ERROR_CODES.RuntimeFailed, message: result.failureReason ?? 'failed', at: now() };
    }
    this.touch();
  }

  fail(type: ErrorCode, message: string): void {
    if (isFinal(this.state.phase)) return;
    // Set first, so that what apply() publishes (status, Web UI details) names the real failure.
    this.state.failure = { type, message, at: now() };
    this.apply({ type: 'failed', reason: message });
  }

  touch(): void {
    const { state } = this;
    state.updatedAt = now();
    // The patch is asked only when the phase is unchanged: recorded histories have its marker exactly there.
    if (this.published !== state.phase || !patched(LEAN_PATCH)) {
      upsertSearchAttributes([
        { key: sessionStateKey, value: state.phase },
        { key: sessionRuntimeKey, value: state.spec.runtime.kind },
      ]);
      this.published = state.phase;
    }
    setCurrentDetails(this.describe());
  }

  record(entry: TimelineEntry): void {
    this.state.timeline.push(entry);
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

  newInstanceId(): string {
    return `${this.id}-${uuid4().slice(0, 8)}`;
  }

  status(pendingControls: number): SessionStatus {
    const { state } = this;
    return {
      sessionId: this.id,
      phase: state.phase,
      runtimeKind: state.spec.runtime.kind,
      runtime: state.runtime,
      head: state.head,
      checkpointCount: state.checkpoints.length,
      pendingControls,
      failure: state.failure,
      lastRestore: state.lastRestore,
      lastRejectedSignal: state.lastRejectedSignal,
      rejectedSignals: state.rejectedSignals,
      lastVerification: this.lastVerification(),
      startedAt: state.startedAt,
      updatedAt: state.updatedAt,
    };
  }

  /** The newest `verified` entry of the timeline, as a result. */
  lastVerification(): VerificationResult | null {
    const { timeline } = this.state;
    for (let i = timeline.length - 1; i >= 0; i--) {
      const entry = timeline[i]!;
      if (entry.kind === 'verified') {
        const { checkpointId, status, detail, at } = entry;
        return { checkpointId, status, ...(detail !== undefined ? { detail } : {}), at };
      }
    }
    return null;
  }

  /** Markdown shown as "current details" in the Web UI. */
  describe(): string {
    const { state } = this;
    const lines = [
      `**${state.phase}** · ${state.spec.runtime.kind} runtime · ${state.checkpoints.length} checkpoint(s)`,
    ];
    if (state.head)
      lines.push(`head: \`${state.head.checkpointId}\` (${state.head.size} bytes, ${state.head.createdAt})`);
    if (state.runtime) lines.push(`runtime: \`${state.runtime.instanceId}\` on \`${state.runtime.hostTaskQueue}\``);
    if (state.failure) lines.push(`failure: ${state.failure.type}: ${state.failure.message}`);
    const verified = this.lastVerification();
    if (verified) lines.push(`last verification: \`${verified.checkpointId}\` ${verified.status} (${verified.at})`);
    return lines.join('\n\n');
  }
}

/** The state a previous run handed over, or a new session's. */
export function stateOf(input: SessionWorkflowInput): SessionState {
  return input.carried ? carriedState(input) : initialState(input.spec);
}

/** Clients find a session by its derived workflow id; a session run under another id is unreachable. */
function checkWorkflowId(spec: StartSessionInput): void {
  const expected = sessionWorkflowId(spec.sessionId);
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
  return { ...carried, rejectedSignals: carried.rejectedSignals ?? [] };
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
  };
}

/** Specs are compared as the JSON they travel as (the workflow sandbox has no deep-equal). */
function sameJson(a: unknown, b: unknown): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}

export function now(): string {
  return new Date().toISOString();
}
