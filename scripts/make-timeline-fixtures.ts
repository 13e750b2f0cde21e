/**
 * Writes a small store whose one session has a timeline in a released timeline layout into
 * test/fixtures/timelines/<layout>/, which test/snapshots/timeline-fixtures.test.ts reads in CI. Run it once when a
 * layout is released and commit the output; never regenerate an old layout's corpus (it stands for stores on disk).
 *
 *   npx tsx scripts/make-timeline-fixtures.ts <layout1 | layout1-plaintext | layout2 | layout2-plaintext>
 *
 * The store writes only its current layout (2: one object per entry, timeline-objects.ts); the layout1 corpus (segment
 * files, timeline-log.ts) was made by the release that wrote it. Run the script for the current layout only.
 * Records are sealed under a data key wrapped by the fixed test key of the snapshot fixtures (it protects nothing), or
 * plaintext records with their SHA-256 in the `-plaintext` corpora.
 */
import fs from 'node:fs';
import path from 'node:path';
import { ChunkedSnapshotStore, Keyring, type TimelineRecord } from '../src/snapshots';
import { FIXTURE_MASTER_KEY } from './make-snapshot-fixtures';

export const FIXTURE_SESSION = 'fixture';

/** Entries with a gap (4) and a second segment (1001), appended in two batches, the second out of order. */
export function fixtureEntries(): TimelineRecord[][] {
  const entry = (index: number, kind: string): TimelineRecord => ({
    index,
    branch: 0,
    kind,
    at: `2026-01-01T00:00:${String(index % 60).padStart(2, '0')}.000Z`,
  });
  return [
    [entry(1, 'started'), entry(2, 'checkpoint'), entry(3, 'paused')],
    [entry(1001, 'checkpoint'), entry(5, 'resumed')],
  ];
}

async function main(): Promise<void> {
  const layout = process.argv[2];
  if (!['layout1', 'layout1-plaintext', 'layout2', 'layout2-plaintext'].includes(layout ?? '')) {
    throw new Error(
      'usage: make-timeline-fixtures.ts layout2 | layout2-plaintext (layout1: the release that wrote it)',
    );
  }
  const dir = path.resolve(__dirname, '..', 'test', 'fixtures', 'timelines', layout!);
  if (fs.existsSync(dir)) throw new Error(`${dir} exists: a released corpus is never regenerated`);
  const root = path.join(dir, 'fixture');
  const store = new ChunkedSnapshotStore({
    rootDir: root,
    keyring: layout!.endsWith('-plaintext') ? null : new Keyring([FIXTURE_MASTER_KEY]),
  });
  await store.claim(FIXTURE_SESSION, 'fixture-run');
  for (const batch of fixtureEntries()) await store.appendTimeline(FIXTURE_SESSION, batch);
  const expected = fixtureEntries()
    .flat()
    .sort((a, b) => a.index - b.index);
  fs.writeFileSync(path.join(dir, 'expected.json'), JSON.stringify(expected, null, 2) + '\n');
  console.log(`wrote ${dir}`);
}

if (require.main === module) {
  main().catch((err: unknown) => {
    console.error(err);
    process.exit(1);
  });
}
