/**
 * Writes a small corpus of checkpoints in every released snapshot format into test/fixtures/snapshots/<format>/,
 * which test/snapshots/fixtures.test.ts restores in CI. Run it once when a format is released and commit the
 * output; never regenerate an old format's corpus (it stands for checkpoints already on disk).
 *
 *   npx tsx scripts/make-snapshot-fixtures.ts <format: v1 | v2 | v2-plaintext | v3 | v3-plaintext>
 *
 * The chunked store writes only its current format: the v2 corpora were made by the code that wrote format 2; run the
 * script for the current format only.
 *
 * The master key of the encrypted corpus is a fixed test key (below): it protects nothing.
 */
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { Readable } from 'node:stream';
import { ChunkedSnapshotStore, FsSnapshotStore, Keyring, type SnapshotStore } from '../src/snapshots';

export const FIXTURE_MASTER_KEY = { id: 'fixture-1', key: Buffer.alloc(32, 0x42) };

/** Deterministic state: text-like and pseudo-random parts, so both compressed and stored chunks occur. */
export function fixtureState(sequence: number): Buffer {
  const text = Array.from({ length: 2000 }, (_, i) => `line ${i} of checkpoint ${Math.min(sequence, 2)}: ok\n`).join(
    '',
  );
  let x = 0x9e3779b9 ^ sequence;
  const noise = Buffer.alloc(96 * 1024);
  for (let i = 0; i < noise.length; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    noise[i] = x & 0xff;
  }
  return Buffer.concat([Buffer.from(text), noise]);
}

async function main(): Promise<void> {
  const format = process.argv[2];
  const dir = path.resolve(__dirname, '..', 'test', 'fixtures', 'snapshots', format ?? '');
  let store: SnapshotStore;
  if (format === 'v1') store = new FsSnapshotStore(dir);
  else if (format === 'v3')
    store = new ChunkedSnapshotStore({ rootDir: dir, keyring: new Keyring([FIXTURE_MASTER_KEY]) });
  else if (format === 'v3-plaintext') store = new ChunkedSnapshotStore({ rootDir: dir, keyring: null });
  else
    throw new Error('usage: make-snapshot-fixtures.ts v1 | v3 | v3-plaintext (older chunked formats: their release)');
  if (fs.existsSync(dir)) throw new Error(`${dir} exists: a released corpus is never regenerated`);
  const expected: Record<string, string> = {};
  let parentId: string | null = null;
  for (let sequence = 1; sequence <= 3; sequence++) {
    const checkpointId = `00000${sequence}-fixture`;
    const state = fixtureState(sequence);
    await store.write(
      {
        checkpointId,
        sessionId: 'fixture',
        sequence,
        parentId,
        runtime: { kind: 'memory', version: '1' },
        trigger: 'manual',
      },
      Readable.from([state]),
    );
    expected[checkpointId] = createHash('sha256').update(state).digest('hex');
    parentId = checkpointId;
  }
  fs.writeFileSync(path.join(dir, 'expected.json'), JSON.stringify(expected, null, 2) + '\n');
  console.log(`wrote ${dir}`);
}

if (require.main === module) {
  main().catch((err: unknown) => {
    console.error(err);
    process.exit(1);
  });
}
