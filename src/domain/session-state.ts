/**
 * The session lifecycle as a pure state machine: no Temporal, no I/O. The workflow is a thin adapter
 * that feeds it events and turns `ok: false` into a typed failure.
 *
 *   starting → running ⇄ checkpointing
 *   running → pausing → paused → resuming → running
 *   running → rewinding → running (or paused, when neither the target nor the safety checkpoint restores)
 *   running | paused → stopping → completed
 *   any non-final → failed (with a reason)
 */

export const PHASES = [
  'starting',
  'running',
  'checkpointing',
  'pausing',
  'paused',
  'resuming',
  'rewinding',
  'stopping',
  'completed',
  'failed',
] as const;
export type Phase = (typeof PHASES)[number];

/** Phases in which no operation is in progress: the only ones a control can start from. */
export const STABLE_PHASES = ['running', 'paused', 'completed', 'failed'] as const;
export type StablePhase = (typeof STABLE_PHASES)[number];

export const FINAL_PHASES: readonly Phase[] = ['completed', 'failed'];

export type SessionEvent =
  | { type: 'started' }
  | { type: 'checkpointRequested' }
  | { type: 'checkpointSucceeded' }
  | { type: 'checkpointFailed' }
  | { type: 'pauseRequested' }
  | { type: 'pauseSucceeded' }
  | { type: 'pauseFailed' }
  | { type: 'resumeRequested' }
  | { type: 'resumeSucceeded' }
  | { type: 'resumeFailed' }
  | { type: 'stopRequested' }
  | { type: 'stopSucceeded' }
  | { type: 'stopFailed' }
  | { type: 'rewindRequested' }
  | { type: 'rewindSucceeded' }
  | { type: 'rewindFailed' }
  | { type: 'rewindAborted' }
  | { type: 'runtimeLost' }
  | { type: 'runtimeExited'; exitCode: number | null; signal: string | null }
  | { type: 'failed'; reason: string };

export type SessionEventType = SessionEvent['type'];

export type TransitionResult = { ok: true; phase: Phase; failureReason?: string } | { ok: false; reason: string };

/** Legal (phase, event) pairs for the events that do not depend on their payload. */
const TABLE: Partial<Record<SessionEventType, Partial<Record<Phase, Phase>>>> = {
  started: { starting: 'running' },
  checkpointRequested: { running: 'checkpointing' },
  checkpointSucceeded: { checkpointing: 'running' },
  // A failed capture leaves the runtime as it was: still running.
  checkpointFailed: { checkpointing: 'running' },
  pauseRequested: { running: 'pausing' },
  pauseSucceeded: { pausing: 'paused' },
  // The checkpoint could not be made durable, so the runtime was not stopped: nothing is lost.
  pauseFailed: { pausing: 'running' },
  resumeRequested: { paused: 'resuming' },
  resumeSucceeded: { resuming: 'running' },
  // Restore could not finish for a reason that is not the checkpoint's fault (retries ran out, no host):
  // the checkpoints are intact, so the session waits, paused, for another resume.
  resumeFailed: { resuming: 'paused' },
  stopRequested: { running: 'stopping', paused: 'stopping' },
  stopSucceeded: { stopping: 'completed' },
  // The final checkpoint could not be written, so the runtime was left running.
  stopFailed: { stopping: 'running' },
  rewindRequested: { running: 'rewinding' },
  rewindSucceeded: { rewinding: 'running' },
  // The target could not be restored: the safety checkpoint was, so the session runs as it did before the rewind.
  rewindFailed: { rewinding: 'running' },
  // Neither the target nor the safety checkpoint could be restored: the session waits, paused, like a failed resume.
  rewindAborted: { rewinding: 'paused' },
  // The runtime's host went away: the session is brought back from its newest checkpoint.
  // A pause whose capture found the host gone recovers the session first, then pauses it.
  runtimeLost: { running: 'resuming', checkpointing: 'resuming', pausing: 'resuming' },
};

/** What a session's failure says of a runtime process that ended by itself with a failure. */
export function exitMessage(exitCode: number | null, signal: string | null): string {
  const how = signal ? `was killed by ${signal}` : `exited with code ${exitCode}`;
  return `the runtime process ${how}`;
}

export function isFinal(phase: Phase): boolean {
  return FINAL_PHASES.includes(phase);
}

export function transition(phase: Phase, event: SessionEvent): TransitionResult {
  if (event.type === 'failed') {
    if (isFinal(phase)) return { ok: false, reason: `session is ${phase}; it cannot fail again` };
    return { ok: true, phase: 'failed', failureReason: event.reason };
  }
  if (event.type === 'runtimeExited') {
    // Only an exit nobody asked for is an event; exits during pause or stop are the runtime doing as told.
    if (phase !== 'running' && phase !== 'checkpointing') {
      return { ok: false, reason: `an unrequested runtime exit is not expected while ${phase}` };
    }
    if (event.exitCode === 0) return { ok: true, phase: 'completed' };
    return { ok: true, phase: 'failed', failureReason: exitMessage(event.exitCode, event.signal) };
  }
  const next = TABLE[event.type]?.[phase];
  if (next === undefined)
    return { ok: false, reason: `cannot ${describeEvent(event.type)} while the session is ${phase}` };
  return { ok: true, phase: next };
}

/** The lifecycle controls: each runs from a stable phase, through a transient one, to a stable one. */
export type LifecycleControl = 'checkpoint' | 'pause' | 'resume' | 'stop';

/** Run-control verbs: they leave the session in the phase it was in (rewind runs a running one through `rewinding`). */
export type RunControl = 'rewind' | 'fork' | 'branch' | 'configure' | 'append' | 'regenerate';

/** The controls a caller can send. */
export type Control = LifecycleControl | RunControl;

/** Where each run-control verb may start from. */
const RUN_CONTROL_FROM: Record<RunControl, readonly StablePhase[]> = {
  rewind: ['running', 'paused'],
  fork: ['running', 'paused'],
  branch: ['running', 'paused'],
  configure: ['running', 'paused'],
  append: ['running'],
  regenerate: ['running', 'paused'],
};

const CONTROL_EVENTS: Record<LifecycleControl, SessionEventType> = {
  checkpoint: 'checkpointRequested',
  pause: 'pauseRequested',
  resume: 'resumeRequested',
  stop: 'stopRequested',
};

/** Where a control leaves the session when it succeeds. */
const CONTROL_TARGET: Record<LifecycleControl, StablePhase> = {
  checkpoint: 'running',
  pause: 'paused',
  resume: 'running',
  stop: 'completed',
};

/**
 * Checks a control against the phase the session will be in once every control accepted before it has
 * run (`projected`), and returns that phase after this control. Controls run one at a time in the order
 * they were accepted, so this is what makes "pause, then resume" legal back to back.
 */
export function planControl(
  projected: StablePhase,
  control: Control,
): { ok: true; projected: StablePhase } | { ok: false; reason: string } {
  if (isRunControl(control)) {
    const from = RUN_CONTROL_FROM[control];
    if (!from.includes(projected)) return { ok: false, reason: `cannot ${control} while the session is ${projected}` };
    return { ok: true, projected };
  }
  const result = transition(projected, { type: CONTROL_EVENTS[control] } as SessionEvent);
  if (!result.ok) return { ok: false, reason: `cannot ${control} while the session is ${projected}` };
  return { ok: true, projected: CONTROL_TARGET[control] };
}

function isRunControl(control: Control): control is RunControl {
  return Object.hasOwn(RUN_CONTROL_FROM, control);
}

export function isStable(phase: Phase): phase is StablePhase {
  return (STABLE_PHASES as readonly Phase[]).includes(phase);
}

function describeEvent(type: SessionEventType): string {
  switch (type) {
    case 'started':
      return 'finish starting';
    case 'checkpointRequested':
      return 'checkpoint';
    case 'pauseRequested':
      return 'pause';
    case 'resumeRequested':
      return 'resume';
    case 'stopRequested':
      return 'stop';
    default:
      return `apply ${type}`;
  }
}
