import {
  allHandlersFinished,
  ApplicationFailure,
  condition,
  deprecatePatch,
  makeContinueAsNewFunc,
  setDefaultQueryHandler,
  patched,
  setDefaultSignalHandler,
  setDefaultUpdateHandler,
  setHandler,
  workflowInfo,
} from '@temporalio/workflow';
import {
  appliesTo,
  CONTROL_NAMES,
  CONTROLS,
  notForRuntime,
  type ControlInput,
  type ControlName,
  type ControlResult,
  type ControlSpec,
} from '../api/controls';
import {
  drainUpdate,
  runtimeReportSignal,
  startUpdate,
  statusQuery,
  timelineQuery,
  type StopResult,
} from '../api/messages';
import { ERROR_CODES } from '../domain/error-codes';
import { closestName } from '../domain/names';
import { SessionWorkflowInput } from '../domain/records';
import { DrainInput, type VerifyInput } from '../domain/schemas';
import { isFinal, type Control } from '../domain/session-state';
import { ControlQueue } from './control-queue';
import { failure } from './failures';
import { parse, parseControl } from './inputs';
import { Recovery } from './recovery';
import { now, Session, stateOf } from './session';
import { SessionController } from './session-controller';
import { PolicyClock } from './policies';
import { RunControls } from './run-control';
import { TimelineFlush } from './timeline-flush';
import { CONTROL_RUNTIMES_PATCH, FAILURE_DETAILS_PATCH, RUN_CONTROL_PATCH } from './patches';
import { describeHandler, QUERY_DOCS, SIGNAL_DOCS, UPDATE_DOCS } from './handler-descriptions';

/** Updates and signals a caller may send, for the "did you mean" of an unknown name. */
const CONTROL_NAMES_SENT = ['start', ...CONTROL_NAMES];
const SIGNAL_NAMES = CONTROL_NAMES.flatMap((n) => {
  const { signal } = CONTROLS[n] as ControlSpec;
  return signal ? [signal.name] : [];
});
const QUERY_NAMES = [statusQuery.name, timelineQuery.name];

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
  setSessionHandlers(session, recovery, controller);
  setControlHandlers(session, queue, controller, runControls, policies);
  // What the previous run kept for this one goes first, then whatever was buffered meanwhile.
  queue.replayDeferred();
  // A name nobody defined is a typed refusal naming the closest real one, not the SDK's untyped "no handler".
  setDefaultUpdateHandler((name) => {
    throw failure(ERROR_CODES.InvalidInput, unknownName('update', name, CONTROL_NAMES_SENT));
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
  deprecatePatch(RUN_CONTROL_PATCH);
  await condition(() => (queue.idle && isFinal(state.phase)) || shouldContinueAsNew());
  // A run that hands over starts nothing new: updates are refused (Busy, the client sends them again), signals are
  // kept for the next run. So the queue drains even under a storm of controls.
  if (!isFinal(state.phase)) queue.drain();
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

/** What each control does once accepted (the registry says how it is accepted). */
type Behaviours = { [N in ControlName]: (input: ControlInput<N>) => Promise<ControlResult<N>> };

/**
 * The handlers of every control in the registry: its update (validated synchronously, then queued) and its signal
 * twin. Controls the registry marks as not queued (verify, touch) are answered beside the queue.
 */
function setControlHandlers(
  session: Session,
  queue: ControlQueue,
  controller: SessionController,
  run: RunControls,
  policies: PolicyClock,
): void {
  const touch = async () => {
    session.runControl.lastActivityAt = now();
    policies.replan();
    return { lastActivityAt: session.runControl.lastActivityAt };
  };
  const behaviours: Behaviours = {
    checkpoint: (x) => controller.checkpoint(x),
    pause: (x) => controller.pause(x),
    resume: (x) => controller.resume(x),
    stop: (x) => controller.stop(x),
    verify: (x) => controller.verifyAll(x),
    rewind: (x) => run.rewind(x),
    fork: (x) => run.fork(x),
    branch: (x) => run.branch(x),
    configure: (x) => run.configure(x),
    touch,
    append: (x) => run.append(x),
    regenerate: (x) => run.regenerate(x),
  };
  // A control its runtime kind cannot serve is refused before it is accepted: no history, no timeline entry.
  const kind = session.state.spec.runtime.kind;
  const servable = (name: ControlName) => {
    if (!appliesTo(name, kind)) throw failure(ERROR_CODES.InvalidInput, notForRuntime(name, kind, session.id));
  };
  for (const name of CONTROL_NAMES) {
    const spec = CONTROLS[name] as ControlSpec;
    const does = behaviours[name] as (input: unknown) => Promise<unknown>;
    const description = describeHandler(UPDATE_DOCS[name]);
    if (spec.queued) {
      const control = name as Control;
      setHandler(spec.update, (i: unknown) => queue.accept(control, parseControl(spec.input, i) as object, does), {
        validator: (i: unknown) => {
          queue.validate(control, spec.input as never, i);
          servable(name);
        },
        description,
      });
      if (spec.signal) {
        // Refusing here is new for signals (their handlers run again on replay): behind a patch, asked only then.
        const check = () => {
          if (!appliesTo(name, kind) && patched(CONTROL_RUNTIMES_PATCH)) servable(name);
        };
        setHandler(
          spec.signal,
          queue.fromSignal(spec.signal.name, control, spec.input as never, does, check) as (i: unknown) => void,
          {
            description: describeHandler(SIGNAL_DOCS[spec.signal.name as keyof typeof SIGNAL_DOCS]),
          },
        );
      }
      continue;
    }
    // Beside the queue: the validator checks the input (and what the control names), the handler answers.
    const check = name === 'verify' ? (i: VerifyInput) => session.checkKnownCheckpoint(i.checkpointId) : () => {};
    setHandler(spec.update, (i: unknown) => does(parseControl(spec.input, i)), {
      validator: (i: unknown) => {
        check(parseControl(spec.input, i) as VerifyInput);
        servable(name);
      },
      description,
    });
    if (spec.signal) {
      const signal = spec.signal.name;
      setHandler(
        spec.signal,
        (i) => {
          try {
            does(parseControl(spec.input, i)).catch((err: unknown) => session.rejectSignal(signal, err));
          } catch (err) {
            session.rejectSignal(signal, err);
          }
        },
        { description: describeHandler(SIGNAL_DOCS[signal as keyof typeof SIGNAL_DOCS]) },
      );
    }
  }
}

/** The messages of the session itself: its start, a worker's drain, and its host's reports. */
function setSessionHandlers(session: Session, recovery: Recovery, controller: SessionController): void {
  setHandler(startUpdate, () => controller.awaitStarted(), {
    validator: (spec) => session.checkSameSpec(spec),
    description: describeHandler(UPDATE_DOCS.start),
  });
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
