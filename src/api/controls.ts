import type { SignalDefinition, UpdateDefinition } from '@temporalio/common';
import type { z } from 'zod';
import {
  AppendInput,
  BranchInput,
  CheckpointInput,
  ConfigureInput,
  ForkInput,
  PauseInput,
  RegenerateInput,
  ResumeInput,
  RewindInput,
  StopInput,
  TouchInput,
  VerifyInput,
  RUNTIME_KINDS,
  type RuntimeKind,
} from '../domain/schemas';
import { planControl, STABLE_PHASES, type Control, type StablePhase } from '../domain/session-state';
import {
  appendSignal,
  appendUpdate,
  branchUpdate,
  checkpointSignal,
  checkpointUpdate,
  configureSignal,
  configureUpdate,
  forkUpdate,
  pauseSignal,
  pauseUpdate,
  regenerateUpdate,
  resumeSignal,
  resumeUpdate,
  rewindUpdate,
  stopSignal,
  stopUpdate,
  touchSignal,
  touchUpdate,
  verifyUpdate,
} from './messages';

/**
 * The registry of session controls: every verb a caller sends to a session, once. The workflow registers its update
 * and signal handlers from it, `SessionHandle`, the gateway's routes and the CLI are checked against it (a test fails
 * when a surface lacks one), and the Web UI's handler descriptions are rendered from it. Adding a control is one entry
 * here plus its behaviour. Wire names (updates, signals, operation ids) are a public API: never rename one.
 */

/** What an operator reads about a control: what it does, its input fields, and inputs that parse. */
export interface ControlDoc {
  does: string;
  /** Every field of the input schema, with what it means. */
  fields: Record<string, string>;
  /** Inputs that parse, shown as JSON. */
  examples: unknown[];
}

export interface ControlSpec<I = unknown, R = unknown> {
  /** The update (its wire name is the control's name). */
  update: UpdateDefinition<R, [I]>;
  /** The fire-and-forget twin: same input, no answer; a refusal shows in status and the timeline. */
  signal?: SignalDefinition<[I]>;
  input: z.ZodType<I>;
  /**
   * Runs through the session's control queue: one at a time, in order, checked against the phase the session will be
   * in (the domain's state table, `planControl`). Otherwise it is answered beside the queue in any phase.
   */
  queued: boolean;
  /** The runtime kinds the control applies to; any other kind's session refuses it at validation (InvalidInput). */
  runtimes: readonly RuntimeKind[];
  /** One line for the HTTP summary and the CLI. */
  summary: string;
  doc: ControlDoc;
}

const ifHead = 'apply only while this checkpoint id is the head, else Conflict';
const ifIndex = 'apply only while the head is at this timeline index, else Conflict';
const idempotencyKey = 'a repeat with the same key gets the first outcome, across runs too';
const CONTROL_FIELDS = { idempotencyKey, ifHead, ifIndex };
const FORK_FIELDS = {
  newSessionId: 'the new session id (with count > 1, `<id>-<n>`); generated when absent',
  count: 'how many forks, 1 to 32 (default 1)',
  overrides: 'description, labels, retention, policies, backgroundVerify, liveness the forks set differently',
  paused: 'leave the forks paused at their first checkpoint',
  label: 'label of the forks’ first checkpoint',
  ...CONTROL_FIELDS,
};
const SELECTOR = 'a checkpoint’s timeline index (3) or its id ("000003-1a2b3c4d")';

/** An entry, typed by its update: the input schema and signal must carry the update's input. */
function control<I, R>(
  spec: ControlSpec<I, R> & { signal: SignalDefinition<[I]> },
): ControlSpec<I, R> & { signal: SignalDefinition<[I]> };
function control<I, R>(spec: ControlSpec<I, R>): ControlSpec<I, R>;
function control<I, R>(spec: ControlSpec<I, R>): ControlSpec<I, R> {
  return spec;
}

export const CONTROLS = {
  checkpoint: control({
    update: checkpointUpdate,
    signal: checkpointSignal,
    input: CheckpointInput,
    queued: true,
    runtimes: RUNTIME_KINDS,
    summary: "capture the running session's state as a new checkpoint",
    doc: {
      does: 'Capture the running session into a new checkpoint; returns its reference.',
      fields: { label: 'a name shown in the timeline; labelled checkpoints survive retention', ...CONTROL_FIELDS },
      examples: [{ label: 'before upgrade', idempotencyKey: 'checkpoint-1' }],
    },
  }),
  pause: control({
    update: pauseUpdate,
    signal: pauseSignal,
    input: PauseInput,
    queued: true,
    runtimes: RUNTIME_KINDS,
    summary: 'checkpoint, then stop the runtime to free its compute',
    doc: {
      does: 'Checkpoint the session, then stop its runtime to free compute; returns the checkpoint.',
      fields: { reason: 'why, kept in the timeline and shown in the current details', ...CONTROL_FIELDS },
      examples: [{ reason: 'maintenance' }, {}],
    },
  }),
  resume: control({
    update: resumeUpdate,
    signal: resumeSignal,
    input: ResumeInput,
    queued: true,
    runtimes: RUNTIME_KINDS,
    summary: 'restore the newest checkpoint that verifies into a fresh runtime',
    doc: {
      does: 'Restore a paused session from its newest (or the given) checkpoint that verifies, falling back to older ones.',
      fields: { checkpointId: 'restore this checkpoint instead of the head', ...CONTROL_FIELDS },
      examples: [{}, { checkpointId: '000002-1a2b3c4d' }],
    },
  }),
  stop: control({
    update: stopUpdate,
    signal: stopSignal,
    input: StopInput,
    queued: true,
    runtimes: RUNTIME_KINDS,
    summary: 'end the session, with a final checkpoint of a running session',
    doc: {
      does: 'Stop the session for good, with a final checkpoint of a running session by default.',
      fields: {
        checkpoint: 'take the final checkpoint (default: the checkpointBeforeStop policy, true)',
        reason: 'why, shown in the current details',
        ...CONTROL_FIELDS,
      },
      examples: [{ reason: 'done' }, { checkpoint: false }],
    },
  }),
  verify: control({
    update: verifyUpdate,
    input: VerifyInput,
    queued: false,
    runtimes: RUNTIME_KINDS,
    summary:
      "read the session's checkpoints back from the store on a worker (every chunk authenticated), " +
      'also after the session ended',
    doc: {
      does: 'Read checkpoints back from the store (every chunk authenticated); returns what each one is.',
      fields: { checkpointId: 'verify this one only (default: every checkpoint the session keeps)' },
      examples: [{}, { checkpointId: '000002-1a2b3c4d' }],
    },
  }),
  rewind: control({
    update: rewindUpdate,
    input: RewindInput,
    queued: true,
    runtimes: RUNTIME_KINDS,
    summary: 'go back to a checkpoint (a timeline index or a checkpoint id) in place; a new branch starts there',
    doc: {
      does:
        'Go back to a checkpoint in place: a running session is checkpointed first (trigger rewind-safety), later ' +
        'checkpoints are kept and a new branch starts there.',
      fields: {
        to: `where to go: ${SELECTOR}; exactly one of to and messageIndex`,
        messageIndex: 'conversation runtime: the state after this many messages',
        reason: 'why, kept in the timeline',
        ...CONTROL_FIELDS,
      },
      examples: [{ to: 3 }, { to: '000003-1a2b3c4d', reason: 'bad upgrade' }],
    },
  }),
  fork: control({
    update: forkUpdate,
    input: ForkInput,
    queued: true,
    runtimes: RUNTIME_KINDS,
    summary: 'start new sessions from a checkpoint of this one (chunks shared, nothing copied)',
    doc: {
      does: 'Start new, independent sessions from a checkpoint (chunks shared, nothing copied); this one is unchanged.',
      fields: {
        from: `the checkpoint: ${SELECTOR} (default: the head)`,
        messageIndex: 'conversation runtime: fork from the state after this many messages',
        ...FORK_FIELDS,
      },
      examples: [{ from: 3, newSessionId: 'build-42-try', count: 1 }],
    },
  }),
  branch: control({
    update: branchUpdate,
    input: BranchInput,
    queued: true,
    runtimes: RUNTIME_KINDS,
    summary: 'fork the current state (a running session is checkpointed first)',
    doc: {
      does: 'Fork the current state (a running session is checkpointed first).',
      fields: FORK_FIELDS,
      examples: [{ count: 3 }, { newSessionId: 'build-42-b' }],
    },
  }),
  configure: control({
    update: configureUpdate,
    signal: configureSignal,
    input: ConfigureInput,
    queued: true,
    runtimes: RUNTIME_KINDS,
    summary: "replace the live session's policies and/or retention",
    doc: {
      does: 'Replace the policies and/or retention of the live session.',
      fields: {
        policies:
          'checkpointEveryMs, checkpointOnlyIfActive, checkpointBeforeStop, idlePauseAfterMs, stopPausedAfterMs; {} turns them off',
        retention: 'keepLast, maxAgeMs, keepLabelled',
        ...CONTROL_FIELDS,
      },
      examples: [
        { policies: { checkpointEveryMs: 600000, idlePauseAfterMs: 7200000 } },
        { retention: { keepLast: 20 } },
      ],
    },
  }),
  touch: control({
    update: touchUpdate,
    signal: touchSignal,
    input: TouchInput,
    queued: false,
    runtimes: RUNTIME_KINDS,
    summary: 'say the session is in use: its idle timer starts again',
    doc: { does: 'The session is in use: its idle timer starts again.', fields: {}, examples: [{}] },
  }),
  append: control({
    update: appendUpdate,
    signal: appendSignal,
    input: AppendInput,
    queued: true,
    runtimes: ['conversation'],
    summary: 'conversation runtime: append messages, with a checkpoint after them when asked (trigger turn)',
    doc: {
      does: 'Conversation runtime: append messages, with a checkpoint after them when "checkpoint" is true (trigger turn).',
      fields: {
        messages: 'the messages: role (system, user, assistant, tool), content, toolCalls, toolCallId',
        checkpoint: 'checkpoint once they are stored',
        label: 'label of that checkpoint',
        ...CONTROL_FIELDS,
      },
      examples: [{ messages: [{ role: 'user', content: 'hi' }], checkpoint: true }],
    },
  }),
  regenerate: control({
    update: regenerateUpdate,
    input: RegenerateInput,
    queued: true,
    runtimes: ['conversation'],
    summary: 'conversation runtime: fork from just before the last assistant turn, to answer it again',
    doc: {
      does:
        'Conversation runtime: fork from just before the last assistant turn, to answer it again; the replaced turn is ' +
        'marked regenerated.',
      fields: FORK_FIELDS,
      examples: [{}, { newSessionId: 'chat-7-retry' }],
    },
  }),
};

export type ControlName = keyof typeof CONTROLS;
export const CONTROL_NAMES = Object.keys(CONTROLS) as ControlName[];

/** What a control takes and what it answers, by name. */
export type ControlInput<N extends ControlName> =
  (typeof CONTROLS)[N] extends ControlSpec<infer I, unknown> ? I : never;
export type ControlResult<N extends ControlName> =
  (typeof CONTROLS)[N] extends ControlSpec<unknown, infer R> ? R : never;

/** The controls with a fire-and-forget twin. */
export type SignalledControl = {
  [N in ControlName]: (typeof CONTROLS)[N] extends { signal: SignalDefinition<unknown[]> } ? N : never;
}[ControlName];

export function isControlName(name: string): name is ControlName {
  return Object.hasOwn(CONTROLS, name);
}

/**
 * The stable phases a control may be sent from, read off the domain's state table (`planControl`): queued controls
 * are checked against it, the others are answered in any phase the session is alive in.
 */
export function phasesFrom(name: ControlName): readonly StablePhase[] {
  if (!CONTROLS[name].queued) return STABLE_PHASES.filter((p) => p !== 'completed' && p !== 'failed');
  return STABLE_PHASES.filter((p) => planControl(p, name as Control).ok);
}

/** Whether a session of this runtime kind serves the control. */
export function appliesTo(name: ControlName, kind: RuntimeKind): boolean {
  return CONTROLS[name].runtimes.includes(kind);
}

/** Why a session of this kind refuses the control, for its InvalidInput. */
export function notForRuntime(name: ControlName, kind: RuntimeKind, sessionId: string): string {
  const kinds = CONTROLS[name].runtimes.join(', ');
  return `${name} applies to ${kinds} sessions; session ${sessionId} is a ${kind} session`;
}

/** A method per control, named as the control (`SessionHandle` implements it, so none can be missing). */
export type ControlMethods = { [N in ControlName]: (input: ControlInput<N>) => Promise<unknown> };
