import { ApplicationFailure, ParentClosePolicy, startChild, uuid4, workflowInfo } from '@temporalio/workflow';
import { WorkflowExecutionAlreadyStartedError } from '@temporalio/common';
import {
  sessionDetails,
  sessionSummary,
  sessionWorkflowId,
  type AppendResult,
  type ForkResult,
  type RewindResult,
  type RuntimeInstanceRef,
  type SessionStatus,
} from '../api/messages';
import { startSearchAttributes } from '../api/search-attributes';
import { ERROR_CODES } from '../domain/error-codes';
import { WINDOW, type SessionWorkflowInput, type TimelineEntry } from '../domain/records';
import { describeEntry, nearestIndex } from '../domain/timeline';
import {
  SessionId,
  StartSessionInput,
  type AppendInput,
  type BranchInput,
  type RegenerateInput,
  type CheckpointRef,
  type CheckpointSelector,
  type ConfigureInput,
  type ForkInput,
  type RewindInput,
} from '../domain/schemas';
import { safeCut } from '../domain/conversation';
import { forkSessionIds } from '../domain/names';
import { checkpointName, restoreSummary } from '../domain/operator-view';
import { local, onHost, onPlacedHost, shared, summarized } from './activity-proxies';
import type { ControlQueue } from './control-queue';
import { asFailure, failure, failureMessage, typeOf } from './failures';
import { parse } from './inputs';
import type { Recovery } from './recovery';
import { recorded, restoreFailed, restoreWithFallback } from './restore';
import { now, turnStartsIn, type Session } from './session';
import type { SessionController } from './session-controller';

/**
 * Rewind, fork, branch and configure: the verbs that move a session along its timeline or start new sessions from
 * it. They run in the ControlQueue like every control.
 */
export class RunControls {
  constructor(
    private readonly session: Session,
    private readonly queue: ControlQueue,
    private readonly recovery: Recovery,
    private readonly controller: SessionController,
  ) {}

  /**
   * Goes back to a checkpoint in place. A running session is checkpointed first (trigger `rewind-safety`) and its
   * runtime stopped before the target is restored (one instance at a time, never two); a target that cannot be
   * restored brings the safety checkpoint back instead. A paused session only moves its head: resume restores it.
   */
  async rewind(input: RewindInput): Promise<RewindResult> {
    const { session } = this;
    const { state } = session;
    const target = await this.resolve(input.to, input.messageIndex);
    if (state.phase === 'paused') {
      session.restoredTo(target);
      const branch = this.startBranch(target, null, input.reason);
      return { restoredFrom: target, safetyCheckpoint: null, branch, runtime: null };
    }
    session.apply({ type: 'rewindRequested' });
    let safety: CheckpointRef;
    try {
      safety = await this.controller.capture('rewind-safety', undefined, input.reason, 'rewind');
    } catch (err) {
      session.apply({ type: 'rewindFailed' });
      session.controlFailed('rewind', err);
      throw asFailure(err, 'rewind failed: the safety checkpoint could not be written, the session keeps running');
    }
    await this.controller.stopRuntime('rewind');
    try {
      const runtime = await this.restoreExactly(target);
      const branch = this.startBranch(target, safety, input.reason);
      session.apply({ type: 'rewindSucceeded' });
      return { restoredFrom: target, safetyCheckpoint: safety, branch, runtime };
    } catch (err) {
      session.controlFailed('rewind', err);
      // Back to where the session was: the safety checkpoint holds exactly that.
      const outcome = await restoreWithFallback(session, safety, 'recovery', (r) => this.recovery.watch(r));
      if (outcome.ok) session.apply({ type: 'rewindFailed' });
      else restoreFailed(session, outcome, 'recovery', 'rewindAborted');
      throw asFailure(err, `rewind to ${target.checkpointId} failed; the session is back at ${safety.checkpointId}`);
    }
  }

  /** Forks from a checkpoint (default: the head); a fork of a running session from its head forks its current state. */
  async fork(input: ForkInput): Promise<ForkResult> {
    const from =
      input.from === undefined && input.messageIndex === undefined
        ? await this.currentState(input.label)
        : await this.resolve(input.from, input.messageIndex);
    return this.forkFrom(from, input, false);
  }

  branch(input: BranchInput): Promise<ForkResult> {
    return this.fork(input);
  }

  async configure(input: ConfigureInput): Promise<SessionStatus> {
    const { session } = this;
    const rc = session.runControl;
    if (input.policies) rc.policies = input.policies;
    if (input.retention) rc.retention = input.retention;
    session.record({
      kind: 'configured',
      at: now(),
      ...(input.policies ? { policies: input.policies } : {}),
      ...(input.retention ? { retention: input.retention } : {}),
    });
    session.touch();
    return session.status(this.queue.pending);
  }

  /**
   * Starts `count` new sessions whose first checkpoint is `from`'s state: the store shares its chunks (no copy), and
   * each fork runs its own workflow, started here as a child that outlives this one (ParentClosePolicy ABANDON).
   */
  async forkFrom(from: CheckpointRef, input: BranchInput, regenerate: boolean, replaces?: string): Promise<ForkResult> {
    const { session } = this;
    const { state } = session;
    const ids = this.forkIds(input);
    const owner = `fork:${workflowInfo().runId}:${uuid4().slice(0, 8)}`;
    const specs = ids.map((sessionId) =>
      parse(StartSessionInput, { ...state.spec, ...input.overrides, sessionId } satisfies StartSessionInput),
    );
    const targets = ids.map((sessionId) => ({
      sessionId,
      checkpointId: `000001-${uuid4().slice(0, 8)}`,
      owner,
      ...(input.label ? { label: input.label } : {}),
    }));
    let refs: CheckpointRef[];
    try {
      const into = ids.length === 1 ? ids[0]! : `${ids.length} sessions`;
      refs = await summarized(`fork ${checkpointName(from.checkpointId)} into ${into}`, shared.forkSessions, {
        ...session.tenancy,
        source: { sessionId: session.id, checkpointId: from.checkpointId },
        targets,
      });
    } catch (err) {
      session.controlFailed(regenerate ? 'regenerate' : 'fork', err);
      throw asFailure(err, 'fork failed');
    }
    const origin = {
      sessionId: session.id,
      checkpointId: from.checkpointId,
      ...(from.index !== undefined ? { index: from.index } : {}),
    };
    // All children in one workflow task: n forks cost one round trip, not n.
    const started = await Promise.allSettled(
      specs.map((spec, i) =>
        startChild('sessionWorkflow', {
          workflowId: sessionWorkflowId(spec.sessionId, spec.tenant),
          args: [
            {
              spec,
              fork: {
                from: origin,
                checkpoint: {
                  ...refs[i]!,
                  ...(from.messageCount !== undefined ? { messageCount: from.messageCount } : {}),
                },
                claimOwner: owner,
                ...(input.paused ? { paused: true } : {}),
                ...this.conversationAt(from),
              },
            } satisfies SessionWorkflowInput,
          ],
          parentClosePolicy: ParentClosePolicy.ABANDON,
          workflowIdReusePolicy: 'REJECT_DUPLICATE',
          typedSearchAttributes: startSearchAttributes(spec, 'paused', {
            sessionId: session.id,
            checkpointId: from.checkpointId,
          }),
          staticSummary: sessionSummary(spec, session.id),
          staticDetails: sessionDetails(spec),
        }),
      ),
    );
    const refused = started.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (refused) {
      const err: unknown = refused.reason;
      const taken = err instanceof WorkflowExecutionAlreadyStartedError;
      session.controlFailed('fork', err);
      throw failure(
        taken ? ERROR_CODES.SessionAlreadyExists : (typeOf(err) ?? ERROR_CODES.RuntimeFailed),
        taken ? `a fork's session id exists already: ${failureMessage(err)}` : failureMessage(err),
      );
    }
    const forks = refs.map((checkpoint, i) => ({ sessionId: ids[i]!, checkpoint }));
    const rc = session.runControl;
    for (const f of forks) rc.forks.push({ sessionId: f.sessionId, checkpointId: from.checkpointId, at: now() });
    if (rc.forks.length > WINDOW.forks) rc.forks.splice(0, rc.forks.length - WINDOW.forks);
    rc.forkCount += forks.length;
    session.record({
      kind: 'forked',
      at: now(),
      checkpointId: from.checkpointId,
      ...(from.index !== undefined ? { checkpointIndex: from.index } : {}),
      forks: forks.map((f) => ({ sessionId: f.sessionId, checkpointId: f.checkpoint.checkpointId })),
      ...(regenerate ? { regenerate: true, ...(replaces ? { replaces } : {}) } : {}),
    });
    session.touch();
    return { from, forks };
  }

  /**
   * The checkpoint a selector names: from the checkpoints the state keeps, else from the store's timeline (an index or
   * id from long ago). An id or index the session never had, or whose checkpoint retention deleted, is SnapshotNotFound.
   */
  async resolve(selector: CheckpointSelector | undefined, messageIndex?: number): Promise<CheckpointRef> {
    const { session } = this;
    const { state } = session;
    if (messageIndex !== undefined) return this.atMessage(messageIndex);
    if (selector === undefined) {
      if (!state.head) throw failure(ERROR_CODES.SnapshotNotFound, `session ${session.id} has no checkpoint yet`);
      return state.head;
    }
    const matches = (c: CheckpointRef) =>
      typeof selector === 'number' ? c.index === selector : c.checkpointId === selector;
    const kept = state.checkpoints.find(matches);
    if (kept) return kept;
    const what = typeof selector === 'number' ? `index ${selector}` : `checkpoint ${selector}`;
    const recentTimeline = session.recentTimeline();
    const recent = recentTimeline.find((e) => e.index === selector);
    if (recent && recent.kind !== 'checkpoint') throw this.notACheckpoint(selector as number, recent, recentTimeline);
    const found = await summarized(`find ${what} in the store's timeline`, local.findCheckpoint, {
      sessionId: session.id,
      ...session.tenancy,
      ...(typeof selector === 'number' ? { index: selector } : { checkpointId: selector }),
    });
    if (!found) {
      const near = typeof selector === 'number' ? this.nearestCheckpoint(selector) : undefined;
      const hint = near === undefined ? '' : `; the nearest checkpoint is at index ${near}`;
      throw ApplicationFailure.create({
        type: ERROR_CODES.SnapshotNotFound,
        message: `session ${session.id} has no checkpoint at ${what}${hint}`,
        details: near === undefined ? [] : [{ nearest: near }],
        nonRetryable: true,
      });
    }
    return found;
  }

  /** The checkpoint index nearest `index` among the checkpoints the session keeps. */
  private nearestCheckpoint(index: number): number | undefined {
    return nearestIndex(
      this.session.state.checkpoints.flatMap((c) => (c.index === undefined ? [] : [c.index])),
      index,
    );
  }

  /**
   * A selector that names an entry which is not a checkpoint (a restore, a rewind…): InvalidInput saying what is there
   * and which checkpoint index is nearest (also in the issue's `params.nearest`, for programs).
   */
  private notACheckpoint(index: number, entry: TimelineEntry, recent: readonly TimelineEntry[]): ApplicationFailure {
    const { session } = this;
    const indexOf = (id: string) =>
      session.state.checkpoints.find((c) => c.checkpointId === id)?.index ??
      recent.find((e) => e.kind === 'checkpoint' && e.checkpoint.checkpointId === id)?.index;
    const near = this.nearestCheckpoint(index);
    const hint = near === undefined ? '' : `; the nearest checkpoint is at index ${near}`;
    const message = `index ${index} of session ${session.id} is ${describeEntry(entry, indexOf)}, not a checkpoint${hint}`;
    return ApplicationFailure.create({
      type: ERROR_CODES.InvalidInput,
      message,
      details: [[{ code: 'custom', path: [], message, params: { nearest: near ?? null, kind: entry.kind } }]],
      nonRetryable: true,
    });
  }

  /**
   * Conversation runtime: the checkpoint that holds exactly the first `messageIndex` messages. A cut that would split
   * a tool call from its result is refused (UnsafeMessageIndex, naming the nearest safe index), never moved silently.
   */
  private async atMessage(messageIndex: number): Promise<CheckpointRef> {
    const { session } = this;
    const rc = session.runControl;
    if (rc.messageCount === undefined) {
      throw failure(ERROR_CODES.InvalidInput, `messageIndex needs a conversation session; ${session.id} is not one`);
    }
    const cut = safeCut({ messageCount: rc.messageCount, unsafeCuts: rc.unsafeCuts ?? [] }, messageIndex);
    if (!cut.ok) {
      throw ApplicationFailure.create({
        type: ERROR_CODES.UnsafeMessageIndex,
        message: `${cut.reason}; the nearest safe index is ${cut.nearestSafe}`,
        details: [{ nearestSafe: cut.nearestSafe, ...(cut.callId ? { callId: cut.callId } : {}) }],
        nonRetryable: true,
      });
    }
    const recent = session
      .recentTimeline()
      .flatMap((e) => (e.kind === 'checkpoint' && e.messageIndex === messageIndex ? [e.checkpoint] : []));
    const inState = recent
      .reverse()
      .find((c) => session.state.checkpoints.some((k) => k.checkpointId === c.checkpointId));
    if (inState) return inState;
    const found = await summarized(
      `find the checkpoint after ${messageIndex} messages in the store's timeline`,
      local.findCheckpoint,
      { sessionId: session.id, ...session.tenancy, messageIndex },
    );
    if (found) return found;
    throw failure(
      ERROR_CODES.SnapshotNotFound,
      `session ${session.id} has no checkpoint after exactly ${messageIndex} messages (append with "checkpoint": true makes one per turn)`,
    );
  }

  /** Conversation runtime: appends messages where the runtime is, then checkpoints them when asked (trigger `turn`). */
  async append(input: AppendInput): Promise<AppendResult> {
    const { session } = this;
    const { state } = session;
    const rc = state.runControl;
    const runtime = session.requireRuntime();
    let result;
    try {
      const host = onHost(runtime.hostTaskQueue, state.spec.liveness);
      result = await summarized(`append ${input.messages.length} message(s)`, host.appendMessages, {
        instance: runtime,
        messages: input.messages,
        ...(rc.messageCount !== undefined ? { at: rc.messageCount } : {}),
      });
    } catch (err) {
      session.controlFailed('append', err);
      throw asFailure(err, 'append failed');
    }
    rc.messageCount = result.messageCount;
    rc.unsafeCuts = [...(rc.unsafeCuts ?? []), ...result.unsafeCuts];
    const starts = [...(rc.turnStarts ?? []), ...turnStartsIn(input.messages, result.previousRole, result.firstIndex)];
    rc.turnStarts = starts.slice(-WINDOW.turns);
    session.record({ kind: 'appended', at: now(), firstIndex: result.firstIndex, count: input.messages.length });
    let checkpoint: CheckpointRef | null = null;
    if (input.checkpoint) {
      session.apply({ type: 'checkpointRequested' });
      try {
        checkpoint = await this.controller.capture('turn', input.label);
        session.apply({ type: 'checkpointSucceeded' });
      } catch (err) {
        session.apply({ type: 'checkpointFailed' });
        session.controlFailed('append', err);
        throw asFailure(err, 'the messages were appended, but the checkpoint after them failed');
      }
    }
    return { messageCount: result.messageCount, firstIndex: result.firstIndex, checkpoint };
  }

  /** Forks from just before the last assistant turn; the checkpoint holding the replaced turn is marked. */
  async regenerate(input: RegenerateInput): Promise<ForkResult> {
    const { session } = this;
    const turnStart = session.runControl.turnStarts?.at(-1);
    if (turnStart === undefined) {
      throw failure(ERROR_CODES.InvalidInput, `session ${session.id} has no assistant turn to regenerate`);
    }
    const from = await this.atMessage(turnStart);
    const replaces = session.state.head?.checkpointId;
    return this.forkFrom(from, input, true, replaces);
  }

  /** What a fork starting at `from` inherits of the conversation: the spans and turns before its cut. */
  private conversationAt(from: CheckpointRef): Pick<NonNullable<SessionWorkflowInput['fork']>, 'conversation'> {
    const rc = this.session.runControl;
    const n = from.messageCount;
    if (rc.messageCount === undefined || n === undefined) return {};
    return {
      conversation: {
        unsafeCuts: (rc.unsafeCuts ?? []).filter((span) => span.to < n),
        turnStarts: (rc.turnStarts ?? []).filter((start) => start < n),
      },
    };
  }

  /** The state a fork of "now" starts from: a running session is checkpointed first. */
  private async currentState(label: string | undefined): Promise<CheckpointRef> {
    const { session } = this;
    if (session.state.phase !== 'running') return this.resolve(undefined);
    try {
      return await this.controller.capture('fork', label);
    } catch (err) {
      session.controlFailed('fork', err);
      throw asFailure(err, 'fork failed: the current state could not be checkpointed');
    }
  }

  /** Restores `target` and nothing else: a rewind that cannot have the state asked for must not pick another. */
  private async restoreExactly(target: CheckpointRef): Promise<RuntimeInstanceRef> {
    const { session } = this;
    const { state } = session;
    const summary = restoreSummary(target, 'rewind');
    const instanceId = session.instanceIdsOfAttempts();
    const runtime = await onPlacedHost(state.spec, `restore ${checkpointName(target.checkpointId)}`, (host) =>
      summarized(summary, host.restoreCheckpoint, {
        sessionId: session.id,
        ...session.tenancy,
        checkpointId: target.checkpointId,
        expected: recorded(target),
        instanceId: instanceId(),
        spec: state.spec.runtime,
        ...session.fencing,
      }),
    );
    state.runtime = runtime;
    state.lastRestore = { checkpointId: target.checkpointId, at: now(), fallbackFrom: [] };
    session.restoredTo(target);
    session.record({
      kind: 'restored',
      at: now(),
      checkpointId: target.checkpointId,
      instanceId: runtime.instanceId,
      cause: 'rewind',
    });
    this.recovery.watch(runtime);
    return runtime;
  }

  /** The head moves to `target` on a new branch; the branch left keeps its tip. */
  private startBranch(target: CheckpointRef, safety: CheckpointRef | null, reason: string | undefined): number {
    const { session } = this;
    const { state } = session;
    const rc = state.runControl;
    const fromBranch = rc.branch;
    const fromHead = state.head?.checkpointId ?? null;
    session.setTip(fromBranch, fromHead);
    rc.branch = rc.nextBranch++;
    state.head = target;
    if (!state.checkpoints.some((c) => c.checkpointId === target.checkpointId)) state.checkpoints.push(target);
    session.setTip(rc.branch, target.checkpointId);
    session.record({
      kind: 'rewound',
      at: now(),
      to: target.checkpointId,
      ...(target.index !== undefined ? { toIndex: target.index } : {}),
      fromBranch,
      fromHead,
      ...(safety ? { safetyCheckpointId: safety.checkpointId } : {}),
      ...(reason ? { reason } : {}),
    });
    session.touch();
    return rc.branch;
  }

  private forkIds(input: BranchInput): string[] {
    const { session } = this;
    const ids = forkSessionIds(session.id, input.newSessionId, input.count ?? 1, uuid4().slice(0, 8));
    for (const id of ids) parse(SessionId, id);
    if (ids.includes(session.id)) throw failure(ERROR_CODES.InvalidInput, 'a fork needs a new session id, not its own');
    return ids;
  }
}
