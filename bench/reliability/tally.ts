/**
 * Counts per scenario row and the one table the run prints, with what went wrong told in full below it: which
 * session, what happened, its timeline.
 */
import * as path from 'node:path';
import type { Outcome, Verdict } from './judge';
import type { LeakedFile, SessionProcess } from './host';

interface Row {
  trials: number;
  /** Trials whose fault came while their operation was under way, of those with an operation struck. */
  struck: { underWay: number; of: number };
  verdicts: Record<Verdict, number>;
  orphans: number;
  /** Trials in which two copies of one session ran at once. */
  doubled: number;
  leakedBytes: number;
  /** Leaked files and objects, an object store's unfinished uploads included. */
  leakedObjects: number;
}

const COLUMNS = [
  'scenario',
  'trials',
  'survived',
  'lost',
  'corrupt',
  'stuck',
  'orphans',
  'leaked bytes',
  'leaked objects',
  'two copies',
];

export class Tally {
  private readonly rows = new Map<string, Row>();
  /** Each leaked file once, however many checks saw it. */
  private readonly leaked = new Map<string, number>();
  /** Orphans are counted by process group: one copy of a command, however many children it has had. */
  private readonly orphanGroups = new Set<number>();
  readonly findings: string[] = [];

  row(name: string): Row {
    let row = this.rows.get(name);
    if (!row) {
      row = {
        trials: 0,
        struck: { underWay: 0, of: 0 },
        verdicts: { survived: 0, lost: 0, corrupt: 0, stuck: 0 },
        orphans: 0,
        doubled: 0,
        leakedBytes: 0,
        leakedObjects: 0,
      };
      this.rows.set(name, row);
    }
    return row;
  }

  outcome(outcome: Outcome): void {
    const row = this.row(outcome.subject.row);
    row.trials++;
    row.verdicts[outcome.verdict]++;
    const { subject } = outcome;
    const op = subject.operation;
    if (op?.struckAt !== undefined) {
      row.struck.of++;
      if (op.underWay ?? (op.answeredAt === undefined || op.answeredAt > op.struckAt)) row.struck.underWay++;
    }
    if (outcome.verdict === 'survived') return;
    const lines = [
      `${outcome.verdict.toUpperCase()} — ${subject.row} — session ${subject.sessionId}: ${outcome.detail ?? ''}`,
    ];
    if (op) {
      const answer = op.outcome === undefined ? 'no answer' : op.outcome.ok ? 'ok' : `failed: ${op.outcome.error}`;
      const lag = op.answeredAt !== undefined && op.struckAt !== undefined ? op.answeredAt - op.struckAt : undefined;
      const when = lag === undefined ? '' : lag < 0 ? ` ${-lag} ms before the fault` : ` ${lag} ms after the fault`;
      lines.push(`  ${op.name}: fault ${op.offsetMs ?? '?'} ms after it began; it answered${when}: ${answer}`);
    }
    for (const note of subject.notes) lines.push(`  ${note.replace(/\n/g, '\n  ')}`);
    if (outcome.status) {
      const s = outcome.status;
      lines.push(
        `  status: ${s.phase}, head ${s.head?.checkpointId ?? 'none'}, runtime ${s.runtime?.instanceId ?? 'none'}` +
          (s.failure ? `, failure ${s.failure.type}: ${s.failure.message}` : ''),
      );
    }
    for (const entry of outcome.timeline ?? []) lines.push(`  timeline: ${timelineLine(entry)}`);
    this.findings.push(lines.join('\n'));
  }

  orphans(rowName: string, processes: readonly SessionProcess[], when: string): void {
    const fresh = processes.filter((p) => !this.orphanGroups.has(p.pgrp));
    if (fresh.length === 0) return;
    const groups = new Set(fresh.map((p) => p.pgrp));
    for (const group of groups) this.orphanGroups.add(group);
    this.row(rowName).orphans += groups.size;
    this.findings.push(
      `ORPHANS — ${rowName}: ${when}:\n` +
        fresh
          .map((p) => {
            const cwd = `${p.cwd ?? '?'}${p.cwdDeleted ? ' (deleted)' : ''}`;
            return `  pid ${p.pid} group ${p.pgrp} state ${p.state} cwd ${cwd}: ${p.cmdline.slice(0, 160)}`;
          })
          .join('\n'),
    );
  }

  leaks(rowOf: (file: string) => string, files: readonly LeakedFile[], when: string): void {
    const fresh = files.filter((f) => !this.leaked.has(f.path));
    if (fresh.length === 0) return;
    const byRow = new Map<string, LeakedFile[]>();
    for (const file of fresh) {
      this.leaked.set(file.path, file.bytes);
      const name = rowOf(file.path);
      byRow.set(name, [...(byRow.get(name) ?? []), file]);
    }
    for (const [name, list] of byRow) {
      this.row(name).leakedBytes += list.reduce((n, f) => n + f.bytes, 0);
      this.row(name).leakedObjects += list.length;
      this.findings.push(`LEAKED — ${name}: ${when}:\n` + list.map((f) => `  ${f.bytes} bytes ${f.path}`).join('\n'));
    }
  }

  /**
   * A trial with no session of its own (a store probed directly): its verdict, and what was wrong when not survived.
   */
  trial(rowName: string, verdict: Verdict, detail: string): void {
    const row = this.row(rowName);
    row.trials++;
    row.verdicts[verdict]++;
    if (verdict !== 'survived') this.findings.push(`${verdict.toUpperCase()} — ${rowName} — ${detail}`);
  }

  /** A trial in which two copies of one session ran at once (its verdict is counted by `trial` or `outcome`). */
  doubled(rowName: string): void {
    this.row(rowName).doubled++;
  }

  /** How many faults came while the operation they were aimed at was under way, per row that aims at one. */
  underWay(): string {
    const counted = [...this.rows].filter(([, r]) => r.struck.of > 0);
    return counted.map(([name, r]) => `  ${name}: ${r.struck.underWay} of ${r.struck.of}`).join('\n');
  }

  /** Whether every trial survived and nothing was orphaned or leaked. */
  get clean(): boolean {
    return [...this.rows.values()].every(
      (r) =>
        r.verdicts.survived === r.trials &&
        r.orphans === 0 &&
        r.doubled === 0 &&
        r.leakedBytes === 0 &&
        r.leakedObjects === 0,
    );
  }

  /** The table, in the order the rows were first used. */
  table(): string {
    const body = [...this.rows].map(([name, r]) => [
      name,
      r.trials,
      r.verdicts.survived,
      r.verdicts.lost,
      r.verdicts.corrupt,
      r.verdicts.stuck,
      r.orphans,
      r.leakedBytes,
      r.leakedObjects,
      r.doubled,
    ]);
    const cells = [COLUMNS, ...body].map((line) => line.map(String));
    const widths = COLUMNS.map((_, i) => Math.max(...cells.map((line) => line[i]!.length)));
    const render = (line: string[]) =>
      `| ${line.map((cell, i) => (i === 0 ? cell.padEnd(widths[i]!) : cell.padStart(widths[i]!))).join(' | ')} |`;
    const rule = `|${widths.map((w, i) => (i === 0 ? '-'.repeat(w + 2) : `${'-'.repeat(w + 1)}:`)).join('|')}|`;
    return [render(cells[0]!), rule, ...cells.slice(1).map(render)].join('\n');
  }
}

function timelineLine(entry: Record<string, unknown> & { kind: string }): string {
  const { kind, at, ...rest } = entry;
  const checkpoint = rest.checkpoint as { checkpointId?: string; trigger?: string } | undefined;
  if (checkpoint) return `${String(at)} checkpoint ${checkpoint.checkpointId} (${checkpoint.trigger})`;
  return `${String(at ?? '')} ${kind} ${JSON.stringify(rest)}`;
}

/** The session a path under the workspace root or the snapshot store belongs to (its first component). */
export function sessionOfPath(root: string, file: string): string | undefined {
  const [first, second] = path.relative(root, file).split(path.sep);
  if (first === '.run') return second?.replace(/-[0-9a-f]{8}\.json$/, '');
  return first;
}
