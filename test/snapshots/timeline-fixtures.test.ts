import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { FIXTURE_MASTER_KEY } from '../../scripts/make-snapshot-fixtures';
import { FIXTURE_SESSION } from '../../scripts/make-timeline-fixtures';
import { ChunkedSnapshotStore, Keyring, TimelineConflictError, type TimelineRecord } from '../../src/snapshots';
import { TIMELINE_LAYOUT_VERSION } from '../../src/snapshots/timeline-objects';

/**
 * Timelines written in every released layout (scripts/make-timeline-fixtures.ts) must read with today's store, and a
 * store of an earlier release goes on: new entries are added beside its segment files, which are never rewritten.
 */
const root = path.join(__dirname, '..', 'fixtures', 'timelines');
const corpora = fs.readdirSync(root).filter((d) => fs.statSync(path.join(root, d)).isDirectory());

let dir: string;
afterEach(() => {
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

/** A copy of a corpus's store (tests never touch the originals) and the entries it holds. */
function copyOf(corpus: string): { expected: TimelineRecord[]; store: () => ChunkedSnapshotStore } {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ds-timeline-fixture-'));
  fs.cpSync(path.join(root, corpus, 'fixture'), dir, { recursive: true });
  const expected = JSON.parse(fs.readFileSync(path.join(root, corpus, 'expected.json'), 'utf8')) as TimelineRecord[];
  const keyring = corpus.endsWith('-plaintext') ? null : new Keyring([FIXTURE_MASTER_KEY]);
  return { expected, store: () => new ChunkedSnapshotStore({ rootDir: dir, keyring }) };
}

/** Every file under the copy, by path, with its bytes. */
function files(): Map<string, Buffer> {
  const out = new Map<string, Buffer>();
  for (const name of fs.readdirSync(dir, { recursive: true }) as string[]) {
    const file = path.join(dir, name);
    if (fs.statSync(file).isFile()) out.set(name, fs.readFileSync(file));
  }
  return out;
}

async function readAll(store: ChunkedSnapshotStore, limit: number): Promise<TimelineRecord[]> {
  const all: TimelineRecord[] = [];
  for (let from: number | null = 1; from !== null;) {
    const page: Awaited<ReturnType<ChunkedSnapshotStore['readTimeline']>> = await store.readTimeline(FIXTURE_SESSION, {
      from,
      limit,
    });
    all.push(...page.entries);
    from = page.next;
  }
  return all;
}

const entry = (index: number, kind = 'note'): TimelineRecord => ({ index, branch: 0, kind, at: 'now' });

test('there is an encrypted and a plaintext corpus for every timeline layout', () => {
  for (let layout = 1; layout <= TIMELINE_LAYOUT_VERSION; layout++) {
    expect(corpora).toEqual(expect.arrayContaining([`layout${layout}`, `layout${layout}-plaintext`]));
  }
});

describe.each(corpora)('corpus %s', (corpus) => {
  test('reads every entry, in index order, by any page size', async () => {
    const { expected, store } = copyOf(corpus);
    expect(await readAll(store(), 1000)).toEqual(expected);
    expect(await readAll(store(), 2)).toEqual(expected);
    expect(await store().readTimeline(FIXTURE_SESSION, { from: 4, limit: 1 })).toEqual({
      entries: [expected.find((e) => e.index === 5)],
      next: 1001,
    });
  });

  test('goes on: new entries beside the old, repeats skipped, other content refused, nothing rewritten', async () => {
    const { expected, store } = copyOf(corpus);
    const before = files();
    const again = expected.find((e) => e.index === 2)!;
    await store().appendTimeline(FIXTURE_SESSION, [entry(4), again, entry(1002), entry(6)]);
    const refused = store().appendTimeline(FIXTURE_SESSION, [entry(7), { ...again, kind: 'other' }]);
    await expect(refused).rejects.toBeInstanceOf(TimelineConflictError);
    await expect(refused).rejects.toMatchObject({ code: 'Conflict', index: 2 });
    const merged = [...expected, entry(4), entry(1002), entry(6)].sort((a, b) => a.index - b.index);
    expect(await readAll(store(), 3)).toEqual(merged);
    // Every file the corpus had is there with the same bytes; what is new is one entry object per new index.
    const after = files();
    for (const [name, bytes] of before) expect(after.get(name)?.equals(bytes)).toBe(true);
    const added = [...after.keys()].filter((name) => !before.has(name)).sort();
    expect(added.filter((name) => name.includes('timeline-entries'))).toEqual([
      `${FIXTURE_SESSION}/timeline-entries/0000000000000001/0000000000000004`,
      `${FIXTURE_SESSION}/timeline-entries/0000000000000001/0000000000000006`,
      `${FIXTURE_SESSION}/timeline-entries/0000000000001001/0000000000001002`,
    ]);
    expect(added.some((name) => name.endsWith('.log'))).toBe(false);
  });
});

describe.each(['layout1', 'layout1-plaintext'])('segment files of an earlier release (%s)', (corpus) => {
  test('an index in both a segment and an object, with other content, is a Conflict on read', async () => {
    const { store } = copyOf(corpus);
    // What a worker of an earlier release (segments) and one of this (objects) appending index 2 at once can leave:
    // the segment set aside, the object stored, the segment back.
    const log = path.join(dir, FIXTURE_SESSION, 'timeline', '0000000000000001.log');
    fs.renameSync(log, `${log}.aside`);
    await store().appendTimeline(FIXTURE_SESSION, [entry(2, 'other')]);
    fs.renameSync(`${log}.aside`, log);
    const read = store().readTimeline(FIXTURE_SESSION);
    await expect(read).rejects.toBeInstanceOf(TimelineConflictError);
    await expect(read).rejects.toMatchObject({ code: 'Conflict', index: 2 });
    // The page before it still reads.
    expect((await store().readTimeline(FIXTURE_SESSION, { limit: 1 })).entries.map((e) => e.index)).toEqual([1]);
  });

  test('a torn tail an earlier release left is read as what precedes it and is not cut', async () => {
    const { expected, store } = copyOf(corpus);
    const log = path.join(dir, FIXTURE_SESSION, 'timeline', '0000000000000001.log');
    // The last frame of the segment (index 5, appended last) cut short by a crash.
    fs.truncateSync(log, fs.statSync(log).size - 7);
    const torn = fs.readFileSync(log);
    const before = expected.filter((e) => e.index !== 5);
    expect(await readAll(store(), 1000)).toEqual(before);
    // The retried append stores index 5 as an object; the segment keeps its bytes.
    await store().appendTimeline(FIXTURE_SESSION, [expected.find((e) => e.index === 5)!]);
    expect(await readAll(store(), 1000)).toEqual(expected);
    expect(fs.readFileSync(log).equals(torn)).toBe(true);
  });

  test('the same entry in both reads once', async () => {
    const { expected, store } = copyOf(corpus);
    const log = path.join(dir, FIXTURE_SESSION, 'timeline', '0000000000000001.log');
    fs.renameSync(log, `${log}.aside`);
    await store().appendTimeline(FIXTURE_SESSION, [expected.find((e) => e.index === 2)!]);
    fs.renameSync(`${log}.aside`, log);
    expect(await readAll(store(), 1000)).toEqual(expected);
  });
});

test('rekey and shred cover a timeline in segment files as they cover entry objects', async () => {
  const { expected, store } = copyOf('layout1');
  await store().appendTimeline(FIXTURE_SESSION, [entry(4)]);
  const k2 = { id: 'k2', key: randomBytes(32) };
  const rotated = new ChunkedSnapshotStore({
    rootDir: dir,
    keyring: new Keyring([FIXTURE_MASTER_KEY]).withKey(k2.id, k2.key, { primary: true }),
  });
  expect(await rotated.rekey()).toEqual({ rewrapped: 1, unchanged: 0 });
  const onlyNew = new ChunkedSnapshotStore({ rootDir: dir, keyring: new Keyring([k2]) });
  const merged = [...expected, entry(4)].sort((a, b) => a.index - b.index);
  expect(await readAll(onlyNew, 1000)).toEqual(merged);
  await onlyNew.gc();
  expect(await readAll(onlyNew, 1000)).toEqual(merged);
  await onlyNew.shred(FIXTURE_SESSION);
  expect([...files().keys()].filter((name) => name.includes('timeline'))).toEqual([]);
  expect(await onlyNew.readTimeline(FIXTURE_SESSION)).toEqual({ entries: [], next: null });
});
