import { z } from 'zod';
import { RuntimeReport } from '../domain/records';
import { CONTROL_NAMES, CONTROLS, type ControlName, type ControlSpec } from '../api/controls';
import { DrainInput, StartSessionInput } from '../domain/schemas';

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

/** A control of the registry as the Web UI describes it: its doc with its input schema. */
function controlDoc(name: ControlName): HandlerDoc {
  const { doc, input } = CONTROLS[name] as ControlSpec;
  return { does: doc.does, input: { schema: input, fields: doc.fields, examples: doc.examples } };
}

const CONTROL_DOCS = Object.fromEntries(CONTROL_NAMES.map((n) => [n, controlDoc(n)])) as Record<
  ControlName,
  HandlerDoc
>;

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
        placement: 'host (a worker id) or workerLabels it must run on',
      },
      examples: [{ sessionId: 'build-42', runtime: { kind: 'memory' } }],
    },
  },
  ...CONTROL_DOCS,
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
  ...(Object.fromEntries(
    CONTROL_NAMES.flatMap((n) => {
      const { signal } = CONTROLS[n] as ControlSpec;
      return signal ? [[signal.name, fireAndForget(n, CONTROL_DOCS[n])]] : [];
    }),
  ) as Record<string, HandlerDoc>),
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
