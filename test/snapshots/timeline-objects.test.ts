import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { FIXTURE_MASTER_KEY } from '../../scripts/make-snapshot-fixtures';
import type { FsBlobBackend } from '../../src/snapshots/blob/fs-backend';
import { ChunkedSnapshotStore } from '../../src/snapshots/engine/chunked-store';
import { Keyring } from '../../src/snapshots/engine/keyring';
import { TimelineConflictError } from '../../src/snapshots/errors';
import type { TimelineRecord } from '../../src/snapshots/timeline-log';
import { asOpaque, fsBackend, opaqueFsBackend, type OpenedBackend } from './blob/backends';

/** The timeline as one object per entry (layout 2), as a store on an object store (or any store) keeps it. */

const keyring = new Keyring([{ id: 'k1', key: randomBytes(32) }]);
const entry = (index: number, text = `entry ${index}`) => ({ index, kind: 'note', text });

let opened: OpenedBackend;
beforeEach(async () => {
  opened = await opaqueFsBackend.open();
});
afterEach(async () => {
  await opened.dispose();
});

test('appenders on two hosts racing for one index: exactly one stores it, the other is refused or a no-op', async () => {
  const a = new ChunkedSnapshotStore({ backend: opened.backend, keyring });
  const b = new ChunkedSnapshotStore({ backend: opened.backend, keyring });
  await a.claim('s1', 'run-a');
  const results = await Promise.allSettled(
    Array.from({ length: 8 }, (_, i) => (i % 2 ? a : b).appendTimeline('s1', [entry(1, `writer ${i}`), entry(2 + i)])),
  );
  const page = await b.readTimeline('s1');
  const winner = page.entries[0]!.text as string;
  results.forEach((result, i) => {
    if (`writer ${i}` === winner) expect(result.status).toBe('fulfilled');
    else expect(result).toMatchObject({ status: 'rejected', reason: expect.any(TimelineConflictError) });
  });
  expect(page.entries.map((e) => e.index)[0]).toBe(1);
  expect((await opened.everything()).filter((k) => k.includes('/timeline')).every((k) => !k.endsWith('.log'))).toBe(
    true,
  );
});

test('a timeline an earlier release wrote as segment files reads the same on an object store, and goes on there', async () => {
  // The layout-1 corpus (test/fixtures/timelines), copied as is into a backend the store takes for an object store.
  const onDisk = await fsBackend.open();
  try {
    fs.cpSync(
      path.join(__dirname, '..', 'fixtures', 'timelines', 'layout1', 'fixture'),
      (onDisk.backend as FsBlobBackend).root,
      {
        recursive: true,
      },
    );
    const expected = JSON.parse(
      fs.readFileSync(path.join(__dirname, '..', 'fixtures', 'timelines', 'layout1', 'expected.json'), 'utf8'),
    ) as TimelineRecord[];
    expect(await onDisk.everything()).toContain('fixture/timeline/0000000000000001.log');
    const after = new ChunkedSnapshotStore({
      backend: asOpaque(onDisk.backend),
      keyring: new Keyring([FIXTURE_MASTER_KEY]),
    });
    expect(await after.readTimeline('fixture')).toEqual({ entries: expected, next: null });
    await after.appendTimeline('fixture', [expected[1]!, entry(4)]);
    await expect(after.appendTimeline('fixture', [entry(1, 'other')])).rejects.toBeInstanceOf(TimelineConflictError);
    expect(await after.readTimeline('fixture', { limit: 4 })).toEqual({
      entries: [...expected.slice(0, 3), entry(4)],
      next: 5,
    });
    expect(await onDisk.everything()).toContain('fixture/timeline-entries/0000000000000001/0000000000000004');
  } finally {
    await onDisk.dispose();
  }
});
