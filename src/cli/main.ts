import { Client, Connection } from '@temporalio/client';
import type { TimelineEntry } from '../api/messages';
import { SessionClient, SessionError, type IoProgress, type SessionHandle } from '../client';
import { ConfigError, loadConfig } from '../config';
import type { ChunkedSnapshotStore } from '../snapshots/engine/chunked-store';
import { snapshotStoreFromConfig } from '../snapshots/store-from-config';
import { connectionOptions } from '../temporal-connection';

const USAGE = `usage: durable-sessions <command> [options]

commands:
  start <session-id> [--memory] [--file PATH=TEXT]... [--env NAME=VALUE]... [--description TEXT] -- <command...>
  checkpoint <session-id> [--label TEXT] [--key IDEMPOTENCY-KEY]
  pause <session-id> [--reason TEXT] [--key IDEMPOTENCY-KEY]
  resume <session-id> [--checkpoint CHECKPOINT-ID] [--key IDEMPOTENCY-KEY]
  stop <session-id> [--no-checkpoint] [--reason TEXT] [--key IDEMPOTENCY-KEY]
  status <session-id>
  timeline <session-id>
  list [--phase PHASE]
  verify <session-id> --through-session [--checkpoint CHECKPOINT-ID]
                               read the session's checkpoints back on a worker (no keys needed here); exit 1 if one
                               does not verify

snapshot store (reads DS_SNAPSHOT_DIR and the master keys directly, as a worker would):
  verify <session-id>          check every checkpoint: manifest, chain link, every chunk's authentication tag
  gc [--dry-run]               remove packs no checkpoint references (safe while checkpoints are written)
  rekey                        re-wrap every data key under the primary master key (chunks are not rewritten)
  shred <session-id> --yes     destroy the data key of the session's lineage (it, its origin, its forks): all their
                               checkpoints become unreadable, for good

options:
  --json   print the result as JSON
Connects to TEMPORAL_ADDRESS (default 127.0.0.1:7233, the embedded server of "npm start").`;

class UsageError extends Error {}

interface Parsed {
  command: string;
  positional: string[];
  rest: string[];
  flags: Map<string, string[]>;
}

const BOOLEAN_FLAGS = new Set(['json', 'memory', 'no-checkpoint', 'help', 'dry-run', 'yes', 'through-session']);
const STORE_COMMANDS = new Set(['verify', 'gc', 'rekey', 'shred']);

function parseArgs(argv: string[]): Parsed {
  const [command = 'help', ...args] = argv;
  const positional: string[] = [];
  const flags = new Map<string, string[]>();
  let rest: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!;
    if (arg === '--') {
      rest = args.slice(i + 1);
      break;
    }
    if (arg.startsWith('--')) {
      const name = arg.slice(2);
      if (BOOLEAN_FLAGS.has(name)) {
        flags.set(name, ['true']);
        continue;
      }
      const value = args[++i];
      if (value === undefined) throw new UsageError(`--${name} needs a value`);
      flags.set(name, [...(flags.get(name) ?? []), value]);
    } else {
      positional.push(arg);
    }
  }
  return { command, positional, rest, flags };
}

function one(p: Parsed, name: string): string | undefined {
  return p.flags.get(name)?.at(-1);
}

function pairs(p: Parsed, name: string): Record<string, string> | undefined {
  const values = p.flags.get(name);
  if (!values) return undefined;
  return Object.fromEntries(
    values.map((v) => {
      const eq = v.indexOf('=');
      if (eq <= 0) throw new UsageError(`--${name} expects NAME=VALUE, got ${v}`);
      return [v.slice(0, eq), v.slice(eq + 1)];
    }),
  );
}

function sessionArg(p: Parsed): string {
  const id = p.positional[0];
  if (!id) throw new UsageError(`${p.command} needs a session id`);
  return id;
}

export async function run(argv: string[], out: (line: string) => void = console.log): Promise<number> {
  const p = parseArgs(argv);
  if (p.command === 'help' || p.flags.has('help')) {
    out(USAGE);
    return 0;
  }
  const json = p.flags.has('json');
  const config = loadConfig();
  if (STORE_COMMANDS.has(p.command) && !(p.command === 'verify' && p.flags.has('through-session'))) {
    const result = await storeCommand(p, await snapshotStoreFromConfig(config));
    out(json ? JSON.stringify(result.json, null, 2) : result.text);
    return result.exitCode ?? 0;
  }
  const connection = await Connection.connect(
    await connectionOptions(config, config.temporal.address ?? '127.0.0.1:7233'),
  );
  try {
    const sessions = new SessionClient({
      client: new Client({ connection, namespace: config.temporal.namespace }),
      taskQueue: config.taskQueue,
    });
    const result = await dispatch(p, sessions);
    out(json ? JSON.stringify(result.json, null, 2) : result.text);
    return result.exitCode ?? 0;
  } finally {
    await connection.close();
  }
}

interface Output {
  json: unknown;
  text: string;
  exitCode?: number;
}

async function dispatch(p: Parsed, sessions: SessionClient): Promise<Output> {
  const handle = (): SessionHandle => sessions.get(sessionArg(p));
  switch (p.command) {
    case 'start': {
      const sessionId = sessionArg(p);
      const runtime = p.flags.has('memory')
        ? { kind: 'memory' as const, initialState: p.rest.join(' ') || undefined }
        : { kind: 'workspace' as const, command: p.rest, env: pairs(p, 'env'), files: pairs(p, 'file') };
      const session = await sessions.start({ sessionId, runtime, description: one(p, 'description') });
      const json = { sessionId: session.sessionId, workflowId: session.workflow.workflowId };
      return { json, text: `started session ${json.sessionId} (workflow ${json.workflowId})` };
    }
    case 'checkpoint':
    case 'pause': {
      const h = handle();
      const c = await withProgressBar(
        h,
        p.command === 'pause'
          ? h.pause({ reason: one(p, 'reason'), idempotencyKey: one(p, 'key') })
          : h.checkpoint({ label: one(p, 'label'), idempotencyKey: one(p, 'key') }),
      );
      const prefix = p.command === 'pause' ? 'paused; ' : '';
      return { json: c, text: `${prefix}checkpoint ${c.checkpointId} (#${c.sequence}, ${c.size} bytes, ${c.digest})` };
    }
    case 'resume': {
      const h = handle();
      const r = await withProgressBar(
        h,
        h.resume({ checkpointId: one(p, 'checkpoint'), idempotencyKey: one(p, 'key') }),
      );
      const lines = [
        `resumed from checkpoint ${r.restoredFrom.checkpointId} as ${r.runtime.instanceId} (${r.runtime.location})`,
        ...(r.fallbackFrom ?? []).map((f) => `  skipped ${f.checkpointId}: ${f.reason}`),
      ];
      return { json: r, text: lines.join('\n') };
    }
    case 'stop': {
      const r = await handle().stop({
        checkpoint: !p.flags.has('no-checkpoint'),
        reason: one(p, 'reason'),
        idempotencyKey: one(p, 'key'),
      });
      return {
        json: r,
        text: `stopped${r.finalCheckpoint ? `; final checkpoint ${r.finalCheckpoint.checkpointId}` : ''}`,
      };
    }
    case 'status': {
      const h = handle();
      const [s, io] = await Promise.all([h.status(), h.progress().catch(() => [])]);
      const rows: [string, string][] = [
        ['session', s.sessionId],
        ['phase', s.phase],
        [
          'runtime',
          s.runtime ? `${s.runtimeKind} ${s.runtime.instanceId} on ${s.runtime.hostTaskQueue}` : s.runtimeKind,
        ],
        ['location', s.runtime?.location ?? '-'],
        ['head', s.head ? `${s.head.checkpointId} (#${s.head.sequence}, ${s.head.size} bytes)` : '-'],
        ['checkpoints', String(s.checkpointCount)],
        ['pending controls', String(s.pendingControls)],
        ['last restore', s.lastRestore ? `${s.lastRestore.checkpointId} at ${s.lastRestore.at}` : '-'],
        ['failure', s.failure ? `${s.failure.type}: ${s.failure.message}` : '-'],
        [
          'rejected signal',
          s.lastRejectedSignal ? `${s.lastRejectedSignal.signal}: ${s.lastRejectedSignal.reason}` : '-',
        ],
        ['encryption', s.head?.encryption ?? '-'],
        [
          'last verification',
          s.lastVerification ? `${s.lastVerification.checkpointId}: ${s.lastVerification.status}` : '-',
        ],
        ...io.map((a): [string, string] => ['in progress', describeProgress(a)]),
        ['updated', s.updatedAt],
      ];
      if (s.lastRestore?.fallbackFrom.length)
        rows.splice(8, 0, ['fell back from', s.lastRestore.fallbackFrom.join(', ')]);
      return { json: { ...s, progress: io }, text: rows.map(([k, v]) => `${k.padEnd(18)}${v}`).join('\n') };
    }
    case 'verify': {
      const results = await handle().verify({ checkpointId: one(p, 'checkpoint') });
      return verificationReport(results, (r) => r.checkpointId.padEnd(24));
    }
    case 'timeline': {
      const t = await handle().timeline();
      return { json: t, text: t.map(renderEntry).join('\n') || '(empty)' };
    }
    case 'list': {
      const list = await sessions.list({ phase: one(p, 'phase') });
      const text = list
        .map(
          (s) =>
            `${s.sessionId.padEnd(32)}${(s.phase ?? '?').padEnd(14)}${s.workflowStatus.padEnd(12)}${s.startedAt.toISOString()}`,
        )
        .join('\n');
      return { json: list, text: text || '(no sessions)' };
    }
    default:
      throw new UsageError(`unknown command: ${p.command}`);
  }
}

/** One line per checkpoint (`lead` then status and detail), a summary, and exit code 1 if one does not verify. */
function verificationReport<R extends { checkpointId: string; status: string; detail?: string }>(
  results: R[],
  lead: (r: R) => string,
): Output {
  const lines = results.map((r) => `${lead(r)}${r.status}${r.detail ? `  ${r.detail}` : ''}`);
  const bad = results.filter((r) => r.status !== 'ok').length;
  lines.push(`${results.length - bad} of ${results.length} checkpoint(s) verify`);
  return { json: results, text: lines.join('\n'), exitCode: bad ? 1 : 0 };
}

async function storeCommand(p: Parsed, store: ChunkedSnapshotStore): Promise<Output> {
  switch (p.command) {
    case 'verify': {
      const results = await store.verifyLineage(sessionArg(p));
      return verificationReport(
        results,
        (r) => `${String(r.sequence ?? '?').padStart(5)}  ${r.checkpointId.padEnd(24)}v${r.formatVersion ?? '?'}  `,
      );
    }
    case 'gc': {
      const report = await store.gc({ dryRun: p.flags.has('dry-run') });
      const verb = report.dryRun ? 'would remove' : 'removed';
      const lines = [
        `${verb} ${report.packsRemoved.length} pack(s), ${report.bytesRemoved} bytes; kept ${report.packsKept}`,
      ];
      for (const skip of report.skipped) lines.push(`skipped ${skip.lineage}: ${skip.reason}`);
      return { json: report, text: lines.join('\n') };
    }
    case 'rekey': {
      const r = await store.rekey();
      return {
        json: r,
        text: `re-wrapped ${r.rewrapped} data key(s); ${r.unchanged} already under the primary key`,
      };
    }
    case 'shred': {
      const sessionId = sessionArg(p);
      if (!p.flags.has('yes')) throw new UsageError(`shred destroys every checkpoint of ${sessionId}: add --yes`);
      const lineage = await store.shred(sessionId);
      const scope = lineage === sessionId ? sessionId : `lineage ${lineage} (${sessionId} is a fork of it)`;
      return { json: { shredded: sessionId, lineage }, text: `data key of ${scope} destroyed` };
    }
    default:
      throw new UsageError(`unknown command: ${p.command}`);
  }
}

function describeProgress(a: IoProgress): string {
  const mib = (n: number) => `${(n / 1048576).toFixed(1)} MiB`;
  const amount = a.bytesTotal ? `${mib(a.bytesDone)} of ${mib(a.bytesTotal)}` : mib(a.bytesDone);
  const retry = a.attempt > 1 ? `, attempt ${a.attempt}${a.lastFailure ? ` after: ${a.lastFailure}` : ''}` : '';
  return `${a.activity} ${amount}${retry}`;
}

/** Shows snapshot I/O progress on a terminal while a control runs; silent when stderr is not a terminal. */
async function withProgressBar<T>(handle: SessionHandle, pending: Promise<T>): Promise<T> {
  if (!process.stderr.isTTY) return pending;
  let done = false;
  const draw = async () => {
    while (!done) {
      await new Promise((r) => setTimeout(r, 500));
      const io = await handle.progress().catch(() => []);
      const a = io[0];
      if (done || !a) continue;
      const width = 30;
      const filled = a.bytesTotal ? Math.min(width, Math.round((a.bytesDone / a.bytesTotal) * width)) : 0;
      const bar = a.bytesTotal ? `[${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ` : '';
      process.stderr.write(`\r${bar}${describeProgress(a)}\x1b[K`);
    }
  };
  const drawing = draw();
  try {
    return await pending;
  } finally {
    done = true;
    await drawing;
    process.stderr.write('\r\x1b[K');
  }
}

function renderEntry(e: TimelineEntry): string {
  switch (e.kind) {
    case 'checkpoint': {
      const c = e.checkpoint;
      const label = c.label ? ` "${c.label}"` : '';
      return `${e.at}  checkpoint #${c.sequence} ${c.checkpointId} ← ${c.parentId ?? '(root)'}  ${c.trigger}${label}  ${c.size} B`;
    }
    case 'restored':
      return `${e.at}  restored   ${e.checkpointId} as ${e.instanceId} (${e.cause})`;
    case 'fallback':
      return `${e.at}  fallback   ${e.fromCheckpointId} → ${e.toCheckpointId ?? '(none)'}: ${e.reason}`;
    case 'runtime-exited':
      return `${e.at}  exited     code ${e.exitCode ?? '-'} signal ${e.signal ?? '-'}`;
    case 'runtime-lost':
      return `${e.at}  lost       ${e.instanceId}: ${e.reason}`;
    case 'checkpoint-deleted':
      return `${e.at}  deleted    ${e.checkpointId} (${e.reason})`;
    case 'verified':
      return `${e.at}  verified   ${e.checkpointId}: ${e.status}${e.detail ? ` (${e.detail})` : ''} [${e.cause}]`;
  }
}

/** Runs the CLI and returns the process exit code: 0 done, 1 refused or failed (typed), 2 usage. */
export async function cliMain(argv: string[]): Promise<number> {
  try {
    return await run(argv);
  } catch (err) {
    if (err instanceof UsageError) {
      console.error(`error: ${err.message}\n\n${USAGE}`);
      return 2;
    }
    if (err instanceof SessionError) console.error(`error: ${err.code}: ${err.message}`);
    else if (err instanceof ConfigError) console.error(err.message);
    else console.error(`error: ${err instanceof Error ? err.message : String(err)}`);
    return 1;
  }
}

if (require.main === module) {
  void cliMain(process.argv.slice(2)).then((code) => process.exit(code));
}
