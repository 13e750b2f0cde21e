import {
  allHandlersFinished,
  ApplicationFailure,
  condition,
  continueAsNew,
  log,
  patched,
  setCurrentDetails,
  setDefaultQueryHandler,
  setDefaultSignalHandler,
  setDefaultUpdateHandler,
  setHandler,
  uuid4,
  workflowInfo,
} from '@temporalio/workflow';
import {
  checkpointSignal,
  checkpointUpdate,
  drainUpdate,
  pauseSignal,
  pauseUpdate,
  resumeSignal,
  resumeUpdate,
  runtimeReportSignal,
  startUpdate,
  statusQuery,
  stopSignal,
  stopUpdate,
  timelineQuery,
  verifyUpdate,
  type DrainResult,
  type ResumeResult,
  type SessionStatus,
  type StopResult,
} from '../api/messages';
import { SessionWorkflowInput } from '../domain/records';
import { closestName } from '../domain/names';
import { ERROR_CODES, type ErrorCode } from '../domain/error-codes';
import {
  CheckpointInput,
  DrainInput,
  PauseInput,
  ResumeInput,
  StartSessionInput,
  StopInput,
  VerifyInput,
  type CheckpointRef,
  type CheckpointTrigger,
  type VerificationResult,
} from '../domain/schemas';
import { checkpointsToDelete } from '../domain/retention';
import { messageOf, parse, parseControl } from './inputs';
import { ControlQueue } from './control-queue';
import { Recovery } from './recovery';
import { recorded, restoreFailed, restoreWithFallback, resumed } from './restore';
import { local, onHost, onPlacedHost, shared, stopAndDispose, verifier } from './activity-proxies';
import { asFailure, failure, typeOf } from './failures';
import { now, sameJson, Session, stateOf } from './session';
import { CONTRACTS_PATCH, LEAN_PATCH } from './patches';
import { isFinal } from '../domain/session-state';

/** Updates and signals a caller may send, for the "did you mean" of an unknown name. */
const CONTROL_NAMES = ['start', 'checkpoint', 'pause', 'resume', 'stop', 'verify'];
const SIGNAL_NAMES = ['requestCheckpoint', 'requestPause', 'requestResume', 'requestStop'];
const QUERY_NAMES = ['status', 'timeline'];

/**
 * One workflow per session: it owns the session's lifecycle. Handlers only validate and enqueue; controls
 * run one at a time, in the order they were accepted, through `serial`.
 */
export async function sessionWorkflow(raw: SessionWorkflowInput): Promise<StopResult> {
  // Whatever started this run (another SDK, the `temporal` CLI) is checked like any other input: a bad start fails
  // the run with InvalidInput here, at its first task, before anything exists.
  const input = parse(SessionWorkflowInput, raw);
  const session = new Session(stateOf(input));
  const { state } = session;
  const queue = new ControlQueue(session);
  const recovery = new Recovery(session, queue);
  const sessionId = state.spec.sessionId;

  // ---- serial execution of operations -------------------------------------------------------------
  /** Background verifications in flight: the run neither ends nor continues as new before they finish. */
  const verifying = new Set<Promise<unknown>>();

  // ---- state changes ------------------------------------------------------------------------------

  // ---- validators and handlers ---------------------------------------------------------------------
  /**
   * Synchronous by design: an async validator's rejection is ignored by the SDK. A rejected update leaves
   * no trace in history and changes nothing.
   */

  /**
   * Answers when the session has started: its status once running, or the typed failure that ended the start. The
   * same spec again is a harmless repeat; another spec under a session id in use is refused.
   */
  async function awaitStarted(): Promise<SessionStatus> {
    await condition(() => state.phase !== 'starting');
    if (state.phase === 'failed' && state.failure) {
      throw failure(state.failure.type as ErrorCode, state.failure.message);
    }
    return session.status(queue.pending);
  }

  setHandler(startUpdate, () => awaitStarted(), {
    validator: (spec) => {
      const asked = parse(StartSessionInput, spec);
      if (!sameJson(asked, state.spec)) {
        throw failure(
          ERROR_CODES.SessionAlreadyExists,
          `session ${sessionId} exists with another spec: session ids are never reused`,
        );
      }
    },
    description:
      'Waits until the session is running and returns its status (or the failure that ended the start). ' +
      'Input: the start spec, e.g. {"sessionId": "build-42", "runtime": {"kind": "memory"}}; another spec is refused.',
  });
  setHandler(checkpointUpdate, (i) => queue.accept('checkpoint', parseControl(CheckpointInput, i), doCheckpoint), {
    validator: (i) => queue.validate('checkpoint', CheckpointInput, i),
    description: 'Capture the running session into a new checkpoint; returns its reference.',
  });
  setHandler(pauseUpdate, (i) => queue.accept('pause', parseControl(PauseInput, i), doPause), {
    validator: (i) => queue.validate('pause', PauseInput, i),
    description: 'Checkpoint the session, then stop its runtime to free compute; returns the checkpoint.',
  });
  setHandler(resumeUpdate, (i) => queue.accept('resume', parseControl(ResumeInput, i), doResume), {
    validator: (i) => queue.validate('resume', ResumeInput, i),
    description: 'Restore a paused session from its newest (or the given) checkpoint that verifies.',
  });
  setHandler(stopUpdate, (i) => queue.accept('stop', parseControl(StopInput, i), doStop), {
    validator: (i) => queue.validate('stop', StopInput, i),
    description: 'Stop the session for good, with a final checkpoint of a running session by default.',
  });
  setHandler(
    verifyUpdate,
    async (i) => {
      const { checkpointId } = parseControl(VerifyInput, i);
      const targets = checkpointId
        ? state.checkpoints.filter((c) => c.checkpointId === checkpointId)
        : [...state.checkpoints]; // (oldest first; the ones that exist when the request came)
      const results: VerificationResult[] = [];
      for (const target of targets) results.push(await verify(target, 'request'));
      return results;
    },
    {
      validator: (i) => {
        session.checkResumeTarget(parseControl(VerifyInput, i).checkpointId);
      },
      description: 'Read checkpoints back from the store (every chunk authenticated); returns what each one is.',
    },
  );
  setHandler(checkpointSignal, queue.fromSignal('requestCheckpoint', 'checkpoint', CheckpointInput, doCheckpoint), {
    description: 'Fire-and-forget checkpoint.',
  });
  setHandler(pauseSignal, queue.fromSignal('requestPause', 'pause', PauseInput, doPause), {
    description: 'Fire-and-forget pause.',
  });
  setHandler(resumeSignal, queue.fromSignal('requestResume', 'resume', ResumeInput, doResume), {
    description: 'Fire-and-forget resume.',
  });
  setHandler(stopSignal, queue.fromSignal('requestStop', 'stop', StopInput, doStop), {
    description: 'Fire-and-forget stop.',
  });
  setHandler(drainUpdate, (i) => drain(parse(DrainInput, i)), {
    validator: (i) => void parse(DrainInput, i),
    description:
      'Sent by a worker that shuts down: checkpoint (trigger drain), stop the runtime there, answer, then restore ' +
      'on another worker. Input: {"hostTaskQueue": "durable-sessions@host-1"}; a session hosted elsewhere is left alone.',
  });
  setHandler(runtimeReportSignal, (raw) => recovery.onRuntimeReport(raw), {
    description: "Sent by the host's monitor workflow: the session's runtime instance ended, or its host is lost.",
  });
  // A name nobody defined is a typed refusal naming the closest real one, not the SDK's untyped "no handler".
  setDefaultUpdateHandler((name) => {
    throw failure(ERROR_CODES.InvalidInput, unknownName('update', name, CONTROL_NAMES));
  });
  setDefaultSignalHandler((name) => session.rejectSignal(name, new Error(unknownName('signal', name, SIGNAL_NAMES))));
  setDefaultQueryHandler((name) => {
    throw failure(ERROR_CODES.InvalidInput, unknownName('query', name, QUERY_NAMES));
  });
  setHandler(statusQuery, () => session.status(queue.pending), {
    description: 'Current phase, runtime, head checkpoint and failure.',
  });
  setHandler(timelineQuery, () => state.timeline, {
    description: 'Checkpoints, restores, fallbacks and runtime events, oldest first.',
  });

  // ---- operations ----------------------------------------------------------------------------------
  /**
   * Claims the session id in the snapshot store for this session (its first run). A run under an id that has a
   * lineage already (a stopped, failed or forked-from session) fails with SessionAlreadyExists without touching it,
   * and publishes nothing (no search attributes: `list` shows the id once, for its real session).
   */
  async function claimed(): Promise<boolean> {
    try {
      const owner = workflowInfo().firstExecutionRunId;
      await (patched(LEAN_PATCH) ? local : shared).claimSession({ sessionId, owner });
      return true;
    } catch (err) {
      const type = typeOf(err) ?? ERROR_CODES.RuntimeFailed;
      state.failure = { type, message: messageOf(err), at: now() };
      state.phase = 'failed';
      return false;
    }
  }

  async function doStart(): Promise<void> {
    try {
      const runtime = await onPlacedHost(state.spec.liveness, (host) =>
        host.startRuntime({ sessionId, instanceId: session.newInstanceId(), spec: state.spec.runtime }),
      );
      state.runtime = runtime;
      session.apply({ type: 'started' });
      recovery.watch(runtime);
    } catch (err) {
      session.fail(typeOf(err) ?? ERROR_CODES.RuntimeFailed, `the runtime could not be started: ${messageOf(err)}`);
    }
  }

  /** Queues the drain; its caller (the draining worker) is answered once the runtime is off its host. */
  function drain(input: DrainInput): Promise<DrainResult> {
    return new Promise((answer, refuse) => {
      queue.serial(() => doDrain(input, answer)).catch(refuse);
    });
  }

  /**
   * Moves the session off a host that is shutting down: checkpoint, stop the runtime there, answer the host, then
   * restore on whichever worker places it (the draining one refuses placements). A capture that fails leaves the
   * runtime as it is: the host's exit then makes it a lost runtime, recovered from its newest checkpoint.
   */
  async function doDrain(input: DrainInput, answer: (result: DrainResult) => void): Promise<void> {
    const runtime = state.runtime;
    if (state.phase !== 'running' || !runtime || runtime.hostTaskQueue !== input.hostTaskQueue) {
      const where = runtime ? ` on ${runtime.hostTaskQueue}` : '';
      answer({ drained: false, checkpoint: null, detail: `the session is ${state.phase}${where}` });
      return;
    }
    session.apply({ type: 'checkpointRequested' });
    let checkpoint: CheckpointRef;
    try {
      checkpoint = await capture('drain', undefined, input.reason ?? 'its worker is shutting down');
      session.apply({ type: 'checkpointSucceeded' });
    } catch (err) {
      session.apply({ type: 'checkpointFailed' });
      session.controlFailed('drain', err);
      answer({ drained: false, checkpoint: null, detail: `no checkpoint could be taken: ${messageOf(err)}` });
      return;
    }
    await stopRuntime();
    session.apply({ type: 'runtimeLost' });
    answer({ drained: true, checkpoint });
    const outcome = await restoreWithFallback(session, checkpoint, 'drain', (r) => recovery.watch(r));
    if (outcome.ok) resumed(session);
    else restoreFailed(session, outcome, 'drain');
  }

  async function doCheckpoint(input: CheckpointInput): Promise<CheckpointRef> {
    session.apply({ type: 'checkpointRequested' });
    try {
      const ref = await capture('manual', input.label);
      session.apply({ type: 'checkpointSucceeded' });
      return ref;
    } catch (err) {
      session.apply({ type: 'checkpointFailed' });
      session.controlFailed('checkpoint', err);
      throw asFailure(err, 'checkpoint failed');
    }
  }

  async function doPause(input: PauseInput): Promise<CheckpointRef> {
    session.apply({ type: 'pauseRequested' });
    let ref: CheckpointRef;
    try {
      ref = await capture('pause', undefined, input.reason);
    } catch (err) {
      // The state is not durable, so the runtime keeps running: pausing must never lose work.
      session.apply({ type: 'pauseFailed' });
      session.controlFailed('pause', err);
      throw asFailure(err, 'pause failed: the checkpoint could not be written, the session keeps running');
    }
    await stopRuntime();
    session.apply({ type: 'pauseSucceeded' });
    return ref;
  }

  async function doResume(input: ResumeInput): Promise<ResumeResult> {
    session.apply({ type: 'resumeRequested' });
    const target = input.checkpointId
      ? state.checkpoints.find((c) => c.checkpointId === input.checkpointId)
      : state.head;
    if (!target) {
      session.fail(ERROR_CODES.RestoreFailed, 'the session has no checkpoint to resume from');
      throw failure(ERROR_CODES.RestoreFailed, 'the session has no checkpoint to resume from');
    }
    const outcome = await restoreWithFallback(session, target, 'resume', (r) => recovery.watch(r));
    if (!outcome.ok) {
      restoreFailed(session, outcome, 'resume');
      throw failure(ERROR_CODES.RestoreFailed, outcome.reason);
    }
    resumed(session);
    return outcome.result;
  }

  async function doStop(input: StopInput): Promise<StopResult> {
    const wasRunning = state.phase === 'running';
    session.apply({ type: 'stopRequested' });
    let finalCheckpoint: CheckpointRef | null = null;
    if (wasRunning) {
      if (input.checkpoint !== false) {
        try {
          finalCheckpoint = await capture('stop', undefined, input.reason);
        } catch (err) {
          // Stopping without the final state would lose work the caller asked to keep.
          session.apply({ type: 'stopFailed' });
          session.controlFailed('stop', err);
          throw asFailure(err, 'stop failed: the final checkpoint could not be written, the session keeps running');
        }
      }
      await stopRuntime();
    }
    session.apply({ type: 'stopSucceeded' });
    return { phase: 'completed', finalCheckpoint };
  }

  async function capture(trigger: CheckpointTrigger, label?: string, reason?: string): Promise<CheckpointRef> {
    const runtime = session.requireRuntime();
    const sequence = state.nextSequence;
    const ref = await onHost(runtime.hostTaskQueue, state.spec.liveness).captureCheckpoint({
      sessionId,
      instance: runtime,
      checkpointId: `${String(sequence).padStart(6, '0')}-${uuid4().slice(0, 8)}`,
      sequence,
      parentId: state.head?.checkpointId ?? null,
      trigger,
      label,
    });
    state.nextSequence = sequence + 1;
    state.checkpoints.push(ref);
    state.head = ref;
    session.record({ kind: 'checkpoint', at: now(), checkpoint: ref, ...(reason ? { reason } : {}) });
    session.touch();
    await applyRetention();
    if (state.spec.backgroundVerify) verifyInBackground(ref);
    return ref;
  }

  /** Verifies a checkpoint while the session goes on; the outcome lands in the timeline and status. */
  function verifyInBackground(ref: CheckpointRef): void {
    const running = verify(ref, 'background').catch((err: unknown) => {
      // Only a store that stayed unreachable through every retry gets here; nothing is recorded for it.
      log.warn('background verification did not run', { checkpointId: ref.checkpointId, error: messageOf(err) });
    });
    verifying.add(running);
    void running.finally(() => verifying.delete(running));
  }

  async function verify(ref: CheckpointRef, cause: 'background' | 'request'): Promise<VerificationResult> {
    const result = await verifier.verifyCheckpoint({
      sessionId,
      checkpointId: ref.checkpointId,
      expected: recorded(ref),
    });
    session.record({ kind: 'verified', cause, ...result });
    setCurrentDetails(session.describe());
    if (result.status !== 'ok') {
      log.warn('checkpoint did not verify', { checkpointId: ref.checkpointId, status: result.status });
    }
    return result;
  }

  /** Deletes what the session's retention policy lets go; a failed delete is simply tried again next time. */
  async function applyRetention(): Promise<void> {
    const doomed = checkpointsToDelete(
      state.checkpoints,
      state.head?.checkpointId ?? null,
      state.spec.retention,
      Date.now(),
    );
    for (const c of doomed) {
      try {
        await shared.deleteCheckpoint({ sessionId, checkpointId: c.checkpointId });
      } catch (err) {
        log.warn('checkpoint not deleted; retention will try again', {
          checkpointId: c.checkpointId,
          error: messageOf(err),
        });
        continue;
      }
      state.checkpoints = state.checkpoints.filter((x) => x.checkpointId !== c.checkpointId);
      session.record({ kind: 'checkpoint-deleted', at: now(), checkpointId: c.checkpointId, reason: 'retention' });
    }
  }

  /**
   * Called only once the state is durable in a checkpoint, so a host that cannot be reached to stop the
   * runtime loses nothing: the instance is recorded as lost and the session moves on.
   */
  async function stopRuntime(): Promise<void> {
    const runtime = session.requireRuntime();
    recovery.cancelWatch();
    const host = onHost(runtime.hostTaskQueue, state.spec.liveness);
    try {
      await stopAndDispose(host, runtime);
    } catch (err) {
      session.record({ kind: 'runtime-lost', at: now(), instanceId: runtime.instanceId, reason: messageOf(err) });
      log.warn('runtime could not be stopped; its state is checkpointed', { instanceId: runtime.instanceId });
    }
    state.runtime = null;
  }

  // ---- helpers -------------------------------------------------------------------------------------

  // ---- main ----------------------------------------------------------------------------------------
  if (input.carried === undefined) {
    if (patched(CONTRACTS_PATCH)) {
      void queue.serial(async () => {
        // Before anything is visible or made: a run under an id that was used already touches nothing of it.
        if (await claimed()) {
          session.touch();
          await doStart();
        }
      });
    } else {
      session.touch();
      void queue.serial(doStart);
    }
  } else {
    session.touch();
    if (state.runtime && state.phase === 'running') recovery.watch(state.runtime);
  }

  const shouldContinueAsNew = () => workflowInfo().continueAsNewSuggested;
  await condition(() => queue.idle && (isFinal(state.phase) || shouldContinueAsNew()));
  // Let accepted updates answer their callers before this run closes.
  await condition(() => allHandlersFinished() && queue.idle && verifying.size === 0);

  if (state.phase === 'failed') {
    const f = state.failure ?? { type: ERROR_CODES.RuntimeFailed, message: 'failed', at: now() };
    throw ApplicationFailure.create({ type: f.type, message: f.message, nonRetryable: true });
  }
  if (state.phase === 'completed') {
    const last = state.checkpoints[state.checkpoints.length - 1];
    return { phase: 'completed', finalCheckpoint: last?.trigger === 'stop' ? last : null };
  }
  recovery.cancelWatch();
  return continueAsNew<typeof sessionWorkflow>({ spec: state.spec, carried: state });
}

function unknownName(what: string, name: string, known: readonly string[]): string {
  const near = closestName(name, known);
  return `the session has no ${what} named ${JSON.stringify(name.slice(0, 100))}${near ? ` (did you mean "${near}"?)` : ''}`;
}
