import { z } from 'zod';
import { RuntimeReport } from '../domain/records';
import {
  AppendInput,
  BranchInput,
  CheckpointInput,
  ConfigureInput,
  DrainInput,
  ForkInput,
  PauseInput,
  RegenerateInput,
  ResumeInput,
  RewindInput,
  StartSessionInput,
  StopInput,
  TouchInput,
  VerifyInput,
} from '../domain/schemas';

/**
 * What the Web UI lists for each update, signal and query of the session workflow (and its "Send an Update" form
 * shows): what the handler does, its input fields, and inputs to copy. The description is rendered from these parts,
 * and a unit test parses every example it shows with the handler's schema, so a description cannot drift from the
 * input it documents.
 */
export interface HandlerDoc {
  does: string;
  /** Absent for handlers without input (queries). */
  input?: {
    schema: z.ZodType;
    /** Every field of the schema, with what it means. */
    fields: Record<string, string>;
    /** Inputs that parse, shown as JSON. */
    examples: unknown[];
  };
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
const SELECTOR = 'a timeline index (3) or a checkpoint id ("000003-1a2b3c4d")';

const checkpoint: HandlerDoc = {
  does: 'Capture the running session into a new checkpoint; returns its reference.',
  input: {
    schema: CheckpointInput,
    fields: { label: 'a name shown in the timeline; labelled checkpoints survive retention', ...CONTROL_FIELDS },
    examples: [{ label: 'before upgrade', idempotencyKey: 'checkpoint-1' }],
  },
};
const pause: HandlerDoc = {
  does: 'Checkpoint the session, then stop its runtime to free compute; returns the checkpoint.',
  input: {
    schema: PauseInput,
    fields: { reason: 'why, kept in the timeline and shown in the current details', ...CONTROL_FIELDS },
    examples: [{ reason: 'maintenance' }, {}],
  },
};
const resume: HandlerDoc = {
  does: 'Restore a paused session from its newest (or the given) checkpoint that verifies, falling back to older ones.',
  input: {
    schema: ResumeInput,
    fields: { checkpointId: 'restore this checkpoint instead of the head', ...CONTROL_FIELDS },
    examples: [{}, { checkpointId: '000002-1a2b3c4d' }],
  },
};
const stop: HandlerDoc = {
  does: 'Stop the session for good, with a final checkpoint of a running session by default.',
  input: {
    schema: StopInput,
    fields: {
      checkpoint: 'take the final checkpoint (default: the checkpointBeforeStop policy, true)',
      reason: 'why, shown in the current details',
      ...CONTROL_FIELDS,
    },
    examples: [{ reason: 'done' }, { checkpoint: false }],
  },
};
const configure: HandlerDoc = {
  does: 'Replace the policies and/or retention of the live session.',
  input: {
    schema: ConfigureInput,
    fields: {
      policies:
        'checkpointEveryMs, checkpointOnlyIfActive, checkpointBeforeStop, idlePauseAfterMs, stopPausedAfterMs; {} turns them off',
      retention: 'keepLast, maxAgeMs, keepLabelled',
      ...CONTROL_FIELDS,
    },
    examples: [{ policies: { checkpointEveryMs: 600000, idlePauseAfterMs: 7200000 } }, { retention: { keepLast: 20 } }],
  },
};
const touch: HandlerDoc = {
  does: 'The session is in use: its idle timer starts again.',
  input: { schema: TouchInput, fields: {}, examples: [{}] },
};
const append: HandlerDoc = {
  does: 'Conversation runtime: append messages, with a checkpoint after them when "checkpoint" is true (trigger turn).',
  input: {
    schema: AppendInput,
    fields: {
      messages: 'the messages: role (system, user, assistant, tool), content, toolCalls, toolCallId',
      checkpoint: 'checkpoint once they are stored',
      label: 'label of that checkpoint',
      ...CONTROL_FIELDS,
    },
    examples: [{ messages: [{ role: 'user', content: 'hi' }], checkpoint: true }],
  },
};

/** Updates, by wire name. */
export const UPDATE_DOCS = {
  start: {
    does:
      'Waits until the session is running and returns its status (or the failure that ended the start). Sent with ' +
      'the start by clients; the same spec again is a harmless repeat, another spec is refused.',
    input: {
      schema: StartSessionInput,
      fields: {
        sessionId: 'the session id',
        tenant: 'whose session (default "default")',
        runtime: 'kind workspace, memory or conversation, with its settings',
        liveness: 'heartbeatTimeoutMs, hostTimeoutMs',
        retention: 'keepLast, maxAgeMs, keepLabelled',
        policies: 'checkpointEveryMs, idlePauseAfterMs, stopPausedAfterMs, …',
        backgroundVerify: 'read each checkpoint back after it is written',
        description: 'shown in the Web UI',
        labels: 'search attribute SessionLabels',
      },
      examples: [{ sessionId: 'build-42', runtime: { kind: 'memory' } }],
    },
  },
  checkpoint,
  pause,
  resume,
  stop,
  verify: {
    does: 'Read checkpoints back from the store (every chunk authenticated); returns what each one is.',
    input: {
      schema: VerifyInput,
      fields: { checkpointId: 'verify this one only (default: every checkpoint the session keeps)' },
      examples: [{}, { checkpointId: '000002-1a2b3c4d' }],
    },
  },
  rewind: {
    does:
      'Go back to a checkpoint in place: a running session is checkpointed first (trigger rewind-safety), later ' +
      'checkpoints are kept and a new branch starts there.',
    input: {
      schema: RewindInput,
      fields: {
        to: `where to go: ${SELECTOR}; exactly one of to and messageIndex`,
        messageIndex: 'conversation runtime: the state after this many messages',
        reason: 'why, kept in the timeline',
        ...CONTROL_FIELDS,
      },
      examples: [{ to: 3 }, { to: '000003-1a2b3c4d', reason: 'bad upgrade' }],
    },
  },
  fork: {
    does: 'Start new, independent sessions from a checkpoint (chunks shared, nothing copied); this one is unchanged.',
    input: {
      schema: ForkInput,
      fields: {
        from: `the checkpoint: ${SELECTOR} (default: the head)`,
        messageIndex: 'conversation runtime: fork from the state after this many messages',
        ...FORK_FIELDS,
      },
      examples: [{ from: 3, newSessionId: 'build-42-try', count: 1 }],
    },
  },
  branch: {
    does: 'Fork the current state (a running session is checkpointed first).',
    input: { schema: BranchInput, fields: FORK_FIELDS, examples: [{ count: 3 }, { newSessionId: 'build-42-b' }] },
  },
  configure,
  touch,
  append,
  regenerate: {
    does:
      'Conversation runtime: fork from just before the last assistant turn, to answer it again; the replaced turn is ' +
      'marked regenerated.',
    input: { schema: RegenerateInput, fields: FORK_FIELDS, examples: [{}, { newSessionId: 'chat-7-retry' }] },
  },
  drain: {
    does:
      'Sent by a worker that shuts down: checkpoint (trigger drain), stop the runtime there, answer, then restore on ' +
      'another worker; a session hosted elsewhere is left alone.',
    input: {
      schema: DrainInput,
      fields: { hostTaskQueue: 'the draining host (required)', reason: 'why, kept with the checkpoint' },
      examples: [{ hostTaskQueue: 'durable-sessions@host-1' }],
    },
  },
} satisfies Record<string, HandlerDoc>;

/** A signal is its update without an answer: a refusal shows in status (`rejectedSignals`) and the timeline. */
function fireAndForget(update: string, doc: HandlerDoc): HandlerDoc {
  return { ...doc, does: `Fire-and-forget ${update}: no answer, a refusal shows in status. ${doc.does}` };
}

/** Signals, by wire name. */
export const SIGNAL_DOCS = {
  requestCheckpoint: fireAndForget('checkpoint', checkpoint),
  requestPause: fireAndForget('pause', pause),
  requestResume: fireAndForget('resume', resume),
  requestStop: fireAndForget('stop', stop),
  requestConfigure: fireAndForget('configure', configure),
  touch: fireAndForget('touch', touch),
  requestAppend: fireAndForget('append', append),
  runtimeReport: {
    does: "Sent by the host's monitor workflow: the session's runtime instance ended, or its host is lost.",
    input: {
      schema: RuntimeReport,
      fields: {
        outcome: 'exited or lost',
        instanceId: 'the instance (a report of another one is late and ignored)',
        exitCode: 'exited: the exit code, or null',
        signal: 'exited: the signal, or null',
        stoppedByHost: 'exited: stopped by its host rather than by the session',
        reason: 'lost: why the host is considered lost',
      },
      examples: [{ outcome: 'lost', instanceId: 'build-42-1a2b3c4d', reason: 'host stopped heartbeating' }],
    },
  },
} satisfies Record<string, HandlerDoc>;

/** Queries, by wire name. */
export const QUERY_DOCS = {
  status: { does: 'Current phase, runtime, head checkpoint, last restore, failure and policies. No input.' },
  timeline: {
    does:
      'The newest timeline entries (checkpoints, restores, rewinds, forks, verifications…) with their stable ' +
      'indices, oldest first; the whole timeline is in the snapshot store (CLI: `timeline --from`). No input.',
  },
} satisfies Record<string, HandlerDoc>;

/**
 * `does` followed by the input: `Input: \`reason\`: why…; \`idempotencyKey\`: … (all optional). Example:
 * \`{"reason":"maintenance"}\`.` Required fields say so; every example is one line of JSON in backticks.
 */
export function describeHandler(doc: HandlerDoc): string {
  if (!doc.input) return doc.does;
  const { schema, fields, examples } = doc.input;
  const names = Object.keys(fields);
  const shape = schema instanceof z.ZodObject ? (schema.shape as Record<string, z.ZodType>) : undefined;
  const required = (name: string) => shape?.[name] !== undefined && !shape[name].safeParse(undefined).success;
  const listed = names.map((n) => `\`${n}\`${required(n) ? ' (required)' : ''}: ${fields[n]}`).join('; ');
  const allOptional = shape !== undefined && names.length > 0 && !names.some(required);
  const input = names.length ? `Input: ${listed}${allOptional ? ' (all optional)' : ''}.` : 'Input: {} (no fields).';
  const shown = examples.map((e) => `\`${JSON.stringify(e)}\``).join(' or ');
  return `${doc.does} ${input} ${examples.length > 1 ? 'Examples' : 'Example'}: ${shown}.`;
}
