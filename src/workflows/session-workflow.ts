import {
  allHandlersFinished,
  ApplicationFailure,
  condition,
  makeContinueAsNewFunc,
  setDefaultQueryHandler,
  patched,
  setDefaultSignalHandler,
  setDefaultUpdateHandler,
  setHandler,
  workflowInfo,
} from '@temporalio/workflow';
import {
  appendSignal,
  appendUpdate,
  regenerateUpdate,
  branchUpdate,
  configureSignal,
  configureUpdate,
  forkUpdate,
  rewindUpdate,
  touchSignal,
  touchUpdate,
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
  type StopResult,
} from '../api/messages';
import { ERROR_CODES } from '../domain/error-codes';
import { closestName } from '../domain/names';
import { SessionWorkflowInput } from '../domain/records';
import {
  AppendInput,
  RegenerateInput,
  BranchInput,
  CheckpointInput,
  ConfigureInput,
  DrainInput,
  ForkInput,
  PauseInput,
  ResumeInput,
  RewindInput,
  StopInput,
  TouchInput,
  VerifyInput,
} from '../domain/schemas';
import { isFinal } from '../domain/session-state';
import { ControlQueue } from './control-queue';
import { failure } from './failures';
import { parse, parseControl } from './inputs';
import { Recovery } from './recovery';
import { now, Session, stateOf } from './session';
import { SessionController } from './session-controller';
import { PolicyClock } from './policies';
import { RunControls } from './run-control';
import { TimelineFlush } from './timeline-flush';
import { RUN_CONTROL_PATCH } from './patches';

/** Updates and signals a caller may send, for the "did you mean" of an unknown name. */
const CONTROL_NAMES = [
  'start',
  'checkpoint',
  'pause',
  'resume',
  'stop',
  'verify',
  'rewind',
  'fork',
  'branch',
  'configure',
  'touch',
  'append',
  'regenerate',
];
const SIGNAL_NAMES = [
  'requestCheckpoint',
  'requestPause',
  'requestResume',
  'requestStop',
  'requestConfigure',
  'touch',
  'requestAppend',
];
const QUERY_NAMES = ['status', 'timeline'];

/**
 * One workflow per session: it owns the session's lifecycle. Handlers only validate and enqueue; controls
 * run one at a time, in the order they were accepted, through the ControlQueue.
 */
export async function sessionWorkflow(raw: SessionWorkflowInput): Promise<StopResult> {
  // Whatever started this run (another SDK, the `temporal` CLI) is checked like any other input: a bad start fails
  // the run with InvalidInput here, at its first task, before anything exists.
  const input = parse(SessionWorkflowInput, raw);
  const session = new Session(stateOf(input));
  const { state } = session;
  const queue = new ControlQueue(session);
  const recovery = new Recovery(session, queue);
  const controller = new SessionController(session, queue, recovery, input.fork?.claimOwner);
  const runControls = new RunControls(session, queue, recovery, controller);
  const flush = new TimelineFlush(session);
  const policies = new PolicyClock(session, queue, controller);

  // Registered in this order before anything runs: messages buffered for this run are dispatched as handlers appear.
  setControlHandlers(session, queue, recovery, controller);
  setRunControlHandlers(session, queue, runControls, policies);
  // What the previous run kept for this one goes first, then whatever was buffered meanwhile.
  queue.replayDeferred();
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
  setHandler(timelineQuery, () => session.recentTimeline(), {
    description:
      'The newest timeline entries (checkpoints, restores, rewinds, forks, verifications…) with their stable ' +
      'indices, oldest first; the whole timeline is in the snapshot store (CLI: `timeline --from`).',
  });

  controller.begin(input.carried === undefined, input.fork, input.forkOfEnded);

  const shouldContinueAsNew = () => workflowInfo().continueAsNewSuggested;
  let ending = false;
  flush.start(() => ending);
  policies.start(() => ending);
  if (patched(RUN_CONTROL_PATCH)) {
    await condition(() => (queue.idle && isFinal(state.phase)) || shouldContinueAsNew());
    // A run that hands over starts nothing new: updates are refused (Busy, the client sends them again), signals are
    // kept for the next run. So the queue drains even under a storm of controls.
    if (!isFinal(state.phase)) queue.drain();
  } else {
    await condition(() => queue.idle && (isFinal(state.phase) || shouldContinueAsNew()));
  }
  // Let accepted updates answer their callers before this run closes.
  await condition(() => allHandlersFinished() && queue.idle && controller.verificationsInFlight === 0);
  ending = true;
  // A session that ends has its whole timeline in the store; a run that continues hands on what waits.
  if (isFinal(state.phase)) await flush.flushAll();
  await condition(() => flush.idle && allHandlersFinished() && queue.idle);

  if (state.phase === 'failed') {
    const f = state.failure ?? { type: ERROR_CODES.RuntimeFailed, message: 'failed', at: now() };
    throw ApplicationFailure.create({ type: f.type, message: f.message, nonRetryable: true });
  }
  if (state.phase === 'completed') {
    const last = state.checkpoints[state.checkpoints.length - 1];
    return { phase: 'completed', finalCheckpoint: last?.trigger === 'stop' ? last : null };
  }
  recovery.cancelWatch();
  // Memo and search attributes go with the session to its next run, as they are.
  const info = workflowInfo();
  return makeContinueAsNewFunc<typeof sessionWorkflow>({
    typedSearchAttributes: info.typedSearchAttributes,
    ...(info.memo ? { memo: info.memo } : {}),
  })({ spec: state.spec, carried: state });
}

/** Rewind, fork, branch, configure and touch. */
function setRunControlHandlers(session: Session, queue: ControlQueue, run: RunControls, policies: PolicyClock): void {
  setHandler(rewindUpdate, (i) => queue.accept('rewind', parseControl(RewindInput, i), (x) => run.rewind(x)), {
    validator: (i) => queue.validate('rewind', RewindInput, i),
    description:
      'Go back to a checkpoint in place: a running session is checkpointed first (trigger rewind-safety), later ' +
      'checkpoints are kept and a new branch starts there. Input: {"to": 3} (a timeline index) or ' +
      '{"to": "000003-1a2b3c4d"}, optional "reason", "idempotencyKey", "ifHead".',
  });
  setHandler(forkUpdate, (i) => queue.accept('fork', parseControl(ForkInput, i), (x) => run.fork(x)), {
    validator: (i) => queue.validate('fork', ForkInput, i),
    description:
      'Start new, independent sessions from a checkpoint (chunks shared, nothing copied); this session is unchanged. ' +
      'Input: {"from": 3, "newSessionId": "build-42-try", "count": 1}, optional "overrides", "paused".',
  });
  setHandler(branchUpdate, (i) => queue.accept('branch', parseControl(BranchInput, i), (x) => run.branch(x)), {
    validator: (i) => queue.validate('branch', BranchInput, i),
    description:
      'Fork the current state (a running session is checkpointed first). Input: {"count": 3} makes three; ' +
      'optional "newSessionId", "overrides", "paused".',
  });
  setHandler(
    configureUpdate,
    (i) => queue.accept('configure', parseControl(ConfigureInput, i), (x) => run.configure(x)),
    {
      validator: (i) => queue.validate('configure', ConfigureInput, i),
      description:
        'Replace the policies and/or retention of the live session. Input: {"policies": {"checkpointEveryMs": ' +
        '600000, "idlePauseAfterMs": 7200000}}; {"policies": {}} turns them off.',
    },
  );
  setHandler(appendUpdate, (i) => queue.accept('append', parse(AppendInput, i), (x) => run.append(x)), {
    validator: (i) => queue.validate('append', AppendInput, i),
    description:
      'Conversation runtime: append messages, with a checkpoint after them when "checkpoint" is true (trigger turn). ' +
      'Input: {"messages": [{"role": "user", "content": "hi"}], "checkpoint": true}.',
  });
  setHandler(
    appendSignal,
    queue.fromSignal('requestAppend', 'append', AppendInput, (x) => run.append(x)),
    {
      description: 'Fire-and-forget append.',
    },
  );
  setHandler(
    regenerateUpdate,
    (i) => queue.accept('regenerate', parseControl(RegenerateInput, i), (x) => run.regenerate(x)),
    {
      validator: (i) => queue.validate('regenerate', RegenerateInput, i),
      description:
        'Conversation runtime: fork from just before the last assistant turn, to answer it again; the replaced ' +
        'turn is marked regenerated. Input: {} or {"newSessionId": "chat-7-retry"}.',
    },
  );
  setHandler(
    configureSignal,
    queue.fromSignal('requestConfigure', 'configure', ConfigureInput, (x) => run.configure(x)),
    { description: 'Fire-and-forget configure.' },
  );
  const touch = () => {
    session.runControl.lastActivityAt = now();
    policies.replan();
    return { lastActivityAt: session.runControl.lastActivityAt };
  };
  setHandler(touchUpdate, () => touch(), {
    validator: (i) => void parseControl(TouchInput, i),
    description: 'The session is in use: its idle timer starts again. Input: {}.',
  });
  setHandler(
    touchSignal,
    (i) => {
      try {
        parseControl(TouchInput, i);
        touch();
      } catch (err) {
        session.rejectSignal('touch', err);
      }
    },
    { description: 'Fire-and-forget touch.' },
  );
}

/** Updates validate synchronously and queue their work; signals are their fire-and-forget twins. */
function setControlHandlers(
  session: Session,
  queue: ControlQueue,
  recovery: Recovery,
  controller: SessionController,
): void {
  setHandler(startUpdate, () => controller.awaitStarted(), {
    validator: (spec) => session.checkSameSpec(spec),
    description:
      'Waits until the session is running and returns its status (or the failure that ended the start). ' +
      'Input: the start spec, e.g. {"sessionId": "build-42", "runtime": {"kind": "memory"}}; another spec is refused.',
  });
  setHandler(
    checkpointUpdate,
    (i) => queue.accept('checkpoint', parseControl(CheckpointInput, i), (x) => controller.checkpoint(x)),
    {
      validator: (i) => queue.validate('checkpoint', CheckpointInput, i),
      description: 'Capture the running session into a new checkpoint; returns its reference.',
    },
  );
  setHandler(pauseUpdate, (i) => queue.accept('pause', parseControl(PauseInput, i), (x) => controller.pause(x)), {
    validator: (i) => queue.validate('pause', PauseInput, i),
    description: 'Checkpoint the session, then stop its runtime to free compute; returns the checkpoint.',
  });
  setHandler(resumeUpdate, (i) => queue.accept('resume', parseControl(ResumeInput, i), (x) => controller.resume(x)), {
    validator: (i) => queue.validate('resume', ResumeInput, i),
    description: 'Restore a paused session from its newest (or the given) checkpoint that verifies.',
  });
  setHandler(stopUpdate, (i) => queue.accept('stop', parseControl(StopInput, i), (x) => controller.stop(x)), {
    validator: (i) => queue.validate('stop', StopInput, i),
    description: 'Stop the session for good, with a final checkpoint of a running session by default.',
  });
  setHandler(verifyUpdate, (i) => controller.verifyAll(i), {
    validator: (i) => {
      session.checkKnownCheckpoint(parseControl(VerifyInput, i).checkpointId);
    },
    description: 'Read checkpoints back from the store (every chunk authenticated); returns what each one is.',
  });
  setHandler(
    checkpointSignal,
    queue.fromSignal('requestCheckpoint', 'checkpoint', CheckpointInput, (x) => controller.checkpoint(x)),
    { description: 'Fire-and-forget checkpoint.' },
  );
  setHandler(
    pauseSignal,
    queue.fromSignal('requestPause', 'pause', PauseInput, (x) => controller.pause(x)),
    { description: 'Fire-and-forget pause.' },
  );
  setHandler(
    resumeSignal,
    queue.fromSignal('requestResume', 'resume', ResumeInput, (x) => controller.resume(x)),
    { description: 'Fire-and-forget resume.' },
  );
  setHandler(
    stopSignal,
    queue.fromSignal('requestStop', 'stop', StopInput, (x) => controller.stop(x)),
    { description: 'Fire-and-forget stop.' },
  );
  setHandler(drainUpdate, (i) => controller.drain(parse(DrainInput, i)), {
    validator: (i) => void parse(DrainInput, i),
    description:
      'Sent by a worker that shuts down: checkpoint (trigger drain), stop the runtime there, answer, then restore ' +
      'on another worker. Input: {"hostTaskQueue": "durable-sessions@host-1"}; a session hosted elsewhere is left alone.',
  });
  setHandler(runtimeReportSignal, (report) => recovery.onRuntimeReport(report), {
    description: "Sent by the host's monitor workflow: the session's runtime instance ended, or its host is lost.",
  });
}

function unknownName(what: string, name: string, known: readonly string[]): string {
  const near = closestName(name, known);
  return `the session has no ${what} named ${JSON.stringify(name.slice(0, 100))}${near ? ` (did you mean "${near}"?)` : ''}`;
}
