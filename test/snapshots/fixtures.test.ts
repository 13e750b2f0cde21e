import { createHash } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { ChunkedSnapshotStore } from '../../src/snapshots/engine/chunked-store';
import { READABLE_FORMAT_VERSIONS } from '../../src/snapshots/format';
import { Keyring } from '../../src/snapshots/engine/keyring';
import { FIXTURE_MASTER_KEY } from '../../scripts/make-snapshot-fixtures';

/**
 * Checkpoints written by every released format (scripts/make-snapshot-fixtures.ts) must restore with today's
 * reader, byte for byte. A change that breaks one fails here before it reaches stores full of old checkpoints.
 */
const root = path.join(__dirname, '..', 'fixtures', 'snapshots');
const corpora = fs.readdirSync(root).filter((d) => fs.statSync(path.join(root, d)).isDirectory());

test('there is a corpus for every format the reader supports', () => {
  for (const version of READABLE_FORMAT_VERSIONS) expect(corpora).toContain(`v${version}`);
});

describe.each(corpora)('corpus %s', (corpus) => {
  let dir: string;
  beforeAll(() => {
    // A copy: reading must work on a store that was written elsewhere, and tests never touch the originals.
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ds-fixture-'));
    fs.cpSync(path.join(root, corpus), dir, { recursive: true });
  });
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  const expected = JSON.parse(fs.readFileSync(path.join(root, corpus, 'expected.json'), 'utf8')) as Record<
    string,
    string
  >;
  const store = () =>
    new ChunkedSnapshotStore({
      rootDir: dir,
      keyring: corpus.endsWith('-plaintext') ? null : new Keyring([FIXTURE_MASTER_KEY]),
    });

  test.each(Object.entries(expected))('%s restores byte for byte', async (checkpointId, sha256) => {
    const { stream } = await store().open('fixture', checkpointId);
    const hash = createHash('sha256');
    for await (const piece of stream) hash.update(piece as Buffer);
    expect(hash.digest('hex')).toBe(sha256);
  });

  test('the whole lineage verifies', async () => {
    const report = await store().verifyLineage('fixture');
    expect(report.map((r) => r.status)).toEqual(Object.keys(expected).map(() => 'ok'));
  });
});

test('a newer format is refused as incompatible, naming both versions', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ds-fixture-'));
  try {
    fs.cpSync(path.join(root, 'v1'), dir, { recursive: true });
    const file = path.join(dir, 'fixture', '000001-fixture.manifest.json');
    const manifest = JSON.parse(fs.readFileSync(file, 'utf8')) as Record<string, unknown>;
    fs.writeFileSync(file, JSON.stringify({ ...manifest, formatVersion: 99 }));
    const store = new ChunkedSnapshotStore({ rootDir: dir, keyring: null });
    await expect(store.readManifest('fixture', '000001-fixture')).rejects.toMatchObject({
      code: 'SnapshotIncompatible',
      message: expect.stringMatching(/99.*1/),
    });
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
