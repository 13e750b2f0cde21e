import { Client, Connection, isGrpcServiceError } from '@temporalio/client';
import { isControlName, type ControlInput, type ControlName, type ControlResult, type ForkResult } from '../api';
import { SessionClient, type SessionClientOptions, type SessionHandle, type TimelinePage } from '../client';
import type { Message } from '../domain/conversation';
import type { CheckpointRef, SessionPolicies } from '../domain/schemas';
import type { Config } from '../config';
import { connectionOptions, temporalAddress } from '../temporal-connection';
import { TemporalUnavailableError, UsageError } from './errors';
import { dataConverterFromConfig, historyEncryption } from '../payloads';
import { isError } from '../errors';
import type { Invocation } from './parse';
import { withProgressBar } from './progress-bar';
import { listLines, statusLines, timelineLines, verificationReport, type Output } from './render';

type Of<C extends Invocation['command']> = Extract<Invocation, { command: C }>;

/** The commands that go through Temporal to a session. */
export type SessionInvocation = Of<
  | 'start'
  | 'checkpoint'
  | 'pause'
  | 'resume'
  | 'stop'
  | 'status'
  | 'timeline'
  | 'list'
  | 'verify'
  | 'rewind'
  | 'fork'
  | 'branch'
  | 'configure'
  | 'touch'
  | 'append'
  | 'regenerate'
>;

/** gRPC's UNAVAILABLE: the frontend went away after the connection was made. */
const GRPC_UNAVAILABLE = 14;

export async function runSessionCommand(invocation: SessionInvocation, config: Config): Promise<Output> {
  return withSessions(config, { tenant: invocation.values.tenant }, (sessions) => dispatch(invocation, sessions));
}

/** Runs `run` with a SessionClient connected as the configuration says; Temporal unreachable is its typed error. */
export async function withSessions<T>(
  config: Config,
  options: Pick<SessionClientOptions, 'store'> & { tenant?: string | undefined },
  run: (sessions: SessionClient) => Promise<T>,
): Promise<T> {
  const address = temporalAddress(config);
  const connectOptions = await connectionOptions(config, address);
  const dataConverter = await dataConverterFromConfig(config);
  const connection = await Connection.connect(connectOptions).catch((cause: unknown) => {
    throw new TemporalUnavailableError(address, { cause });
  });
  try {
    const sessions = new SessionClient({
      client: new Client({ connection, namespace: config.temporal.namespace, dataConverter }),
      taskQueue: config.taskQueue,
      ...(options.tenant !== undefined ? { tenant: options.tenant } : {}),
      ...(options.store ? { store: options.store } : {}),
    });
    return await run(sessions);
  } catch (err) {
    if (isUnavailable(err)) throw new TemporalUnavailableError(address, { cause: err });
    throw err;
  } finally {
    await connection.close();
  }
}

function isUnavailable(err: unknown): boolean {
  for (let cause: unknown = err; isError(cause); cause = cause.cause) {
    if (isGrpcServiceError(cause) && (cause.code as number) === GRPC_UNAVAILABLE) return true;
  }
  return false;
}

/**
 * How each control's command makes its input from the command line and prints its answer: one per control of the
 * registry (src/api/controls.ts), and the compiler checks there is a command of that name for each.
 */
type ControlCommands = {
  [N in ControlName]: {
    input: (invocation: Of<N>) => ControlInput<N>;
    output: (result: ControlResult<N>) => Output;
    /** Snapshot I/O: a progress bar on a terminal while it runs. */
    progress?: true;
  };
};

/** Every control is a command of the same name (a control without one does not compile). */
const everyControlIsACommand: [Exclude<ControlName, SessionInvocation['command']>] extends [never] ? true : never =
  true;
void everyControlIsACommand;

const CONTROL_COMMANDS: ControlCommands = {
  checkpoint: {
    input: ({ values: v }) => ({ label: v.label, idempotencyKey: v.key }),
    output: (c) => ({ json: c, text: [`checkpoint at ${checkpointAt(c)}, ${c.size} bytes, ${c.digest}`] }),
    progress: true,
  },
  pause: {
    input: ({ values: v }) => ({ reason: v.reason, idempotencyKey: v.key }),
    output: (c) => ({ json: c, text: [`paused; checkpoint at ${checkpointAt(c)}, ${c.size} bytes, ${c.digest}`] }),
    progress: true,
  },
  resume: {
    input: ({ values: v }) => ({ checkpointId: v.checkpoint, idempotencyKey: v.key }),
    output: (r) => ({
      json: r,
      text: [
        `resumed from the checkpoint at ${checkpointAt(r.restoredFrom)} as ${r.runtime.instanceId} (${r.runtime.location})`,
        ...(r.fallbackFrom ?? []).map((f) => `  skipped ${f.checkpointId}: ${f.reason}`),
      ],
    }),
    progress: true,
  },
  stop: {
    input: ({ values: v }) => ({ checkpoint: !v['no-checkpoint'], reason: v.reason, idempotencyKey: v.key }),
    output: (r) => ({
      json: r,
      text: [`stopped${r.finalCheckpoint ? `; final checkpoint at ${checkpointAt(r.finalCheckpoint)}` : ''}`],
    }),
  },
  verify: {
    input: ({ values: v }) => ({ checkpointId: v.checkpoint }),
    // The indices are filled in by the verify command, which reads the timeline beside it.
    output: (results) => verificationReport(results, () => undefined),
    progress: true,
  },
  rewind: {
    input: ({ values: v }) => {
      if (v.to === undefined) throw new UsageError('rewind needs --to INDEX|CHECKPOINT-ID', 'rewind');
      return { to: selector(v.to), reason: v.reason, idempotencyKey: v.key, ifHead: v['if-head'] };
    },
    output: (r) => {
      const safety = r.safetyCheckpoint ? `; safety checkpoint at ${checkpointAt(r.safetyCheckpoint)}` : '';
      const where = r.runtime ? `running as ${r.runtime.instanceId}` : 'restores on resume';
      return {
        json: r,
        text: [`rewound to the checkpoint at ${checkpointAt(r.restoredFrom)} (branch ${r.branch}), ${where}${safety}`],
      };
    },
    progress: true,
  },
  fork: {
    input: ({ values: v }) => ({ ...forkOptions(v), from: v.from !== undefined ? selector(v.from) : undefined }),
    output: forked,
  },
  branch: { input: ({ values: v }) => forkOptions(v), output: forked },
  regenerate: { input: ({ values: v }) => forkOptions(v), output: forked },
  configure: {
    input: ({ values: v }) => ({ policies: policiesOf(v), idempotencyKey: v.key }),
    output: (s) => ({ json: s, text: [`policies: ${JSON.stringify(s.policies)}`] }),
  },
  touch: { input: () => ({}), output: () => ({ json: { touched: true }, text: ['touched'] }) },
  append: {
    input: ({ values: v }) => ({
      messages: (v.message ?? []).map(message),
      ...(v.checkpoint ? { checkpoint: true } : {}),
      label: v.label,
      idempotencyKey: v.key,
    }),
    output: (r) => ({
      json: r,
      text: [
        `appended; ${r.messageCount} message(s), the first new one at message index ${r.firstIndex}`,
        ...(r.checkpoint ? [`checkpoint at ${checkpointAt(r.checkpoint)}, ${r.checkpoint.size} bytes`] : []),
      ],
    }),
  },
};

/** Runs a control's command: its input from the command line, the handle's method of its name, its answer printed. */
async function runControl<N extends ControlName>(name: N, invocation: Of<N>, sessions: SessionClient): Promise<Output> {
  const command = CONTROL_COMMANDS[name];
  const handle = sessions.get((invocation as { sessionId: string }).sessionId);
  const method = handle[name] as (input: ControlInput<N>) => Promise<ControlResult<N>>;
  const call = method.call(handle, command.input(invocation));
  return command.output(await (command.progress ? withProgressBar(handle, call) : call));
}

async function dispatch(invocation: SessionInvocation, sessions: SessionClient): Promise<Output> {
  if (invocation.command === 'verify') {
    // Its report leads with each checkpoint's timeline index, read beside the results.
    const handle = sessions.get(invocation.sessionId);
    const results = await withProgressBar(handle, handle.verify(CONTROL_COMMANDS.verify.input(invocation)));
    const indices = await checkpointIndices(handle, new Set(results.map((r) => r.checkpointId)));
    return verificationReport(results, (id) => indices.get(id));
  }
  if (isControlName(invocation.command)) {
    return runControl(invocation.command, invocation as Of<typeof invocation.command>, sessions);
  }
  switch (invocation.command) {
    case 'start': {
      const { values, rest } = invocation;
      if ([values.memory, values.conversation, values.remote].filter(Boolean).length > 1) {
        throw new UsageError('start takes one of --memory, --conversation and --remote', 'start');
      }
      const system = rest.join(' ');
      const runtime = values.memory
        ? { kind: 'memory' as const, initialState: system || undefined }
        : values.conversation
          ? { kind: 'conversation' as const, messages: system ? [{ role: 'system' as const, content: system }] : [] }
          : {
              kind: values.remote ? ('remote' as const) : ('workspace' as const),
              command: rest,
              env: values.env,
              files: values.file,
            };
      const policies = policiesOf(values);
      const session = await sessions.start({
        sessionId: invocation.sessionId,
        runtime,
        description: values.description,
        ...(values.label ? { labels: values.label } : {}),
        ...(values.host || values['worker-label']
          ? { placement: { host: values.host, workerLabels: values['worker-label'] } }
          : {}),
        ...(Object.values(policies).some((p) => p !== undefined) ? { policies } : {}),
      });
      const json = { sessionId: session.sessionId, workflowId: session.workflow.workflowId };
      return { json, text: [`started session ${json.sessionId} (workflow ${json.workflowId})`] };
    }
    case 'status': {
      const h = sessions.get(invocation.sessionId);
      const [s, io] = await Promise.all([h.status(), h.progress().catch(() => [])]);
      // After the status: a session that does not exist is reported as SessionNotFound by it.
      const { workflowService, options } = h.workflow.client;
      const payloads = await historyEncryption(workflowService, options.namespace, {
        workflowId: h.workflow.workflowId,
      });
      return { json: { ...s, progress: io, payloads }, text: statusLines(s, io, payloads) };
    }
    case 'timeline': {
      const { from, limit, branch, all } = invocation.values;
      const page = await sessions.get(invocation.sessionId).timelinePage({
        from: integer('from', from),
        limit: integer('limit', limit),
        branch: integer('branch', branch),
        ...(all ? { all: true } : {}),
      });
      const more = page.next !== null ? [`(more: --from ${page.next})`] : [];
      return { json: page, text: [...timelineLines(page.entries), ...more] };
    }
    case 'list': {
      const list = await sessions.list({ phase: invocation.values.phase, host: invocation.values.host });
      return { json: list, text: listLines(list) };
    }
  }
}

/** `index 4 (000003-1a2b3c4d)`: the timeline index a user passes back, with the id (alone for a checkpoint from before indices). */
function checkpointAt(c: CheckpointRef): string {
  return c.index !== undefined ? `index ${c.index} (${c.checkpointId})` : c.checkpointId;
}

function forked(r: ForkResult): Output {
  return {
    json: r,
    text: r.forks.map(
      (f) =>
        `forked ${f.sessionId} from the checkpoint at ${checkpointAt(r.from)} (its own first checkpoint at ${checkpointAt(f.checkpoint)})`,
    ),
  };
}

/** What fork, branch and regenerate share. */
function forkOptions(v: { as?: string; count?: string; paused?: boolean; key?: string }) {
  return {
    newSessionId: v.as,
    count: integer('count', v.count),
    ...(v.paused ? { paused: true } : {}),
    idempotencyKey: v.key,
  };
}

/** The policy options of start and configure (a policy not given is off). */
function policiesOf(v: {
  'checkpoint-every'?: string;
  'only-if-active'?: boolean;
  'idle-pause-after'?: string;
  'stop-paused-after'?: string;
  'no-checkpoint-before-stop'?: boolean;
}): SessionPolicies {
  return {
    checkpointEveryMs: integer('checkpoint-every', v['checkpoint-every']),
    ...(v['only-if-active'] ? { checkpointOnlyIfActive: true } : {}),
    idlePauseAfterMs: integer('idle-pause-after', v['idle-pause-after']),
    stopPausedAfterMs: integer('stop-paused-after', v['stop-paused-after']),
    ...(v['no-checkpoint-before-stop'] ? { checkpointBeforeStop: false } : {}),
  };
}

/** `user=hello` → a message; the role is checked with the rest of the input by the schema. */
function message(text: string): { role: Message['role']; content: string } {
  const eq = text.indexOf('=');
  if (eq <= 0) throw new UsageError(`--message expects ROLE=TEXT, got ${text}`, 'append');
  return { role: text.slice(0, eq) as Message['role'], content: text.slice(eq + 1) };
}

/** Each checkpoint's timeline index, from the timeline this client can read (the store's, else the session's window). */
async function checkpointIndices(handle: SessionHandle, wanted: ReadonlySet<string>): Promise<Map<string, number>> {
  const indices = new Map<string, number>();
  try {
    // Read until every verified checkpoint has its index (a long session's timeline is not read to its end).
    for (let from: number | null = 1; from !== null && indices.size < wanted.size;) {
      const page: TimelinePage = await handle.timelinePage({ from, limit: 1000, all: true });
      for (const e of page.entries) {
        const id = e.kind === 'checkpoint' ? e.checkpoint.checkpointId : undefined;
        if (id !== undefined && wanted.has(id) && e.index !== undefined) indices.set(id, e.index);
      }
      from = page.next;
    }
  } catch {
    // A timeline that cannot be read leaves the indices out ("-"); the verification itself says what is wrong.
  }
  return indices;
}

/** A whole number option, or undefined; anything else is left to the schema to refuse with its message. */
function integer(name: string, value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!/^\d+$/.test(value) || !Number.isSafeInteger(n)) {
    throw new UsageError(`--${name} must be a whole number, not ${JSON.stringify(value)}`);
  }
  return n;
}

/** `7` is a timeline index; anything else a checkpoint id. */
function selector(value: string): number | string {
  return /^\d+$/.test(value) ? Number(value) : value;
}
