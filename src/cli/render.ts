import type { SessionStatus, TimelineEntry } from '../api/messages';
import type { IoProgress, SessionFailure, SessionSummary } from '../client';
import type { HistoryEncryption } from '../payloads';
import { table } from './text';

/**
 * What a command prints: its JSON document, its text lines (made printable when they are printed), and its exit code
 * when it is not 0.
 */
export interface Output {
  json: unknown;
  text: string[];
  exitCode?: number;
}

function fields(rows: readonly (readonly [string, string])[]): string[] {
  return rows.map(([k, v]) => `${k.padEnd(18)}${v}`);
}

export function statusLines(s: SessionStatus, io: IoProgress[], payloads?: HistoryEncryption): string[] {
  const f = s.failure;
  // A failed command's directory and log stay on its host for a while: where, and until when.
  const kept = f?.location
    ? ` (kept${f.host ? ` on ${f.host}` : ''}${f.keptUntil ? ` until ${f.keptUntil}` : ''})`
    : '';
  const rows: [string, string][] = [
    ['session', s.sessionId],
    ['phase', s.phase],
    ['runtime', s.runtime ? `${s.runtimeKind} ${s.runtime.instanceId} on ${s.runtime.hostTaskQueue}` : s.runtimeKind],
    ['location', s.runtime?.location ?? (f?.location ? `${f.location}${kept}` : '-')],
    ['output', s.runtime?.output ?? f?.output ?? '-'],
    [
      'head',
      s.head
        ? `${s.head.index !== undefined ? `index ${s.head.index} (${s.head.checkpointId})` : s.head.checkpointId}, ${s.head.size} bytes`
        : '-',
    ],
    ['checkpoints', String(s.checkpointCount)],
    ['pending controls', String(s.pendingControls)],
    ['last restore', s.lastRestore ? `${s.lastRestore.checkpointId} at ${s.lastRestore.at}` : '-'],
    ['failure', f ? `${f.type}: ${f.message}` : '-'],
    ...failureRows(f),
    ['rejected signal', s.lastRejectedSignal ? `${s.lastRejectedSignal.signal}: ${s.lastRejectedSignal.reason}` : '-'],
    ['encryption', s.head?.encryption ?? '-'],
    [
      'payloads',
      !payloads
        ? '-'
        : payloads.mode === 'none'
          ? 'PLAINTEXT in Temporal'
          : `encrypted in Temporal (AES-256-GCM, key ${payloads.keyId})`,
    ],
    [
      'last verification',
      s.lastVerification ? `${s.lastVerification.checkpointId}: ${s.lastVerification.status}` : '-',
    ],
    ...io.map((a): [string, string] => ['in progress', describeProgress(a)]),
    ['updated', s.updatedAt],
  ];
  if (s.lastRestore?.fallbackFrom.length) {
    rows.splice(rows.findIndex(([k]) => k === 'last restore') + 1, 0, [
      'fell back from',
      s.lastRestore.fallbackFrom.join(', '),
    ]);
  }
  return fields(rows);
}

/** How a failed command ended: its exit code or signal, and its last lines of output. */
export function failureRows(f: SessionFailure | null | undefined): [string, string][] {
  if (!f || (f.exitCode === undefined && f.signal === undefined)) return [];
  const rows: [string, string][] = [['exit', f.signal ? `killed by ${f.signal}` : `code ${f.exitCode}`]];
  const tail = f.outputTail ?? [];
  tail.forEach((line, i) => rows.push([i === 0 ? 'last output' : '', line]));
  return rows;
}

export function listLines(list: readonly SessionSummary[]): string[] {
  if (list.length === 0) return ['(no sessions)'];
  return table(
    ['SESSION', 'PHASE', 'RUNTIME', 'WORKFLOW', 'STARTED'],
    list.map((s) => [s.sessionId, s.phase ?? '?', s.runtimeKind ?? '?', s.workflowStatus, s.startedAt.toISOString()]),
  );
}

/**
 * One line per entry, each led by its timeline index (the number to pass back to rewind and fork); a checkpoint an
 * entry concerns is named by its index where the page shows it.
 */
export function timelineLines(entries: readonly TimelineEntry[]): string[] {
  if (!entries.length) return ['(empty)'];
  const indices = new Map<string, number>();
  for (const e of entries) {
    if (e.kind === 'checkpoint' && e.index !== undefined) indices.set(e.checkpoint.checkpointId, e.index);
  }
  const ref = (id: string | null) => {
    if (id === null) return '(none)';
    const index = indices.get(id);
    return index === undefined ? id : `${index} (${id})`;
  };
  const width = Math.max(...entries.map((e) => String(e.index ?? '-').length));
  return entries.map((e) => `${String(e.index ?? '-').padStart(width)}  ${renderEntry(e, ref)}`);
}

function renderEntry(e: TimelineEntry, ref: (checkpointId: string | null) => string): string {
  switch (e.kind) {
    case 'checkpoint': {
      const c = e.checkpoint;
      const label = c.label ? ` "${c.label}"` : '';
      return `${e.at}  checkpoint ${c.checkpointId} ← ${c.parentId ? ref(c.parentId) : '(root)'}  ${c.trigger}${label}  ${c.size} B`;
    }
    case 'restored':
      return `${e.at}  restored   ${ref(e.checkpointId)} as ${e.instanceId} (${e.cause})`;
    case 'restarted-from-spec':
      return `${e.at}  restarted  from its spec as ${e.instanceId} (no checkpoint yet): ${e.reason}`;
    case 'fallback':
      return `${e.at}  fallback   ${ref(e.fromCheckpointId)} → ${ref(e.toCheckpointId)}: ${e.reason}`;
    case 'runtime-exited':
      return `${e.at}  exited     code ${e.exitCode ?? '-'} signal ${e.signal ?? '-'}`;
    case 'runtime-lost':
      return `${e.at}  lost       ${e.instanceId}: ${e.reason}`;
    case 'taken-over':
      return `${e.at}  taken over ${e.instanceId} by ${e.host}, generation ${e.generation}: ${e.reason}`;
    case 'checkpoint-deleted':
      return `${e.at}  deleted    ${ref(e.checkpointId)} (${e.reason})`;
    case 'verified':
      return `${e.at}  verified   ${ref(e.checkpointId)}: ${e.status}${e.detail ? ` (${e.detail})` : ''} [${e.cause}]`;
    case 'rewound': {
      const to = e.toIndex !== undefined ? `${e.toIndex} (${e.to})` : ref(e.to);
      return `${e.at}  rewound    to ${to}, branch ${e.branch ?? '-'} (left branch ${e.fromBranch})${e.reason ? `: ${e.reason}` : ''}`;
    }
    case 'forked': {
      const from = e.checkpointIndex !== undefined ? `${e.checkpointIndex} (${e.checkpointId})` : ref(e.checkpointId);
      return `${e.at}  forked     ${from} → ${e.forks.map((f) => f.sessionId).join(', ')}${e.regenerate ? ' (regenerate)' : ''}`;
    }
    default:
      return genericEntry(e);
  }
}

/** Entries of kinds this CLI does not know yet (newer workers): their kind and fields, as they are. */
function genericEntry(e: unknown): string {
  const { at, kind, ...rest } = e as { at?: unknown; kind?: unknown } & Record<string, unknown>;
  const detail = Object.entries(rest).map(([k, v]) => `${k}=${typeof v === 'string' ? v : JSON.stringify(v)}`);
  return [String(at), String(kind).padEnd(10), ...detail].join('  ');
}

/**
 * One line per checkpoint, led by its timeline index and id (then `more`, status and detail), a summary, and exit
 * code 1 if one does not verify. The JSON gives each result its `index` too (null where the timeline could not say).
 */
export function verificationReport<R extends { checkpointId: string; status: string; detail?: string }>(
  results: R[],
  indexOf: (checkpointId: string) => number | undefined,
  more: (r: R) => string = () => '',
): Output {
  const lines = results.map(
    (r) =>
      `${String(indexOf(r.checkpointId) ?? '-').padStart(5)}  ${r.checkpointId.padEnd(24)}${more(r)}${r.status}${r.detail ? `  ${r.detail}` : ''}`,
  );
  const bad = results.filter((r) => r.status !== 'ok').length;
  lines.push(`${results.length - bad} of ${results.length} checkpoint(s) verify`);
  const json = results.map((r) => ({ index: indexOf(r.checkpointId) ?? null, ...r }));
  return { json, text: lines, exitCode: bad ? 1 : 0 };
}

export function describeProgress(a: IoProgress): string {
  const mib = (n: number) => `${(n / 1048576).toFixed(1)} MiB`;
  const amount = a.bytesTotal ? `${mib(a.bytesDone)} of ${mib(a.bytesTotal)}` : mib(a.bytesDone);
  const retry = a.attempt > 1 ? `, attempt ${a.attempt}${a.lastFailure ? ` after: ${a.lastFailure}` : ''}` : '';
  return `${a.activity} ${amount}${retry}`;
}
