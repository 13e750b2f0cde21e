/**
 * The session timeline on a local directory, in its two layouts: segment files appended with O_APPEND + fsync under a
 * lock (layout 1, timeline-log.ts, what earlier releases wrote) and one object per entry written with the backend's
 * `create` (layout 2, timeline-objects.ts, what the store writes now). Plaintext records in both, so the sealing
 * costs the same. For each: appends of one entry (a flush after a control), appends of 32 (a full flush), and a page
 * of 1,000 entries read by a fresh reader (a CLI, or a worker after a restart: nothing cached). Each figure is the
 * best of three rounds (the machine is shared). Nothing here asserts a time: it prints what it measured.
 *
 *   npx tsx bench/timeline.ts [--dir /path/on/the/disk] [--quick]
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { FsBlobBackend } from '../src/snapshots/blob/fs-backend';
import { TimelineObjects } from '../src/snapshots/timeline-objects';
import { plainTimelineSealer, TimelineSegments, type TimelineLog } from '../src/snapshots/timeline-log';
import { table } from './markdown';

const { values } = parseArgs({
  options: { dir: { type: 'string' }, quick: { type: 'boolean', default: false } },
  strict: true,
});
const ROUNDS = 3;
const SINGLE = values.quick ? 100 : 300;
const BATCHES = values.quick ? 10 : 32;

const sealer = async (sessionId: string) => plainTimelineSealer(sessionId);
const LAYOUTS: { name: string; open: (root: string) => TimelineLog }[] = [
  { name: 'layout 1: segment files (O_APPEND)', open: (root) => new TimelineSegments(root, sealer) },
  { name: 'layout 2: one object per entry', open: (root) => new TimelineObjects(new FsBlobBackend(root), sealer) },
];

const entry = (index: number) => ({
  index,
  branch: 0,
  kind: 'checkpoint',
  at: new Date(1_700_000_000_000 + index * 1000).toISOString(),
  checkpoint: { id: `${String(index).padStart(6, '0')}-1a2b3c4d`, sequence: index, durability: 'durable' },
});
const range = (first: number, count: number) => Array.from({ length: count }, (_, i) => entry(first + i));

async function round(open: (root: string) => TimelineLog, base: string) {
  const root = fs.mkdtempSync(path.join(base, 'ds-timeline-bench-'));
  try {
    const log = open(root);
    let started = performance.now();
    for (let i = 1; i <= SINGLE; i++) await log.appendTimeline('single', [entry(i)]);
    const singlePerS = SINGLE / ((performance.now() - started) / 1000);
    started = performance.now();
    for (let b = 0; b < BATCHES; b++) await log.appendTimeline('batched', range(b * 32 + 1, 32));
    const batchedPerS = (BATCHES * 32) / ((performance.now() - started) / 1000);
    // 1,000 entries to page: those already there, then the rest in batches of 32.
    for (let first = BATCHES * 32 + 1; first <= 1000; first += 32) {
      await log.appendTimeline('batched', range(first, Math.min(32, 1001 - first)));
    }
    started = performance.now();
    const page = await open(root).readTimeline('batched', { from: 1, limit: 1000 });
    const pageMs = performance.now() - started;
    if (page.entries.length !== 1000) throw new Error(`read ${page.entries.length} entries, not 1000`);
    return { singlePerS, batchedPerS, pageMs };
  } finally {
    fs.rmSync(root, { recursive: true, force: true });
  }
}

async function main(): Promise<void> {
  const base = values.dir ?? os.tmpdir();
  const rows: string[][] = [];
  for (const { name, open } of LAYOUTS) {
    const results = [];
    for (let r = 0; r < ROUNDS; r++) results.push(await round(open, base));
    rows.push([
      name,
      Math.max(...results.map((r) => r.singlePerS)).toFixed(0),
      Math.max(...results.map((r) => r.batchedPerS)).toFixed(0),
      Math.min(...results.map((r) => r.pageMs)).toFixed(1),
    ]);
  }
  console.log(`timeline on ${base} (best of ${ROUNDS}; ${SINGLE} single appends, ${BATCHES} appends of 32)\n`);
  console.log(table(['layout', 'appends of 1 entry /s', 'entries /s in appends of 32', 'page of 1,000 (ms)'], rows));
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
