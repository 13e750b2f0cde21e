import { randomBytes } from 'node:crypto';
import { ChunkedSnapshotStore } from '../../src/snapshots/engine/chunked-store';
import { Keyring } from '../../src/snapshots/engine/keyring';
import { TimelineConflictError } from '../../src/snapshots/errors';
import { asOpaque, fsBackend, opaqueFsBackend, type OpenedBackend } from './blob/backends';

/** The timeline as one object per entry (layout 2), as a store on an object store keeps it. */

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

test('a timeline written as segment files reads the same from the object layout, and goes on there', async () => {
  // The same directory, first as a local directory (segment files), then as an object store would hold it.
  const onDisk = await fsBackend.open();
  try {
    const before = new ChunkedSnapshotStore({ backend: onDisk.backend, keyring });
    await before.claim('s1', 'run-a');
    await before.appendTimeline('s1', [entry(1), entry(2), entry(1500)]);
    expect(await onDisk.everything()).toContain('s1/timeline/0000000000000001.log');
    const after = new ChunkedSnapshotStore({
      backend: asOpaque(onDisk.backend),
      keyring,
    });
    expect(await after.readTimeline('s1')).toEqual({ entries: [entry(1), entry(2), entry(1500)], next: null });
    await after.appendTimeline('s1', [entry(2), entry(3)]);
    await expect(after.appendTimeline('s1', [entry(1, 'other')])).rejects.toBeInstanceOf(TimelineConflictError);
    expect(await after.readTimeline('s1', { limit: 3 })).toEqual({
      entries: [1, 2, 3].map((i) => entry(i)),
      next: 1500,
    });
    expect(await onDisk.everything()).toContain('s1/timeline-entries/0000000000000001/0000000000000003');
  } finally {
    await onDisk.dispose();
  }
});
