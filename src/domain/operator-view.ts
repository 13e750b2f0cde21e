import type { CarriedState, RunControlState, TimelineEntry } from './records';
import type { VerificationResult } from './schemas';

/**
 * What an operator reads of a session in the Temporal Web UI: the one-line summaries of its activities and the
 * markdown of its current details. Pure functions of what the workflow holds, so the workflow stays deterministic.
 */

/** Timeline entries the current details show. */
export const RECENT_ENTRIES = 5;

/** Controls the current details name one by one; the rest are counted. */
const NAMED_PENDING = 5;

/** The operations the control queue holds, oldest first (the running one first), and signals waiting their turn. */
export interface PendingWork {
  operations: { what: string; running: boolean }[];
  waitingSignals: string[];
}

export interface SessionView {
  state: CarriedState & { runControl: RunControlState };
  pending: PendingWork;
  lastVerification: VerificationResult | null;
  /** Why the session was stopped, when a stop said so and no checkpoint recorded it. */
  stopReason?: string;
}

/**
 * `000003-1a2b3c4d` → `000003`. The sequence names a checkpoint within its session (each capture takes the next one);
 * the full id is in the activity's input, one click away.
 */
export function checkpointName(checkpointId: string): string {
  return /^(\d{6,})-[0-9a-f]{8}$/.exec(checkpointId)?.[1] ?? checkpointId;
}

/** 812 → "812 B", 4096 → "4.0 KiB", 1_300_000 → "1.2 MiB". */
export function byteSize(bytes: number): string {
  if (bytes < 1024) return `${bytes} B`;
  const units = ['KiB', 'MiB', 'GiB', 'TiB'];
  let value = bytes / 1024;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return `${value.toFixed(1)} ${units[unit]}`;
}

/** "1 timeline entry", "3 timeline entries". */
export function timelineEntries(n: number): string {
  return `${n} timeline ${n === 1 ? 'entry' : 'entries'}`;
}

/** Text from callers and failures on one line, bounded: a newline would break the markdown it sits in. */
export function oneLine(text: string, max = 200): string {
  const flat = text.replace(/\s+/g, ' ').trim();
  return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat;
}

/** `SnapshotTampered: manifest …` → `SnapshotTampered`: the code of a failure reason the workflow recorded. */
export function failureCode(reason: string): string {
  return /^([A-Za-z]+):/.exec(reason)?.[1] ?? oneLine(reason, 80);
}

/** "restore 000002 after fallback from 000003 (resume, 1.2 MiB)": the summary of one restore attempt. */
export function restoreSummary(
  checkpoint: { checkpointId: string; size: number },
  cause: string,
  fallbackFrom: readonly string[] = [],
): string {
  const after = fallbackFrom.length ? ` after fallback from ${fallbackFrom.map(checkpointName).join(', ')}` : '';
  return `restore ${checkpointName(checkpoint.checkpointId)}${after} (${cause}, ${byteSize(checkpoint.size)})`;
}

/** The markdown shown as a session's "current details". */
export function describeSession(view: SessionView): string {
  const { state } = view;
  const rc = state.runControl;
  const lines = [`**${state.phase}** · ${state.spec.runtime.kind} runtime · ${rc.checkpointCount} checkpoint(s)`];
  const why = whyLine(view);
  if (why) lines.push(`why: ${why}`);
  const f = state.failure;
  if (f) lines.push(`failure: ${f.type}: ${oneLine(f.message, 500)}`);
  // A command that failed: how it ended, its last line of output, and where what it left is kept.
  if (f && (f.exitCode !== undefined || f.signal !== undefined)) {
    const how = f.signal ? `killed by ${f.signal}` : `exit code ${f.exitCode}`;
    const last = f.outputTail?.at(-1);
    lines.push(`exit: ${how}${last !== undefined ? ` · last output: ${oneLine(last, 200)}` : ''}`);
  }
  if (f?.location) {
    const until = f.keptUntil ? ` until ${f.keptUntil}` : '';
    lines.push(`kept: \`${oneLine(f.location, 300)}\`${f.host ? ` on ${oneLine(f.host, 100)}` : ''}${until}`);
  }
  const { head } = state;
  if (head) {
    const facts = [
      ...(head.index !== undefined ? [`#${head.index}`] : []),
      byteSize(head.size),
      head.trigger,
      ...(head.label ? [JSON.stringify(oneLine(head.label, 80))] : []),
      head.createdAt,
    ];
    lines.push(`head: \`${head.checkpointId}\` (${facts.join(', ')})`);
  }
  const { runtime } = state;
  if (runtime) {
    // The output's last lines never reach the workflow; where they are written does.
    const output = runtime.output ? `, output in \`${runtime.output}\`` : '';
    lines.push(`runtime: \`${runtime.instanceId}\` on \`${runtime.hostTaskQueue}\`${output}`);
  }
  const indexOf = checkpointIndices(state);
  const ref = (id: string) => {
    const index = indexOf(id);
    return index !== undefined ? `#${index}` : checkpointName(id);
  };
  const restore = restoreLine(state, ref);
  if (restore) lines.push(`last restore: ${restore}`);
  const verified = view.lastVerification;
  if (verified) {
    const index = indexOf(verified.checkpointId);
    const which = `${index !== undefined ? `#${index} ` : ''}\`${verified.checkpointId}\``;
    lines.push(`last verification: ${which} ${verified.status} (${verified.at})`);
  }
  const pending = pendingLine(view.pending);
  if (pending) lines.push(`pending: ${pending}`);
  const recent = state.timeline.slice(-RECENT_ENTRIES);
  if (recent.length) lines.push(['recent:', ...recent.map((e) => `- ${entryLine(e, indexOf)}`)].join('\n'));
  return lines.join('\n\n');
}

/**
 * Why a paused or ended session is where it is: the newest entry in the recent window that explains it (the pause's
 * checkpoint and its reason, a policy, a failed restore, a fork left paused, an exit). A failure has its own line.
 */
function whyLine({ state, stopReason }: SessionView): string | undefined {
  if (state.phase === 'completed' && stopReason) return `stopped: ${oneLine(stopReason)}`;
  if (state.phase !== 'paused' && state.phase !== 'completed' && state.phase !== 'failed') return undefined;
  for (const e of [...state.timeline].reverse()) {
    switch (e.kind) {
      case 'checkpoint':
        if (e.checkpoint.trigger === 'pause' && state.phase === 'paused')
          return `paused${e.reason ? `: ${oneLine(e.reason)}` : ' on request'}`;
        if (e.checkpoint.trigger === 'stop' && state.phase === 'completed')
          return `stopped${e.reason ? `: ${oneLine(e.reason)}` : ' on request'}`;
        break;
      case 'policy':
        if (e.action !== 'checkpoint-skipped') return `${e.action} by policy: ${oneLine(e.reason)}`;
        break;
      case 'restore-failed':
        return `no checkpoint could be restored (${e.cause}); a resume tries again`;
      case 'forked-from':
        return `fork of ${e.from.sessionId} at ${e.from.index !== undefined ? `#${e.from.index}` : checkpointName(e.from.checkpointId)}, not resumed yet`;
      case 'runtime-exited':
        return `the runtime exited (${e.signal ? `signal ${e.signal}` : `code ${e.exitCode ?? '?'}`})`;
      case 'runtime-lost':
        if (state.phase === 'failed') return `the runtime was lost: ${oneLine(e.reason)}`;
        break;
      default:
        break;
    }
  }
  return undefined;
}

/**
 * The newest restore and how it went, from the recent window (with the reasons of the checkpoints it fell back from),
 * else from what the state keeps of it.
 */
function restoreLine(state: CarriedState, ref: (checkpointId: string) => string): string | undefined {
  const window = state.timeline;
  const at = window.findLastIndex((e) => e.kind === 'restored' || e.kind === 'restore-failed');
  const outcome = window[at];
  if (!outcome) {
    const last = state.lastRestore;
    if (!last) return undefined;
    const after = last.fallbackFrom.length ? ` after ${last.fallbackFrom.map(checkpointName).join(', ')} failed` : '';
    return `restored ${ref(last.checkpointId)}${after} (${last.at})`;
  }
  const failed: string[] = [];
  for (let i = at - 1; i >= 0; i--) {
    const e = window[i]!;
    if (e.kind === 'restored' || e.kind === 'restore-failed') break;
    if (e.kind === 'fallback') failed.unshift(`${ref(e.fromCheckpointId)} failed: ${failureCode(e.reason)}`);
  }
  if (outcome.kind === 'restore-failed') {
    return `failed (${outcome.cause})${failed.length ? `: ${failed.join(', ')}` : `: ${oneLine(outcome.reason)}`}`;
  }
  if (outcome.kind !== 'restored') return undefined;
  const after = failed.length ? ` after ${failed.join(', ')}` : '';
  return `restored ${ref(outcome.checkpointId)}${after} (${outcome.cause}, ${outcome.at})`;
}

function pendingLine({ operations, waitingSignals }: PendingWork): string | undefined {
  const parts: string[] = [];
  if (operations.length) {
    const named = operations.slice(0, NAMED_PENDING).map((o) => (o.running ? `${o.what} (running)` : o.what));
    const more = operations.length - named.length;
    parts.push(named.join(', ') + (more > 0 ? ` and ${more} more` : ''));
  }
  if (waitingSignals.length) {
    const kinds = [...new Set(waitingSignals)].slice(0, NAMED_PENDING).join(', ');
    parts.push(`${waitingSignals.length} signal(s) waiting (${kinds})`);
  }
  return parts.length ? parts.join(' · ') : undefined;
}

/** The timeline index of each checkpoint the state knows of (kept checkpoints and the recent window). */
function checkpointIndices(state: CarriedState): (checkpointId: string) => number | undefined {
  const indices = new Map<string, number>();
  for (const c of state.checkpoints) if (c.index !== undefined) indices.set(c.checkpointId, c.index);
  for (const e of state.timeline) {
    if (e.kind === 'checkpoint' && e.index !== undefined) indices.set(e.checkpoint.checkpointId, e.index);
  }
  return (id) => indices.get(id);
}

/**
 * One timeline entry on one line, led by its index: `#7 10:31:02 checkpoint (pause, 2.0 KiB): maintenance`. A
 * checkpoint an entry concerns is named by its index too (`restored #5`), where `indexOf` knows it; else by its
 * sequence (`000003`).
 */
export function entryLine(
  e: TimelineEntry,
  indexOf: (checkpointId: string) => number | undefined = () => undefined,
): string {
  const lead = `${e.index !== undefined ? `#${e.index} ` : ''}${e.at.slice(11, 19)}`;
  const ref = (id: string) => {
    const index = indexOf(id);
    return index !== undefined ? `#${index}` : checkpointName(id);
  };
  return `${lead} ${entryText(e, ref)}`;
}

function entryText(e: TimelineEntry, ref: (checkpointId: string) => string): string {
  const why = (reason: string | undefined) => (reason ? `: ${oneLine(reason, 120)}` : '');
  switch (e.kind) {
    case 'checkpoint': {
      const c = e.checkpoint;
      const label = c.label ? ` ${JSON.stringify(oneLine(c.label, 60))}` : '';
      // The lead is its index; an entry from before indices names it by its sequence.
      const name = e.index === undefined ? ` ${checkpointName(c.checkpointId)}` : '';
      return `checkpoint${name} (${c.trigger}, ${byteSize(c.size)})${label}${why(e.reason)}`;
    }
    case 'restored':
      return `restored ${ref(e.checkpointId)} (${e.cause})`;
    case 'restarted-from-spec':
      return `restarted from its spec (no checkpoint yet)${why(e.reason)}`;
    case 'fallback':
      return `fell back from ${ref(e.fromCheckpointId)}: ${failureCode(e.reason)}`;
    case 'restore-failed':
      return `restore failed (${e.cause})`;
    case 'control-failed':
      return `${e.control} failed: ${e.type}${why(e.reason)}`;
    case 'runtime-exited':
      return `runtime exited (${e.signal ? `signal ${e.signal}` : `code ${e.exitCode ?? '?'}`})`;
    case 'runtime-lost':
      return `runtime lost${why(e.reason)}`;
    case 'taken-over':
      return `taken over by ${e.host} (generation ${e.generation})${why(e.reason)}`;
    case 'checkpoint-deleted':
      return `deleted ${ref(e.checkpointId)} (${e.reason})`;
    case 'verified':
      return `verified ${ref(e.checkpointId)}: ${e.status} (${e.cause})`;
    case 'signal-rejected':
      return `signal ${oneLine(e.signal, 60)} rejected${why(e.reason)}`;
    case 'rewound':
      return `rewound to ${e.toIndex !== undefined ? `#${e.toIndex}` : ref(e.to)}${why(e.reason)}`;
    case 'forked':
      return `forked ${e.checkpointIndex !== undefined ? `#${e.checkpointIndex}` : ref(e.checkpointId)} into ${e.forks.map((f) => f.sessionId).join(', ')}`;
    case 'forked-from':
      return `forked from ${e.from.sessionId} at ${e.from.index !== undefined ? `#${e.from.index}` : checkpointName(e.from.checkpointId)}`;
    case 'configured':
      return `configured ${[e.policies ? 'policies' : '', e.retention ? 'retention' : ''].filter(Boolean).join(' and ')}`;
    case 'policy':
      return `policy ${e.action}${why(e.reason)}`;
    case 'appended':
      return `appended ${e.count} message(s) at ${e.firstIndex}`;
  }
}
