import type { Durability, TimelineEntry } from './records';
import type { TimelinePageInput } from './schemas';

/**
 * The timeline as readers see it. Entries are immutable once recorded (the store's log is append-only), so what later
 * entries say about a checkpoint — verified, regenerated — is folded into its entry when a page is read.
 */

/** Marks each checkpoint entry with what later entries in `entries` say about it. */
export function foldTimeline(entries: readonly TimelineEntry[]): TimelineEntry[] {
  const verified = new Map<string, Durability>();
  const regenerated = new Set<string>();
  for (const e of entries) {
    if (e.kind === 'verified') verified.set(e.checkpointId, e.status === 'ok' ? 'verified' : 'failed-verification');
    if (e.kind === 'forked' && e.regenerate && e.replaces) regenerated.add(e.replaces);
  }
  return entries.map((e) => {
    if (e.kind !== 'checkpoint') return e;
    const id = e.checkpoint.checkpointId;
    const durability = verified.get(id) ?? e.durability;
    return {
      ...e,
      ...(durability ? { durability } : {}),
      ...(regenerated.has(id) ? { regenerated: true } : {}),
    };
  });
}

/** Whether an entry is in a page asked for with `options` (branch filter; regenerated turns hidden by default). */
export function inView(entry: TimelineEntry, options: TimelinePageInput): boolean {
  if (options.branch !== undefined && (entry.branch ?? 0) !== options.branch) return false;
  if (!options.all && entry.kind === 'checkpoint' && entry.regenerated) return false;
  return true;
}

/** Entries from two sources (the store's log and a session's recent window), each index once, in index order. */
export function mergeByIndex(...sources: readonly (readonly TimelineEntry[])[]): TimelineEntry[] {
  const byIndex = new Map<number, TimelineEntry>();
  const unindexed: TimelineEntry[] = [];
  for (const source of sources) {
    for (const e of source) {
      if (e.index === undefined) unindexed.push(e);
      else if (!byIndex.has(e.index)) byIndex.set(e.index, e);
    }
  }
  return [...unindexed, ...[...byIndex.values()].sort((a, b) => a.index! - b.index!)];
}

/**
 * What an entry is, in words, for a refusal that names it: "a restore of the checkpoint at index 2". Checkpoints are
 * named by their timeline index where it is known, by id otherwise.
 */
export function describeEntry(entry: TimelineEntry, indexOf: (checkpointId: string) => number | undefined): string {
  const at = (id: string | null | undefined, known?: number) => {
    const index = known ?? (id ? indexOf(id) : undefined);
    return index !== undefined ? `the checkpoint at index ${index}` : `checkpoint ${id ?? '(none)'}`;
  };
  switch (entry.kind) {
    case 'checkpoint':
      return `a checkpoint`;
    case 'restored':
      return `a restore of ${at(entry.checkpointId)}`;
    case 'rewound':
      return `a rewind to ${at(entry.to, entry.toIndex)}`;
    case 'forked':
      return `a fork of ${at(entry.checkpointId, entry.checkpointIndex)}`;
    case 'verified':
      return `a verification of ${at(entry.checkpointId)}`;
    case 'checkpoint-deleted':
      return `the deletion of ${at(entry.checkpointId)}`;
    case 'fallback':
      return `a fallback from ${at(entry.fromCheckpointId)}`;
    default:
      return `a ${entry.kind} entry`;
  }
}

/** The checkpoint index closest to `index` (the earlier one of two as close), or undefined without checkpoints. */
export function nearestIndex(checkpointIndices: readonly number[], index: number): number | undefined {
  let best: number | undefined;
  for (const i of checkpointIndices) {
    const d = Math.abs(i - index);
    const bestD = best === undefined ? Infinity : Math.abs(best - index);
    if (d < bestD || (d === bestD && best !== undefined && i < best)) best = i;
  }
  return best;
}
