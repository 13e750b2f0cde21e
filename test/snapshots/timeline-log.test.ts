import { randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { crc32 } from 'node:zlib';
import {
  ChunkedSnapshotStore,
  FsSnapshotStore,
  Keyring,
  SnapshotCorruptError,
  SnapshotTamperedError,
  TimelineConflictError,
  type SnapshotMaintenance,
  type SnapshotStore,
  type TimelineLog,
  type TimelineRecord,
} from '../../src/snapshots';
import { cp } from '../helpers/checkpoints';

/**
 * The timeline log of both stores on a local directory (layout 2: one file per entry), on real files: what a caller
 * sees after appends, crashes and damage. Layout 1 (segment files of earlier releases) is read in
 * timeline-fixtures.test.ts.
 */
let dir: string;
beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ds-timeline-'));
});
afterEach(() => {
  fs.rmSync(dir, { recursive: true, force: true });
});

const keyring = new Keyring([{ id: 'k1', key: randomBytes(32) }]);
type Store = SnapshotStore & TimelineLog;

const STORES: { name: string; open: (root: string) => Store; authenticated: boolean }[] = [
  {
    name: 'chunked, encrypted',
    open: (root) => new ChunkedSnapshotStore({ rootDir: root, keyring }),
    authenticated: true,
  },
  {
    name: 'chunked, plaintext',
    open: (root) => new ChunkedSnapshotStore({ rootDir: root, keyring: null }),
    authenticated: false,
  },
  { name: 'format 1', open: (root) => new FsSnapshotStore(root), authenticated: false },
];

const entry = (index: number, extra: Record<string, unknown> = {}): TimelineRecord => ({
  index,
  kind: 'output',
  at: `2026-01-01T00:00:${String(index % 60).padStart(2, '0')}Z`,
  ...extra,
});
const range = (first: number, last: number): number[] => Array.from({ length: last - first + 1 }, (_, i) => first + i);
const indices = (entries: readonly TimelineRecord[]) => entries.map((e) => e.index);
const digits = (n: number) => String(n).padStart(16, '0');
/** The file of an entry (layout 2). */
const entryFile = (session: string, index: number) =>
  path.join(dir, session, 'timeline-entries', digits(Math.floor((index - 1) / 1000) * 1000 + 1), digits(index));

/** Every file of a session's timeline (both folders), by path under the session, with its bytes. */
function timelineFiles(session: string): Map<string, Buffer> {
  const files = new Map<string, Buffer>();
  for (const folder of ['timeline', 'timeline-entries']) {
    const base = path.join(dir, session, folder);
    if (!fs.existsSync(base)) continue;
    for (const name of fs.readdirSync(base, { recursive: true }) as string[]) {
      const file = path.join(base, name);
      if (fs.statSync(file).isFile()) files.set(path.join(folder, name), fs.readFileSync(file));
    }
  }
  return files;
}
/** The entry files of a session (temp files are not entries). */
const entryFiles = (session: string) =>
  [...timelineFiles(session).keys()].filter(
    (f) => f.startsWith('timeline-entries') && !path.basename(f).startsWith('.'),
  );

/** Every entry of a session's timeline, page by page. */
async function readAllPages(store: TimelineLog, sessionId: string, limit?: number): Promise<TimelineRecord[]> {
  const all: TimelineRecord[] = [];
  let from: number | null = 1;
  while (from !== null) {
    const page: Awaited<ReturnType<TimelineLog['readTimeline']>> = await store.readTimeline(sessionId, {
      from,
      ...(limit !== undefined ? { limit } : {}),
    });
    all.push(...page.entries);
    from = page.next;
  }
  return all;
}

/** The frame of an entry file: its body's length (the body starts after the 20-byte header). */
const bodyLength = (file: string) => fs.readFileSync(file).readUInt32BE(4);

/** Rewrites the index in a frame's header (and its CRC): a genuine record filed under another index. */
function refile(file: string, frameAt: number, index: number): void {
  const bytes = fs.readFileSync(file);
  bytes.writeUInt32BE(index, frameAt + 12);
  bytes.writeUInt32BE(crc32(bytes.subarray(frameAt, frameAt + 16)), frameAt + 16);
  fs.writeFileSync(file, bytes);
}

describe.each(STORES)('the timeline log: $name', ({ open, authenticated }) => {
  let store: Store;
  beforeEach(() => {
    store = open(dir);
  });

  test('pages in index order from any index; `next` is the next stored index', async () => {
    await store.appendTimeline(
      's1',
      range(1, 250).map((i) => entry(i)),
    );
    const first = await store.readTimeline('s1');
    expect(first.entries).toHaveLength(100);
    expect(first.entries[0]).toEqual(entry(1));
    expect(first.next).toBe(101);
    expect(indices((await store.readTimeline('s1', { from: 101, limit: 100 })).entries)).toEqual(range(101, 200));
    expect(await store.readTimeline('s1', { from: 201, limit: 1000 })).toMatchObject({ next: null });
    expect(indices(await readAllPages(store, 's1', 7))).toEqual(range(1, 250));
    // A fresh store (another worker) reads the same.
    expect(await readAllPages(open(dir), 's1')).toEqual(range(1, 250).map((i) => entry(i)));
  });

  test('gaps read as what exists; a gap may be filled later, across segments', async () => {
    await store.appendTimeline('s1', [entry(5), entry(1), entry(2)]);
    await store.appendTimeline('s1', [entry(1001), entry(2500)]);
    expect(await store.readTimeline('s1', { from: 3, limit: 1 })).toEqual({ entries: [entry(5)], next: 1001 });
    await store.appendTimeline('s1', [entry(4), entry(3)]);
    expect(indices((await store.readTimeline('s1')).entries)).toEqual([1, 2, 3, 4, 5, 1001, 2500]);
    expect(await store.readTimeline('s1', { from: 2501 })).toEqual({ entries: [], next: null });
    expect(await store.readTimeline('never-written')).toEqual({ entries: [], next: null });
  });

  test('a repeated append (a retried activity) is a no-op: no file changes', async () => {
    await store.appendTimeline(
      's1',
      range(1, 20).map((i) => entry(i)),
    );
    const before = timelineFiles('s1');
    expect(entryFiles('s1')).toHaveLength(20);
    await store.appendTimeline(
      's1',
      range(1, 20).map((i) => entry(i)),
    );
    await store.appendTimeline('s1', [entry(7), entry(7)]);
    expect(timelineFiles('s1')).toEqual(before);
  });

  test('other content at a stored index is refused, and nothing of that append is written', async () => {
    await store.appendTimeline('s1', [entry(1), entry(2)]);
    const refused = store.appendTimeline('s1', [entry(3), entry(2, { text: 'different' })]);
    await expect(refused).rejects.toBeInstanceOf(TimelineConflictError);
    await expect(refused).rejects.toMatchObject({ code: 'Conflict', sessionId: 's1', index: 2, retryable: false });
    await expect(store.appendTimeline('s1', [entry(9), entry(9, { text: 'twice' })])).rejects.toMatchObject({
      code: 'Conflict',
      index: 9,
    });
    expect(indices((await store.readTimeline('s1')).entries)).toEqual([1, 2]);
  });

  test('a crash mid-write leaves no half-visible entry: a temp file is not an entry', async () => {
    await store.appendTimeline(
      's1',
      range(1, 9).map((i) => entry(i)),
    );
    // What a writer killed between its write and its link leaves: part of entry 10 in a temp file beside the entries.
    const whole = fs.readFileSync(entryFile('s1', 9));
    const temp = path.join(path.dirname(entryFile('s1', 10)), '.0123456789abcdef.tmp');
    fs.writeFileSync(temp, whole.subarray(0, whole.length - 7));
    expect(await open(dir).readTimeline('s1')).toEqual({ entries: range(1, 9).map((i) => entry(i)), next: null });
    // The retried append stores index 10 whole.
    await store.appendTimeline('s1', [entry(10), entry(11)]);
    expect(await readAllPages(open(dir), 's1')).toEqual(range(1, 11).map((i) => entry(i)));
    // Cleaning leftovers removes it once it is old; the entries stay.
    const old = new Date(Date.now() - 2 * 60 * 60_000);
    fs.utimesSync(temp, old, old);
    expect(await (store as Store & SnapshotMaintenance).cleanAbandoned()).toMatchObject({ tempFiles: 1 });
    expect(fs.existsSync(temp)).toBe(false);
    expect(entryFiles('s1')).toHaveLength(11);
  });

  test('an altered byte in a record is refused on read, never returned', async () => {
    await store.appendTimeline(
      's1',
      range(1, 5).map((i) => entry(i)),
    );
    const file = entryFile('s1', 3);
    const bytes = fs.readFileSync(file);
    bytes[20 + bodyLength(file) - 20]! ^= 0x04; // the ciphertext or the digest, not the envelope's header
    fs.writeFileSync(file, bytes);
    const read = store.readTimeline('s1');
    await expect(read).rejects.toBeInstanceOf(SnapshotTamperedError);
    await expect(read).rejects.toMatchObject({ code: authenticated ? 'SnapshotTampered' : 'SnapshotCorrupt' });
    // The records before it are still readable by page.
    expect(indices((await store.readTimeline('s1', { limit: 2 })).entries)).toEqual([1, 2]);
  });

  test('a damaged frame header is corruption, never an entry', async () => {
    await store.appendTimeline(
      's1',
      range(1, 5).map((i) => entry(i)),
    );
    const file = entryFile('s1', 2);
    const bytes = fs.readFileSync(file);
    bytes[5]! ^= 0x01; // the frame's length
    fs.writeFileSync(file, bytes);
    await expect(store.readTimeline('s1')).rejects.toBeInstanceOf(SnapshotCorruptError);
    // A retried append of that index cannot tell whether it is the same entry: refused, nothing written.
    await expect(store.appendTimeline('s1', [entry(2)])).rejects.toMatchObject({ code: 'SnapshotCorrupt' });
    expect(fs.readFileSync(file).equals(bytes)).toBe(true);
  });

  test('a record moved to another index or another session is refused', async () => {
    await store.appendTimeline(
      's1',
      range(1, 3).map((i) => entry(i)),
    );
    await store.appendTimeline('s2', [entry(1, { text: 'of s2' })]);

    // Index 2's genuine record as index 4's file, its header saying 2: not one record of its index.
    fs.mkdirSync(path.dirname(entryFile('s1', 4)), { recursive: true });
    fs.copyFileSync(entryFile('s1', 2), entryFile('s1', 4));
    await expect(store.readTimeline('s1', { from: 3 })).rejects.toMatchObject({ code: 'SnapshotCorrupt' });
    // The header rewritten too (and its CRC): the sealed record itself is bound to index 2.
    refile(entryFile('s1', 4), 0, 4);
    await expect(store.readTimeline('s1', { from: 3 })).rejects.toMatchObject({
      code: authenticated ? 'SnapshotTampered' : 'SnapshotCorrupt',
    });

    // s1's record in s2's place.
    fs.copyFileSync(entryFile('s1', 1), entryFile('s2', 1));
    await expect(store.readTimeline('s2')).rejects.toMatchObject({
      code: authenticated ? 'SnapshotTampered' : 'SnapshotCorrupt',
    });
  });

  test('a claim-only session may append; its claim stands', async () => {
    await store.claim('s9', 'run-a');
    await store.appendTimeline('s9', [entry(1)]);
    await store.claim('s9', 'run-a');
    await expect(store.claim('s9', 'run-b')).rejects.toMatchObject({ code: 'SessionAlreadyExists' });
    expect((await store.readTimeline('s9')).entries).toEqual([entry(1)]);
  });

  test('appends racing in one process all land, once each', async () => {
    await Promise.all(range(1, 40).map((i) => store.appendTimeline('s1', [entry(i), entry(Math.max(1, i - 1))])));
    expect(indices(await readAllPages(store, 's1'))).toEqual(range(1, 40));
    expect(entryFiles('s1')).toHaveLength(40);
  });

  test('appenders that share nothing but the files (two workers): each index is stored once', async () => {
    const others = [store, open(dir), open(dir)];
    await Promise.all(
      range(1, 60).map((i) => others[i % 3]!.appendTimeline('s1', [entry(i), entry(Math.max(1, i - 2))])),
    );
    expect(indices(await readAllPages(open(dir), 's1'))).toEqual(range(1, 60));
    expect(entryFiles('s1')).toHaveLength(60);
  });

  test('two writers racing on one index with other content: one stores it, the other gets a Conflict', async () => {
    for (let round = 1; round <= 10; round++) {
      const [a, b] = [open(dir), open(dir)];
      const results = await Promise.allSettled([
        a.appendTimeline('s1', [entry(round, { writer: 'a' })]),
        b.appendTimeline('s1', [entry(round, { writer: 'b' })]),
      ]);
      const stored = (await open(dir).readTimeline('s1', { from: round, limit: 1 })).entries[0]!;
      const winner = stored.writer === 'a' ? 0 : 1;
      expect(results[winner].status).toBe('fulfilled');
      expect(results[1 - winner]).toMatchObject({
        status: 'rejected',
        reason: expect.objectContaining({ code: 'Conflict', sessionId: 's1', index: round }),
      });
      expect((results[1 - winner] as PromiseRejectedResult).reason).toBeInstanceOf(TimelineConflictError);
    }
    expect(entryFiles('s1')).toHaveLength(10);
  });

  test('a lock file an earlier release left is neither an obstacle nor an entry', async () => {
    await store.appendTimeline('s1', [entry(1)]);
    const lock = path.join(dir, 's1', 'timeline', '.lock');
    fs.writeFileSync(lock, 'dead-appender');
    await store.appendTimeline('s1', [entry(2)]);
    expect(indices((await store.readTimeline('s1')).entries)).toEqual([1, 2]);
  });

  test('ids that could leave the store, bad entries and bad pages are refused before any file is touched', async () => {
    for (const bad of ['../x', '..', 'a/b', '', '.hidden']) {
      await expect(store.appendTimeline(bad, [entry(1)])).rejects.toThrow(TypeError);
      await expect(store.readTimeline(bad)).rejects.toThrow(TypeError);
    }
    const big = entry(1, { text: 'x'.repeat(64 * 1024) });
    for (const bad of [{ index: 0 }, { index: 1.5 }, { kind: 'no index' }, big, null]) {
      await expect(store.appendTimeline('s1', [bad as TimelineRecord])).rejects.toThrow(TypeError);
    }
    await expect(store.readTimeline('s1', { limit: 1001 })).rejects.toThrow(RangeError);
    await expect(store.readTimeline('s1', { from: 0 })).rejects.toThrow(RangeError);
    expect(fs.readdirSync(dir)).toEqual([]);
  });

  test('5,000 entries: appended in batches, paged through (timings printed, not asserted)', async () => {
    // A file per entry: 5,000 are enough to page through many segments (bench/timeline.ts measures the layouts).
    const total = 5_000;
    const batch = 1000;
    let started = performance.now();
    for (let first = 1; first <= total; first += batch) {
      await store.appendTimeline(
        'big',
        range(first, first + batch - 1).map((i) => entry(i, { text: `line ${i} of the session's output` })),
      );
    }
    const appendMs = performance.now() - started;
    started = performance.now();
    const byMax = await readAllPages(store, 'big', 1000);
    const pageMaxMs = performance.now() - started;
    started = performance.now();
    const byDefault = await readAllPages(store, 'big');
    const pageDefaultMs = performance.now() - started;
    started = performance.now();
    await store.appendTimeline('big', [entry(total + 1)]);
    const oneMoreMs = performance.now() - started;
    expect(byMax).toHaveLength(total);
    expect(byDefault).toHaveLength(total);
    expect(byDefault[total - 1]!.index).toBe(total);
    const bytes = [...timelineFiles('big').values()].reduce((sum, b) => sum + b.length, 0);
    console.log(
      `timeline 5k (${expect.getState().currentTestName}): append ${total / batch}×${batch} ${appendMs.toFixed(0)} ms, ` +
        `page by 1000 ${pageMaxMs.toFixed(0)} ms, by 100 ${pageDefaultMs.toFixed(0)} ms, ` +
        `one more append ${oneMoreMs.toFixed(1)} ms, ${(bytes / 1024 / 1024).toFixed(1)} MiB on disk`,
    );
  }, 120_000);
});

describe('the chunked store: timelines, lineages and maintenance', () => {
  const chunked = (options: { keyring?: Keyring | null } = {}) =>
    new ChunkedSnapshotStore({
      rootDir: dir,
      keyring: options.keyring === undefined ? keyring : options.keyring,
      gcGraceMs: 0,
    });

  test("a fork's records are under its lineage's key; the source's timeline stays readable", async () => {
    const store = chunked();
    await store.write(cp(1), Readable.from([randomBytes(20_000)]));
    await store.appendTimeline('s1', [entry(1), entry(2)]);
    await store.fork(
      { sessionId: 's1', checkpointId: 'cp-1' },
      { sessionId: 's2', checkpointId: 'f-1', trigger: 'manual' },
    );
    await store.appendTimeline('s2', [entry(1, { text: 'the fork' })]);
    // No data key of its own: the fork seals under lineage s1's.
    expect(fs.existsSync(path.join(dir, 's2', 'keys'))).toBe(false);
    const fresh = chunked();
    expect((await fresh.readTimeline('s1')).entries).toEqual([entry(1), entry(2)]);
    expect((await fresh.readTimeline('s2')).entries).toEqual([entry(1, { text: 'the fork' })]);
    // Another keyring cannot open them.
    const stranger = chunked({ keyring: new Keyring([{ id: 'k1', key: randomBytes(32) }]) });
    await expect(stranger.readTimeline('s2')).rejects.toMatchObject({ code: 'SnapshotTampered' });
  });

  test('records are sealed: no plaintext on disk; a store without keys cannot read them', async () => {
    const store = chunked();
    await store.appendTimeline('s1', [entry(1, { text: 'secret words' })]);
    expect([...timelineFiles('s1').values()].some((b) => b.includes('secret words'))).toBe(false);
    await expect(chunked({ keyring: null }).readTimeline('s1')).rejects.toMatchObject({ code: 'KeyUnavailable' });
    // And the other way: a plaintext record in a store with keys is not one it wrote.
    await store.appendTimeline('p1', [entry(2)]);
    await chunked({ keyring: null }).appendTimeline('p1', [entry(1)]);
    await expect(store.readTimeline('p1')).rejects.toMatchObject({ code: 'SnapshotTampered' });
  });

  test('a timeline-only lineage whose data key is gone gets no new key: its records stay what they were', async () => {
    const store = chunked();
    await store.claim('s1', 'run-a');
    await store.appendTimeline('s1', [entry(1)]);
    fs.rmSync(path.join(dir, 's1', 'keys', 'data-key.json'));
    await expect(chunked().appendTimeline('s1', [entry(2)])).rejects.toMatchObject({ code: 'KeyUnavailable' });
    await expect(chunked().readTimeline('s1')).rejects.toMatchObject({ code: 'KeyUnavailable' });
  });

  test('rekey covers timeline entries: after it, a keyring without the old master key reads them', async () => {
    const store = chunked();
    await store.claim('s1', 'run-a');
    await store.appendTimeline('s1', [entry(1, { text: 'before the rotation' }), entry(2)]);
    const k2 = { id: 'k2', key: randomBytes(32) };
    const rotated = chunked({ keyring: keyring.withKey(k2.id, k2.key, { primary: true }) });
    expect(await rotated.rekey()).toEqual({ rewrapped: 1, unchanged: 0 });
    const onlyNew = chunked({ keyring: new Keyring([k2]) });
    expect((await onlyNew.readTimeline('s1')).entries).toEqual([entry(1, { text: 'before the rotation' }), entry(2)]);
    await onlyNew.appendTimeline('s1', [entry(3)]);
    expect(indices((await onlyNew.readTimeline('s1')).entries)).toEqual([1, 2, 3]);
  });

  test.each([
    ['encrypted', keyring],
    ['plaintext', null],
  ] as const)('gc keeps the timeline; shred removes it for every session of the lineage (%s)', async (_, keys) => {
    const store = chunked({ keyring: keys });
    await store.write(cp(1), Readable.from([randomBytes(20_000)]));
    await store.appendTimeline('s1', [entry(1)]);
    await store.fork(
      { sessionId: 's1', checkpointId: 'cp-1' },
      { sessionId: 's2', checkpointId: 'f-1', trigger: 'manual' },
    );
    await store.appendTimeline('s2', [entry(1)]);
    await store.appendTimeline('other', [entry(1)]);
    await store.gc();
    expect((await store.readTimeline('s1')).entries).toEqual([entry(1)]);
    expect((await store.readTimeline('s2')).entries).toEqual([entry(1)]);
    await store.shred('s2');
    expect(timelineFiles('s1').size).toBe(0);
    expect(timelineFiles('s2').size).toBe(0);
    expect((await store.readTimeline('s1')).entries).toEqual([]);
    expect((await store.readTimeline('other')).entries).toEqual([entry(1)]);
  });
});
