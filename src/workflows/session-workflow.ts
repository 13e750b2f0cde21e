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
import { FAILURE_DETAILS_PATCH, RUN_CONTROL_PATCH } from './patches';
import { describeHandler, QUERY_DOCS, SIGNAL_DOCS, UPDATE_DOCS } from './handler-descriptions';

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
    description: describeHandler(QUERY_DOCS.status),
  });
  setHandler(timelineQuery, () => session.recentTimeline(), {
    description: describeHandler(QUERY_DOCS.timeline),
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
    // The whole failure (exit code, last output, where the directory is kept) for whoever reads the result.
    const details = patched(FAILURE_DETAILS_PATCH) ? { details: [f] } : {};
    throw ApplicationFailure.create({ type: f.type, message: f.message, nonRetryable: true, ...details });
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
    description: describeHandler(UPDATE_DOCS.rewind),
  });
  setHandler(forkUpdate, (i) => queue.accept('fork', parseControl(ForkInput, i), (x) => run.fork(x)), {
    validator: (i) => queue.validate('fork', ForkInput, i),
    description: describeHandler(UPDATE_DOCS.fork),
  });
  setHandler(branchUpdate, (i) => queue.accept('branch', parseControl(BranchInput, i), (x) => run.branch(x)), {
    validator: (i) => queue.validate('branch', BranchInput, i),
    description: describeHandler(UPDATE_DOCS.branch),
  });
  setHandler(
    configureUpdate,
    (i) => queue.accept('configure', parseControl(ConfigureInput, i), (x) => run.configure(x)),
    {
      validator: (i) => queue.validate('configure', ConfigureInput, i),
      description: describeHandler(UPDATE_DOCS.configure),
    },
  );
  setHandler(appendUpdate, (i) => queue.accept('append', parse(AppendInput, i), (x) => run.append(x)), {
    validator: (i) => queue.validate('append', AppendInput, i),
    description: describeHandler(UPDATE_DOCS.append),
  });
  setHandler(
    appendSignal,
    queue.fromSignal('requestAppend', 'append', AppendInput, (x) => run.append(x)),
    {
      description: describeHandler(SIGNAL_DOCS.requestAppend),
    },
  );
  setHandler(
    regenerateUpdate,
    (i) => queue.accept('regenerate', parseControl(RegenerateInput, i), (x) => run.regenerate(x)),
    {
      validator: (i) => queue.validate('regenerate', RegenerateInput, i),
      description: describeHandler(UPDATE_DOCS.regenerate),
    },
  );
  setHandler(
    configureSignal,
    queue.fromSignal('requestConfigure', 'configure', ConfigureInput, (x) => run.configure(x)),
    { description: describeHandler(SIGNAL_DOCS.requestConfigure) },
  );
  const touch = () => {
    session.runControl.lastActivityAt = now();
    policies.replan();
    return { lastActivityAt: session.runControl.lastActivityAt };
  };
  setHandler(touchUpdate, () => touch(), {
    validator: (i) => void parseControl(TouchInput, i),
    description: describeHandler(UPDATE_DOCS.touch),
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
    { description: describeHandler(SIGNAL_DOCS.touch) },
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
    description: describeHandler(UPDATE_DOCS.start),
  });
  setHandler(
    checkpointUpdate,
    (i) => queue.accept('checkpoint', parseControl(CheckpointInput, i), (x) => controller.checkpoint(x)),
    {
      validator: (i) => queue.validate('checkpoint', CheckpointInput, i),
      description: describeHandler(UPDATE_DOCS.checkpoint),
    },
  );
  setHandler(pauseUpdate, (i) => queue.accept('pause', parseControl(PauseInput, i), (x) => controller.pause(x)), {
    validator: (i) => queue.validate('pause', PauseInput, i),
    description: describeHandler(UPDATE_DOCS.pause),
  });
  setHandler(resumeUpdate, (i) => queue.accept('resume', parseControl(ResumeInput, i), (x) => controller.resume(x)), {
    validator: (i) => queue.validate('resume', ResumeInput, i),
    description: describeHandler(UPDATE_DOCS.resume),
  });
  setHandler(stopUpdate, (i) => queue.accept('stop', parseControl(StopInput, i), (x) => controller.stop(x)), {
    validator: (i) => queue.validate('stop', StopInput, i),
    description: describeHandler(UPDATE_DOCS.stop),
  });
  setHandler(verifyUpdate, (i) => controller.verifyAll(i), {
    validator: (i) => {
      session.checkKnownCheckpoint(parseControl(VerifyInput, i).checkpointId);
    },
    description: describeHandler(UPDATE_DOCS.verify),
  });
  setHandler(
    checkpointSignal,
    queue.fromSignal('requestCheckpoint', 'checkpoint', CheckpointInput, (x) => controller.checkpoint(x)),
    { description: describeHandler(SIGNAL_DOCS.requestCheckpoint) },
  );
  setHandler(
    pauseSignal,
    queue.fromSignal('requestPause', 'pause', PauseInput, (x) => controller.pause(x)),
    { description: describeHandler(SIGNAL_DOCS.requestPause) },
  );
  setHandler(
    resumeSignal,
    queue.fromSignal('requestResume', 'resume', ResumeInput, (x) => controller.resume(x)),
    { description: describeHandler(SIGNAL_DOCS.requestResume) },
  );
  setHandler(
    stopSignal,
    queue.fromSignal('requestStop', 'stop', StopInput, (x) => controller.stop(x)),
    { description: describeHandler(SIGNAL_DOCS.requestStop) },
  );
  setHandler(drainUpdate, (i) => controller.drain(parse(DrainInput, i)), {
    validator: (i) => void parse(DrainInput, i),
    description: describeHandler(UPDATE_DOCS.drain),
  });
  setHandler(runtimeReportSignal, (report) => recovery.onRuntimeReport(report), {
    description: describeHandler(SIGNAL_DOCS.runtimeReport),
  });
}

function unknownName(what: string, name: string, known: readonly string[]): string {
  const near = closestName(name, known);
  return `the session has no ${what} named ${JSON.stringify(name.slice(0, 100))}${near ? ` (did you mean "${near}"?)` : ''}`;
}
