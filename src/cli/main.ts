import { commandUsage, COMMANDS, synopsis, topUsage, type CommandSpec } from './commands';
import { CLI_ERROR_CODES, CliError, sessionCodeOf, UsageError } from './errors';
import { messageOf } from '../errors';
import { jsonRequested, parseCommandLine, type Invocation } from './parse';
import { failureRows, type Output } from './render';
import type { LastKnownSession, SessionFailure } from '../domain/errors';
import type * as ConfigModule from '../config';
import type * as SessionCommands from './session-commands';
import type * as StoreCommands from './store-commands';
import type * as ArchiveCommands from './archive-commands';
import { printable } from './text';

/** Where the CLI writes: stdout for results (and `--json` errors), stderr for text errors. */
export interface CliStreams {
  out(text: string): void;
  err(text: string): void;
}

const STD_STREAMS: CliStreams = { out: (t) => console.log(t), err: (t) => console.error(t) };

/**
 * Runs the CLI and returns the process exit code: 0 done, 1 refused or failed (typed), 2 usage. With `--json`, stdout
 * carries exactly one JSON document: the result, or `{"error": {"code", "message", "sessionId"?, "issues"?}}`.
 */
export async function cliMain(argv: readonly string[], streams: CliStreams = STD_STREAMS): Promise<number> {
  let json = jsonRequested(argv);
  try {
    const invocation = parseCommandLine(argv);
    if (invocation.command === 'help') {
      streams.out(invocation.topic ? commandUsage(invocation.topic) : topUsage());
      return 0;
    }
    json = invocation.json;
    const result = await execute(invocation);
    streams.out(json ? JSON.stringify(result.json, null, 2) : result.text.map(printable).join('\n'));
    return result.exitCode ?? 0;
  } catch (err) {
    const failure = failureOf(err);
    if (json) streams.out(JSON.stringify({ error: failure.error }, null, 2));
    else streams.err(failure.text);
    return failure.exitCode;
  }
}

/**
 * Loads a module when a command first needs it: help and usage errors answer without loading the Temporal client or
 * the snapshot store, most of the CLI's start-up. `require`, because `import()` goes to Node's ESM loader, which the bin's
 * tsx/cjs hook does not cover.
 */
function load<M>(id: string): M {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  return require(id) as M;
}

async function execute(invocation: Exclude<Invocation, { command: 'help' }>): Promise<Output> {
  const { ConfigError, loadConfig } = load<typeof ConfigModule>('../config');
  let config;
  try {
    config = loadConfig();
  } catch (err) {
    if (err instanceof ConfigError) {
      throw new CliError(CLI_ERROR_CODES.InvalidConfig, err.message, { cause: err, issues: err.issues });
    }
    throw err;
  }
  if (invocation.command === 'export' || invocation.command === 'import' || invocation.command === 'keygen') {
    const { runArchiveCommand } = load<typeof ArchiveCommands>('./archive-commands');
    return runArchiveCommand(invocation, config);
  }
  const spec: CommandSpec = COMMANDS[invocation.command];
  const throughSession = invocation.command === 'verify' && invocation.values['through-session'] === true;
  if (spec.store && !throughSession) {
    const { runStoreCommand } = load<typeof StoreCommands>('./store-commands');
    return runStoreCommand(invocation as StoreCommands.StoreInvocation, config);
  }
  const { runSessionCommand } = load<typeof SessionCommands>('./session-commands');
  return runSessionCommand(invocation as SessionCommands.SessionInvocation, config);
}

interface Failure {
  error: {
    code: string;
    message: string;
    sessionId?: string;
    issues?: readonly unknown[];
    failure?: SessionFailure;
    /** What Temporal knows of a session no worker answers for (WorkerUnavailable). */
    lastKnown?: LastKnownSession;
  };
  text: string;
  exitCode: number;
}

function failureOf(err: unknown): Failure {
  const message = messageOf(err);
  // Messages may hold text from a session or the store; their own line breaks are kept.
  const shown = message.split('\n').map(printable).join('\n');
  if (err instanceof UsageError) {
    const hint = err.command
      ? `usage: durable-sessions ${synopsis(err.command)}\nrun "durable-sessions ${err.command} --help" for its options`
      : 'run "durable-sessions --help" for the commands';
    return { error: { code: err.code, message }, text: `error: ${shown}\n${hint}`, exitCode: 2 };
  }
  if (err instanceof CliError) {
    return { error: { code: err.code, message, issues: err.issues }, text: `error: ${shown}`, exitCode: 1 };
  }
  const code = sessionCodeOf(err);
  if (code) {
    const { sessionId, issues, failure, lastKnown } = err as {
      sessionId?: unknown;
      issues?: unknown;
      failure?: SessionFailure;
      lastKnown?: LastKnownSession | null;
    };
    // A command that failed: how it ended, its last lines of output and where its directory is kept. A session no
    // worker answers for: what Temporal knows of it.
    const rows: (readonly [string, string])[] = failure
      ? [...failureRows(failure), ...(failure.location ? [['kept', failure.location] as const] : [])]
      : lastKnown
        ? lastKnownRows(lastKnown)
        : [];
    const more = rows.map(([k, v]) => `  ${k.padEnd(12)}${printable(v)}`).join('\n');
    return {
      error: {
        code,
        message,
        sessionId: typeof sessionId === 'string' && sessionId ? sessionId : undefined,
        issues: Array.isArray(issues) ? issues : undefined,
        ...(failure ? { failure } : {}),
        ...(lastKnown ? { lastKnown } : {}),
      },
      text: `error: ${code}: ${shown}${more ? `\n${more}` : ''}`,
      exitCode: 1,
    };
  }
  return { error: { code: CLI_ERROR_CODES.Failed, message }, text: `error: ${shown}`, exitCode: 1 };
}

/** What Temporal knows of a session no worker answers for, row by row (the values it has). */
function lastKnownRows(known: LastKnownSession): (readonly [string, string])[] {
  const rows: [string, string | number | null][] = [
    ['workflow', known.workflowStatus],
    ['phase', known.phase],
    ['host', known.host],
    ['checkpoints', known.checkpointCount],
    ['head', known.headCheckpointId],
    ['last saved', known.lastCheckpointAt],
    ['failure', known.failureCode],
    ['task queue', known.taskQueue],
    ['last poll', known.lastPollAt ?? 'none known'],
  ];
  return rows.flatMap(([k, v]) => (v === null ? [] : [[k, String(v)] as const]));
}

if (require.main === module) {
  void cliMain(process.argv.slice(2)).then((code) => process.exit(code));
}
