import { createHash, randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { ChunkedSnapshotStore } from '../../../src/snapshots/engine/chunked-store';
import { Keyring, wrapDataKey } from '../../../src/snapshots/engine/keyring';
import { seeded } from '../../helpers/bytes';
import { cp, readAll } from '../../helpers/checkpoints';

/**
 * The key-file part of the tamper catalogue (the object part is in chunked-store.test.ts): a lineage's wrapped data
 * key deleted, malformed, altered or replaced, seen by a store that holds the key in memory (it wrote and read
 * before the damage) and by a store started afterwards. Restore, write and verifyLineage must all give a typed error,
 * publish nothing and never hand out bytes.
 */
let dir: string;
beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ds-key-damage-'));
});
afterEach(() => {
  fs.rmSync(dir, { recursive: true, force: true });
});

const master = { id: 'k1', key: randomBytes(32) };
const store = (keyring = new Keyring([master])) => new ChunkedSnapshotStore({ rootDir: dir, keyring });
const keyFile = (lineage = 's1') => path.join(dir, lineage, 'keys', 'data-key.json');
const manifests = (session = 's1') =>
  fs
    .readdirSync(path.join(dir, session))
    .filter((n) => n.endsWith('.manifest'))
    .sort();
const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');
const restore = async (s: ChunkedSnapshotStore, checkpointId = 'cp-1') =>
  readAll((await s.open('s1', checkpointId)).stream);

const STATE = seeded(1, 600_000);

/** A store that wrote cp-1 and read it back: the lineage's data key is in its memory. */
async function liveStore(): Promise<ChunkedSnapshotStore> {
  const s = store();
  await s.write(cp(1), Readable.from([STATE]));
  expect(sha(await restore(s))).toBe(sha(STATE));
  return s;
}

/** What every store must say about the damaged key: in restore, in write and in verifyLineage. */
async function expectRefused(s: ChunkedSnapshotStore, code: string, status: string): Promise<void> {
  await expect(restore(s)).rejects.toMatchObject({ code });
  await expect(s.write(cp(2, 'cp-1'), Readable.from([seeded(2, 300_000)]))).rejects.toMatchObject({ code });
  expect(manifests()).toEqual(['cp-1.manifest']);
  expect(fs.readdirSync(path.join(dir, 's1', 'pins'))).toEqual([]);
  await expect(s.verifyLineage('s1')).resolves.toEqual([
    expect.objectContaining({ checkpointId: 'cp-1', status, detail: expect.stringContaining('data key') }),
  ]);
}

/** Both: the store that held the key when it was damaged, and one started afterwards. */
async function expectRefusedLiveAndAfterRestart(damage: () => void, code: string, status: string) {
  const live = await liveStore();
  damage();
  await expectRefused(live, code, status);
  await expectRefused(store(), code, status);
}

test('a deleted key file: KeyUnavailable, and no new key is made for the lineage', async () => {
  await expectRefusedLiveAndAfterRestart(() => fs.rmSync(keyFile()), 'KeyUnavailable', 'key-unavailable');
  // A writer must not invent a new key for a lineage whose packs were sealed under the destroyed one.
  expect(fs.existsSync(keyFile())).toBe(false);
});

test.each([
  ['cut short', (raw: string) => raw.slice(0, raw.length >> 1)],
  ['not JSON', () => 'this is not a key'],
  ['without its fields', () => JSON.stringify({ v: 1 })],
  ['with a field of the wrong kind', (raw: string) => JSON.stringify({ ...JSON.parse(raw), nonce: 42 })],
])('a malformed key file (%s): KeyUnavailable, never a raw parse error', async (_what, malform) => {
  await expectRefusedLiveAndAfterRestart(
    () => fs.writeFileSync(keyFile(), malform(fs.readFileSync(keyFile(), 'utf8'))),
    'KeyUnavailable',
    'key-unavailable',
  );
  await expect(store().rekey()).rejects.toMatchObject({
    code: 'KeyUnavailable',
    message: expect.stringMatching(/data key file of lineage s1 is malformed/),
  });
});

test('a key file with one altered byte that still parses: SnapshotTampered', async () => {
  await expectRefusedLiveAndAfterRestart(
    () => {
      const wrapped = JSON.parse(fs.readFileSync(keyFile(), 'utf8')) as Record<string, string>;
      const c = wrapped.ciphertext!;
      // The first base64 digit: changing it changes one byte and keeps the encoding canonical.
      fs.writeFileSync(keyFile(), JSON.stringify({ ...wrapped, ciphertext: (c[0] === 'A' ? 'B' : 'A') + c.slice(1) }));
    },
    'SnapshotTampered',
    'tampered',
  );
});

test("a key file replaced by another lineage's key: SnapshotTampered", async () => {
  await store().write(cp(1, null, 's2'), Readable.from([seeded(3, 100_000)]));
  await expectRefusedLiveAndAfterRestart(
    () => fs.copyFileSync(keyFile('s2'), keyFile('s1')),
    'SnapshotTampered',
    'tampered',
  );
});

test('a key file re-wrapped by rekey is accepted; one holding another data key for the lineage is not', async () => {
  await store().write(cp(1), Readable.from([STATE]));
  const k2 = { id: 'k2', key: randomBytes(32) };
  // A worker that holds both master keys (still wrapping under k1) has the data key in memory.
  const holder = store(new Keyring([master, k2], 'k1'));
  expect(sha(await restore(holder))).toBe(sha(STATE));
  // Another process makes k2 the primary and re-wraps: the file's bytes change, the data key does not.
  const rotated = new Keyring([master, k2], 'k2');
  expect(await store(rotated).rekey()).toEqual({ rewrapped: 1, unchanged: 0 });
  await holder.write(cp(2, 'cp-1'), Readable.from([STATE]));
  expect(sha(await restore(holder, 'cp-2'))).toBe(sha(STATE));

  // A genuine wrapped key, but of another data key, put in the lineage's place while the holder uses the old one.
  const other = wrapDataKey(
    rotated,
    { dataKeyId: 'dk-other', key: randomBytes(32) },
    { tenant: 'default', lineage: 's1' },
  );
  fs.writeFileSync(keyFile(), JSON.stringify(other));
  await expect(holder.write(cp(3, 'cp-2'), Readable.from([STATE]))).rejects.toMatchObject({
    code: 'SnapshotTampered',
    message: expect.stringMatching(/holds data key 'dk-other', not the 'dk-[0-9a-f]+' in use/),
  });
  expect(manifests()).toEqual(['cp-1.manifest', 'cp-2.manifest']);
  // The checkpoints sealed under the old key name it: under the new one they are refused, never misread.
  await expect(restore(holder)).rejects.toMatchObject({ code: 'SnapshotTampered' });
  await expect(restore(store(rotated))).rejects.toMatchObject({ code: 'SnapshotTampered' });
});

describe('a key damaged while a write is sealing its chunks: nothing is published', () => {
  /** State that damages the key file once half of it has been read, as a second process could at any time. */
  function damagingMidway(damage: () => void): Readable {
    return Readable.from(
      (async function* () {
        yield seeded(10, 1_000_000);
        damage();
        yield seeded(11, 1_000_000);
      })(),
    );
  }

  test.each([
    ['deleted (shredded by another process)', () => fs.rmSync(keyFile()), 'KeyUnavailable'],
    ["replaced by another lineage's key", () => fs.copyFileSync(keyFile('s2'), keyFile('s1')), 'SnapshotTampered'],
  ])('%s', async (_what, damage, code) => {
    const s = await liveStore();
    await s.write(cp(1, null, 's2'), Readable.from([seeded(3, 100_000)]));
    await expect(s.write(cp(2, 'cp-1'), damagingMidway(damage))).rejects.toMatchObject({
      code,
      checkpointId: 'cp-2',
      message: expect.stringContaining('checkpoint cp-2 of session s1 is not published'),
    });
    expect(manifests()).toEqual(['cp-1.manifest']);
    // The packs it wrote are unreferenced: gc takes them after its grace period.
    const names = fs.readdirSync(path.join(dir, 's1', 'packs'));
    expect(names.filter((n) => n.endsWith('.tmp'))).toEqual([]);
    expect(names.filter((n) => n.endsWith('.pack')).length).toBeGreaterThan(1);
  });
});
