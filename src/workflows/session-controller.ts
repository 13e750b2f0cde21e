import { ApplicationFailure, condition, deprecatePatch, log, patched, uuid4, workflowInfo } from '@temporalio/workflow';
import type { DrainResult, ResumeResult, RuntimeInstanceRef, SessionStatus, StopResult } from '../api/messages';
import { ERROR_CODES } from '../domain/error-codes';
import type { SessionWorkflowInput } from '../domain/records';
import { checkpointsToDelete } from '../domain/retention';
import {
  VerifyInput,
  type CheckpointInput,
  type CheckpointRef,
  type CheckpointTrigger,
  type DrainInput,
  type PauseInput,
  type ResumeInput,
  type StopInput,
  type VerificationResult,
  RUNTIME_PLACEMENT,
} from '../domain/schemas';
import { byteSize, checkpointName, oneLine, timelineEntries } from '../domain/operator-view';
import { local, onHost, onPlacedHost, shared, stopAndDispose, summarized, verifier } from './activity-proxies';
import type { ControlQueue } from './control-queue';
import { asFailure, exitDetailsOf, failure, failureMessage, typeOf } from './failures';
import { parseControl } from './inputs';
import {
  CAPTURE_THEN_STOP_PATCH,
  CONTRACTS_PATCH,
  LEAN_PATCH,
  MONITOR_DECIDES_PATCH,
  PAUSE_THROUGH_LOSS_PATCH,
} from './patches';

/** Timeline entries a capture takes to the store at most (the rest go with the next one, or the next flush). */
const FLUSH_WITH_CAPTURE = 200;
import type { Recovery } from './recovery';
import { recorded, restoreFailed, restoreWithFallback, resumed, startFromSpec } from './restore';
import { now, startsAsFork, type Session } from './session';

/**
 * What each control does to the session, once the ControlQueue has accepted it and its turn has come: start,
 * checkpoint, pause, resume, stop, drain and verify, with the checkpoint capture, retention and background
 * verification they share.
 */
export class SessionController {
  /** Background verifications in flight: the run neither ends nor continues as new before they finish. */
  private readonly verifying = new Set<Promise<unknown>>();
  /** The instance the last capture also stopped (CAPTURE_THEN_STOP_PATCH): stopRuntime has nothing left to ask its host. */
  private stoppedByCapture: string | null = null;

  constructor(
    private readonly session: Session,
    private readonly queue: ControlQueue,
    private readonly recovery: Recovery,
    /** A fork's first run claims its id for the owner its source claimed it for (the source forked into it). */
    private readonly claimOwner?: string,
  ) {}

  get verificationsInFlight(): number {
    return this.verifying.size;
  }

  /**
   * A first run claims the session id and starts the runtime (a fork's resumes from the checkpoint it was forked at,
   * unless asked to stay paused); a continued run watches the runtime it was handed.
   */
  begin(
    firstRun: boolean,
    fork?: SessionWorkflowInput['fork'],
    forkOfEnded?: SessionWorkflowInput['forkOfEnded'],
  ): void {
    const { session } = this;
    if (forkOfEnded) {
      void this.queue.serial(() => this.forkFromEnded(forkOfEnded), 'fork start');
      return;
    }
    if (fork) {
      void this.queue.serial(async () => {
        if (!(await this.claimed())) return;
        session.touch();
      });
      if (!fork.paused) void this.queue.accept('resume', {}, (x) => this.resume(x, 'fork')).catch(() => undefined);
      return;
    }
    if (firstRun) {
      deprecatePatch(CONTRACTS_PATCH);
      void this.queue.serial(async () => {
        // Before anything is visible or made: a run under an id that was used already touches nothing of it.
        if (await this.claimed()) {
          session.touch();
          await this.start();
        }
      }, 'start');
    } else {
      session.touch();
      if (session.state.runtime && session.state.phase === 'running') this.recovery.watch(session.state.runtime);
    }
  }

  /**
   * Answers when the session has started: its status once running, or the typed failure that ended the start. The
   * same spec again is a harmless repeat; another spec under a session id in use is refused.
   */
  async awaitStarted(): Promise<SessionStatus> {
    const { state } = this.session;
    await condition(() => state.phase !== 'starting');
    if (state.phase === 'failed' && state.failure) {
      // With how the command ended, when it did: the caller of the start sees its exit code and last output.
      const { type, message } = state.failure;
      throw ApplicationFailure.create({ type, message, nonRetryable: true, details: [state.failure] });
    }
    return this.session.status(this.queue.pending);
  }

  /** Queues the drain; its caller (the draining worker) is answered once the runtime is off its host. */
  drain(input: DrainInput): Promise<DrainResult> {
    return new Promise((answer, refuse) => {
      this.queue.serial(() => this.runDrain(input, answer), 'drain').catch(refuse);
    });
  }

  async checkpoint(input: CheckpointInput): Promise<CheckpointRef> {
    const { session } = this;
    session.apply({ type: 'checkpointRequested' });
    const runtime = session.state.runtime;
    try {
      const ref = await this.capture('manual', input.label);
      session.apply({ type: 'checkpointSucceeded' });
      return ref;
    } catch (err) {
      session.apply({ type: 'checkpointFailed' });
      // The runtime died under the capture: the caller hears so, typed, and the session is recovered now, not once
      // the monitor's report has queued behind whatever else waits.
      if (runtime && patched(MONITOR_DECIDES_PATCH) && (await this.recovery.lostBy(runtime, err))) {
        throw await this.checkpointLost(runtime, err);
      }
      session.controlFailed('checkpoint', err);
      throw asFailure(err, 'checkpoint failed');
    }
  }

  /** Recovers the session whose runtime was lost mid-checkpoint; the failure says the checkpoint was not taken. */
  private async checkpointLost(lost: RuntimeInstanceRef, err: unknown): Promise<ApplicationFailure> {
    const { session } = this;
    const { state } = session;
    const why = `the runtime was lost while it was being checkpointed: ${failureMessage(err)}`;
    this.recovery.cancelWatch();
    if (state.runtime?.instanceId === lost.instanceId) await this.recovery.recoverLost(lost, why);
    const where = state.failure ? `${state.phase} (${state.failure.type}: ${state.failure.message})` : state.phase;
    const from = state.head ? `from checkpoint ${state.head.checkpointId}` : 'from its spec';
    const outcome = state.phase === 'running' ? `the session runs again ${from}` : `the session is ${where}`;
    const lostFailure = failure(ERROR_CODES.RuntimeLost, `checkpoint not taken: ${why}; ${outcome}`);
    session.controlFailed('checkpoint', lostFailure);
    return lostFailure;
  }

  async pause(input: PauseInput): Promise<CheckpointRef> {
    const { session } = this;
    session.apply({ type: 'pauseRequested' });
    const runtime = session.state.runtime;
    let ref: CheckpointRef;
    try {
      ref = await this.capture('pause', undefined, input.reason, 'pause');
    } catch (err) {
      // An accepted pause is carried out even when the host died under it: on the recovered session.
      if (runtime && patched(PAUSE_THROUGH_LOSS_PATCH) && (await this.recovery.lostBy(runtime, err))) {
        return this.pauseAfterLoss(input, runtime, err);
      }
      // The state is not durable, so the runtime keeps running: pausing must never lose work.
      session.apply({ type: 'pauseFailed' });
      session.controlFailed('pause', err);
      throw asFailure(err, 'pause failed: the checkpoint could not be written, the session keeps running');
    }
    await this.stopRuntime('pause');
    session.runControl.pausedAt = now();
    session.apply({ type: 'pauseSucceeded' });
    return ref;
  }

  /**
   * The pause's capture failed because the runtime is gone: the session is recovered (from its newest checkpoint, or
   * from its spec) and then paused, so the caller gets the pause it asked for, at the state recovery brought back; the
   * timeline says what happened (`runtime-lost`, `restored` or `restarted-from-spec`, then the pause's checkpoint).
   * When the session cannot be recovered, the pause fails with a typed error that says where the session is instead.
   */
  private async pauseAfterLoss(input: PauseInput, lost: RuntimeInstanceRef, err: unknown): Promise<CheckpointRef> {
    const { session } = this;
    const { state } = session;
    const why = `the runtime was lost while it was pausing: ${failureMessage(err)}`;
    this.recovery.cancelWatch();
    await this.recovery.recoverLost(lost, why);
    if (state.phase !== 'running') {
      const where = state.failure ? `${state.phase} (${state.failure.type}: ${state.failure.message})` : state.phase;
      session.controlFailed('pause', failure(ERROR_CODES.RuntimeLost, why));
      throw failure(
        ERROR_CODES.RuntimeLost,
        `pause not carried out: ${why}; the session could not be recovered and is ${where}`,
      );
    }
    session.apply({ type: 'pauseRequested' });
    let ref: CheckpointRef;
    try {
      ref = await this.capture(
        'pause',
        undefined,
        input.reason ?? 'paused after recovery: the runtime was lost mid-pause',
        'pause',
      );
    } catch (again) {
      session.apply({ type: 'pauseFailed' });
      session.controlFailed('pause', again);
      throw asFailure(
        again,
        'pause not carried out: the runtime was lost mid-pause and the recovered session could not be checkpointed; it keeps running',
      );
    }
    await this.stopRuntime('pause');
    session.runControl.pausedAt = now();
    session.apply({ type: 'pauseSucceeded' });
    return ref;
  }

  async resume(input: ResumeInput, cause: 'resume' | 'fork' = 'resume'): Promise<ResumeResult> {
    const { session } = this;
    const { state } = session;
    session.apply({ type: 'resumeRequested' });
    const target = input.checkpointId
      ? state.checkpoints.find((c) => c.checkpointId === input.checkpointId)
      : state.head;
    if (!target) {
      session.fail(ERROR_CODES.RestoreFailed, 'the session has no checkpoint to resume from');
      throw failure(ERROR_CODES.RestoreFailed, 'the session has no checkpoint to resume from');
    }
    const outcome = await restoreWithFallback(session, target, cause, (r) => this.recovery.watch(r));
    if (!outcome.ok) {
      restoreFailed(session, outcome, cause);
      throw failure(ERROR_CODES.RestoreFailed, outcome.reason);
    }
    resumed(session);
    return outcome.result;
  }

  async stop(input: StopInput): Promise<StopResult> {
    const { session } = this;
    const wasRunning = session.state.phase === 'running';
    session.apply({ type: 'stopRequested' });
    let finalCheckpoint: CheckpointRef | null = null;
    if (wasRunning) {
      if (input.checkpoint ?? session.runControl.policies.checkpointBeforeStop ?? true) {
        try {
          finalCheckpoint = await this.capture('stop', undefined, input.reason, 'stop');
        } catch (err) {
          // Stopping without the final state would lose work the caller asked to keep.
          session.apply({ type: 'stopFailed' });
          session.controlFailed('stop', err);
          throw asFailure(err, 'stop failed: the final checkpoint could not be written, the session keeps running');
        }
      }
      await this.stopRuntime('stop');
    }
    if (input.reason) session.stopReason = input.reason;
    session.apply({ type: 'stopSucceeded' });
    return { phase: 'completed', finalCheckpoint };
  }

  /** Verification only reads the store, so it runs beside the queue: a long one holds up no control. */
  async verifyAll(raw: unknown): Promise<VerificationResult[]> {
    const { state } = this.session;
    const { checkpointId } = parseControl(VerifyInput, raw);
    const targets = checkpointId
      ? state.checkpoints.filter((c) => c.checkpointId === checkpointId)
      : [...state.checkpoints]; // (oldest first; the ones that exist when the request came)
    const results: VerificationResult[] = [];
    for (const target of targets) results.push(await this.verify(target, 'request'));
    return results;
  }

  /**
   * Claims the session id in the snapshot store for this session (its first run). A run under an id that has a
   * lineage already (a stopped, failed or forked-from session) fails with SessionAlreadyExists without touching it,
   * and publishes nothing (no search attributes: `list` shows the id once, for its real session).
   */
  private async claimed(): Promise<boolean> {
    const { state } = this.session;
    try {
      const owner = this.claimOwner ?? workflowInfo().firstExecutionRunId;
      const input = { sessionId: this.session.id, ...this.session.tenancy, owner };
      const summary = `claim session id ${this.session.id}`;
      deprecatePatch(LEAN_PATCH);
      await summarized(summary, local.claimSession, input);
      return true;
    } catch (err) {
      const type = typeOf(err) ?? ERROR_CODES.RuntimeFailed;
      state.failure = { type, message: failureMessage(err), at: now() };
      state.phase = 'failed';
      return false;
    }
  }

  /**
   * Makes this session's first checkpoint from an ended session's (the store shares its chunks), claiming the id for
   * this run; then the session is paused at it, like any fork. A refusal (the id is taken, the checkpoint is gone)
   * fails the start with its typed error, having made nothing.
   */
  private async forkFromEnded(fork: NonNullable<SessionWorkflowInput['forkOfEnded']>): Promise<void> {
    const { session } = this;
    const { state } = session;
    try {
      const summary = `fork ${fork.from.sessionId} at ${checkpointName(fork.from.checkpointId)} into this session`;
      const [checkpoint] = await summarized(summary, shared.forkSessions, {
        ...session.tenancy,
        source: { sessionId: fork.from.sessionId, checkpointId: fork.from.checkpointId },
        targets: [
          {
            sessionId: session.id,
            checkpointId: `000001-${uuid4().slice(0, 8)}`,
            owner: workflowInfo().firstExecutionRunId,
            ...(fork.label ? { label: fork.label } : {}),
          },
        ],
      });
      const ref = {
        ...checkpoint!,
        ...(fork.source.messageCount !== undefined ? { messageCount: fork.source.messageCount } : {}),
      };
      startsAsFork(state, { from: fork.from, checkpoint: ref, claimOwner: workflowInfo().firstExecutionRunId });
      session.touch();
    } catch (err) {
      session.fail(typeOf(err) ?? ERROR_CODES.RuntimeFailed, `the fork could not be made: ${failureMessage(err)}`);
      return;
    }
    // A resume that fails leaves the fork paused with the reason, like any resume.
    if (!fork.paused) await this.resume({}, 'fork').catch(() => undefined);
  }

  private async start(): Promise<void> {
    const { session } = this;
    const { state } = session;
    try {
      const runtime = await startFromSpec(session);
      state.runtime = runtime;
      session.apply({ type: 'started' });
      this.recovery.watch(runtime);
    } catch (err) {
      session.fail(
        typeOf(err) ?? ERROR_CODES.RuntimeFailed,
        `the runtime could not be started: ${failureMessage(err)}`,
        exitDetailsOf(err),
      );
    }
  }

  /**
   * Moves the session off a host that is shutting down: checkpoint, stop the runtime there, answer the host, then
   * restore on whichever worker places it (the draining one refuses placements). A capture that fails leaves the
   * runtime as it is: the host's exit then makes it a lost runtime, recovered from its newest checkpoint.
   */
  private async runDrain(input: DrainInput, answer: (result: DrainResult) => void): Promise<void> {
    const { session } = this;
    const { state } = session;
    const runtime = state.runtime;
    if (state.phase !== 'running' || !runtime || runtime.hostTaskQueue !== input.hostTaskQueue) {
      const where = runtime ? ` on ${runtime.hostTaskQueue}` : '';
      answer({ drained: false, checkpoint: null, detail: `the session is ${state.phase}${where}` });
      return;
    }
    // An instance on a host of its own does not go down with this worker: another worker takes it over as it runs.
    if (RUNTIME_PLACEMENT[runtime.kind] === 'anywhere') {
      this.recovery.cancelWatch();
      if (await this.recovery.takeOver(runtime, input.reason ?? 'its worker is shutting down')) {
        answer({ drained: true, checkpoint: null });
        return;
      }
      // It could not be taken over (its host lost it): the checkpoint below is taken, or the loss is noticed.
      if (state.runtime?.instanceId !== runtime.instanceId) return;
    }
    session.apply({ type: 'checkpointRequested' });
    let checkpoint: CheckpointRef;
    try {
      checkpoint = await this.capture('drain', undefined, input.reason ?? 'its worker is shutting down', 'drain');
      session.apply({ type: 'checkpointSucceeded' });
    } catch (err) {
      session.apply({ type: 'checkpointFailed' });
      session.controlFailed('drain', err);
      answer({ drained: false, checkpoint: null, detail: `no checkpoint could be taken: ${failureMessage(err)}` });
      return;
    }
    await this.stopRuntime('drain');
    session.apply({ type: 'runtimeLost' });
    answer({ drained: true, checkpoint });
    const outcome = await restoreWithFallback(session, checkpoint, 'drain', (r) => this.recovery.watch(r));
    if (outcome.ok) resumed(session);
    else restoreFailed(session, outcome, 'drain');
  }

  /**
   * Captures the running runtime into a new checkpoint on the current branch. The capture also takes the timeline
   * entries that wait for the store (its host appends them first): a session that checkpoints often needs no other
   * step to keep its timeline in the store. A control that stops the runtime next names why (`stopFor`): the host then
   * stops it once the checkpoint is published, in the same activity, and stopRuntime only records it.
   */
  async capture(trigger: CheckpointTrigger, label?: string, reason?: string, stopFor?: string): Promise<CheckpointRef> {
    const { session } = this;
    const { state } = session;
    const rc = state.runControl;
    const runtime = session.requireRuntime();
    const sequence = state.nextSequence;
    const carried = rc.unflushed.slice(0, FLUSH_WITH_CAPTURE);
    const checkpointId = `${String(sequence).padStart(6, '0')}-${uuid4().slice(0, 8)}`;
    const summary =
      `capture ${checkpointName(checkpointId)} (${trigger})` +
      (label ? ` ${JSON.stringify(oneLine(label, 60))}` : '') +
      (carried.length ? ` with ${timelineEntries(carried.length)}` : '');
    const host = onHost(runtime.hostTaskQueue, state.spec.liveness);
    const stop = stopFor !== undefined && patched(CAPTURE_THEN_STOP_PATCH);
    const { stopped, ...captured } = await summarized(
      stop ? `${summary}, then stop the runtime (${stopFor})` : summary,
      host.captureCheckpoint,
      {
        sessionId: session.id,
        ...session.tenancy,
        instance: runtime,
        checkpointId,
        sequence,
        parentId: state.head?.checkpointId ?? null,
        trigger,
        label,
        ...(carried.length ? { timeline: carried } : {}),
        ...(stop ? { stop } : {}),
      },
    );
    if (stopped) this.stoppedByCapture = runtime.instanceId;
    session.flushed(carried);
    state.nextSequence = sequence + 1;
    const ref: CheckpointRef = {
      ...captured,
      index: rc.nextIndex,
      branch: rc.branch,
      ...(rc.messageCount !== undefined ? { messageCount: rc.messageCount } : {}),
    };
    session.addCheckpoint(ref);
    session.record({
      kind: 'checkpoint',
      at: now(),
      checkpoint: ref,
      durability: 'durable',
      ...(reason ? { reason } : {}),
      ...(rc.messageCount !== undefined ? { messageIndex: rc.messageCount } : {}),
    });
    session.touch();
    await this.applyRetention();
    if (state.spec.backgroundVerify) this.verifyInBackground(ref);
    return ref;
  }

  /** Verifies a checkpoint while the session goes on; the outcome lands in the timeline and status. */
  private verifyInBackground(ref: CheckpointRef): void {
    const running = this.verify(ref, 'background').catch((err: unknown) => {
      // Only a store that stayed unreachable through every retry gets here; nothing is recorded for it.
      log.warn('background verification did not run', { checkpointId: ref.checkpointId, error: failureMessage(err) });
    });
    this.verifying.add(running);
    void running.finally(() => this.verifying.delete(running));
  }

  private async verify(ref: CheckpointRef, cause: 'background' | 'request'): Promise<VerificationResult> {
    const { session } = this;
    const background = cause === 'background' ? ', background' : '';
    const summary = `verify ${checkpointName(ref.checkpointId)} (${byteSize(ref.size)}${background})`;
    const result = await summarized(summary, verifier.verifyCheckpoint, {
      sessionId: session.id,
      ...session.tenancy,
      checkpointId: ref.checkpointId,
      expected: recorded(ref),
    });
    session.record({ kind: 'verified', cause, ...result });
    session.runControl.lastVerification = result;
    session.publishDetails();
    if (result.status !== 'ok') {
      log.warn('checkpoint did not verify', { checkpointId: ref.checkpointId, status: result.status });
    }
    return result;
  }

  /** Deletes what the session's retention policy lets go; a failed delete is simply tried again next time. */
  private async applyRetention(): Promise<void> {
    const { session } = this;
    const { state } = session;
    // Branch tips stay with the head: a rewind keeps what came after the checkpoint it went back to.
    const tips = new Set(state.runControl.tips.map((t) => t.checkpointId));
    const doomed = checkpointsToDelete(
      state.checkpoints,
      state.head?.checkpointId ?? null,
      state.runControl.retention,
      Date.now(),
    ).filter((c) => !tips.has(c.checkpointId));
    for (const c of doomed) {
      try {
        await summarized(`delete ${checkpointName(c.checkpointId)} (retention)`, shared.deleteCheckpoint, {
          sessionId: session.id,
          ...session.tenancy,
          checkpointId: c.checkpointId,
        });
      } catch (err) {
        log.warn('checkpoint not deleted; retention will try again', {
          checkpointId: c.checkpointId,
          error: failureMessage(err),
        });
        continue;
      }
      state.checkpoints = state.checkpoints.filter((x) => x.checkpointId !== c.checkpointId);
      state.runControl.checkpointCount--;
      session.record({ kind: 'checkpoint-deleted', at: now(), checkpointId: c.checkpointId, reason: 'retention' });
    }
  }

  /**
   * Called only once the state is durable in a checkpoint, so a host that cannot be reached to stop the
   * runtime loses nothing: the instance is recorded as lost and the session moves on.
   */
  async stopRuntime(why: string): Promise<void> {
    const { session } = this;
    const { state } = session;
    const runtime = session.requireRuntime();
    this.recovery.cancelWatch();
    if (this.stoppedByCapture === runtime.instanceId) {
      this.stoppedByCapture = null;
      state.runtime = null;
      return;
    }
    const host = onHost(runtime.hostTaskQueue, state.spec.liveness);
    try {
      await stopAndDispose(host, runtime, why);
    } catch (err) {
      // A sandbox on a host of its own outlives its worker: left as it is, it would run on while the session is paused
      // or stopped, and a resume would start a second copy. Another worker stops it. (Only remote runtimes come here,
      // a kind no release had: no history to replay takes this branch, as with the takeover in recovery.)
      if (RUNTIME_PLACEMENT[runtime.kind] === 'anywhere') {
        const stopped = await onPlacedHost(state.spec, `stop ${runtime.instanceId}`, (other) =>
          stopAndDispose(other, runtime, why),
        ).then(
          () => true,
          () => false,
        );
        if (stopped) {
          state.runtime = null;
          return;
        }
      }
      session.record({ kind: 'runtime-lost', at: now(), instanceId: runtime.instanceId, reason: failureMessage(err) });
      log.warn('runtime could not be stopped; its state is checkpointed', { instanceId: runtime.instanceId });
    }
    state.runtime = null;
  }
}
