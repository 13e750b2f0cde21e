import { createHash, randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { ChunkedSnapshotStore } from '../../../src/snapshots/engine/chunked-store';
import { openObject, sealPlaintextObject } from '../../../src/snapshots/engine/crypto';
import { KeyUnavailableError, SnapshotTamperedError, StoreUnavailableError } from '../../../src/snapshots/errors';
import { FsBlobBackend } from '../../../src/snapshots/blob/fs-backend';
import { Keyring } from '../../../src/snapshots/engine/keyring';
import {
  decodeTable,
  encodeManifestBody,
  encodeTable,
  splitManifestBody,
} from '../../../src/snapshots/engine/manifest-codec';
import { FsSnapshotStore } from '../../../src/snapshots/fs-snapshot-store';
import { seeded } from '../../helpers/bytes';
import { cp, packBytes, readAll } from '../../helpers/checkpoints';
import type { NewCheckpoint } from '../../../src/snapshots/snapshot-store';

let dir: string;
beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ds-chunked-'));
});
afterEach(() => {
  fs.rmSync(dir, { recursive: true, force: true });
});

const key1 = { id: 'k1', key: randomBytes(32) };
const key2 = { id: 'k2', key: randomBytes(32) };
const keyring = () => new Keyring([key1]);

function store(options: Partial<ConstructorParameters<typeof ChunkedSnapshotStore>[0]> = {}) {
  return new ChunkedSnapshotStore({ rootDir: dir, keyring: keyring(), ...options });
}

const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');

function packFiles(): string[] {
  return fs.readdirSync(path.join(dir, 's1', 'packs')).map((n) => path.join(dir, 's1', 'packs', n));
}

test('a checkpoint it could not read back (bad label, bad sequence) is refused before anything is written', async () => {
  const s = store();
  for (const bad of [
    { ...cp(1), label: 'line\nbreak' },
    { ...cp(1), sequence: 0 },
    { ...cp(1), trigger: 'later' },
  ]) {
    await expect(s.write(bad as NewCheckpoint, Readable.from([randomBytes(1000)]))).rejects.toThrow(
      /invalid checkpoint/,
    );
  }
  await s.write(cp(1), Readable.from([randomBytes(1000)]));
  await expect(s.branch('cp-1', { ...cp(2, 'cp-1'), label: 'x'.repeat(201) })).rejects.toThrow(/invalid checkpoint/);
  await expect(
    s.fork(
      { sessionId: 's1', checkpointId: 'cp-1' },
      { sessionId: 's2', checkpointId: 'f-1', trigger: 'manual', label: '\u0000' },
    ),
  ).rejects.toThrow(/invalid checkpoint/);
  expect(fs.readdirSync(path.join(dir, 's1')).filter((n) => n.endsWith('.manifest'))).toEqual(['cp-1.manifest']);
  expect(fs.existsSync(path.join(dir, 's2'))).toBe(false);
});

test('a checkpoint after changing 1% in scattered places writes at most 3% of the state', async () => {
  const s = store();
  // Seeded bytes, so the scenario (and the chunk boundaries) are the same on every run.
  const state = seeded(1, 32 * 1024 * 1024);
  await s.write(cp(1), Readable.from([state]));
  const before = packBytes(dir);
  const changed = Buffer.from(state);
  // 1% of the bytes in 4 places (one per 8 MiB): each place costs its own bytes plus one or two chunks around it.
  // Denser changes cost more (bench/engine.ts reports one place per 4 MiB).
  const places = 4;
  const span = Math.floor((changed.length * 0.01) / places);
  for (let i = 0; i < places; i++) {
    seeded(100 + i, span).copy(changed, Math.floor(((i + 0.5) / places) * changed.length));
  }
  await s.write(cp(2, 'cp-1'), Readable.from([changed]));
  const written = packBytes(dir) - before;
  expect(written / state.length).toBeLessThanOrEqual(0.03);
  expect(sha(await readAll((await s.open('s1', 'cp-2')).stream))).toBe(sha(changed));
  expect(sha(await readAll((await s.open('s1', 'cp-1')).stream))).toBe(sha(state));
});

test('a state larger than a pack is written to several packs, each synced and renamed into place', async () => {
  const s = store();
  // 100 MiB in 1 MiB pieces, so batch buffers and outputs are reused many times over: two packs, the first synced
  // while the second is written.
  const MiB = 1024 * 1024;
  const pieces = Array.from({ length: 100 }, (_, i) => seeded(1000 + i, MiB));
  const digest = createHash('sha256');
  for (const p of pieces) digest.update(p);
  await s.write(cp(1), Readable.from(pieces));
  const packs = packFiles();
  expect(packs.filter((p) => p.endsWith('.pack'))).toHaveLength(2);
  expect(packs.filter((p) => !p.endsWith('.pack'))).toEqual([]);
  expect(
    createHash('sha256')
      .update(await readAll((await s.open('s1', 'cp-1')).stream))
      .digest('hex'),
  ).toBe(digest.digest('hex'));

  // A write that fails after its first pack leaves no temporary file behind (and no manifest).
  const failing = Readable.from(
    (async function* () {
      for (let i = 0; i < 72; i++) yield seeded(5000 + i, MiB);
      throw new Error('the runtime went away');
    })(),
  );
  await expect(s.write(cp(2, 'cp-1'), failing)).rejects.toThrow(/the runtime went away/);
  expect(packFiles().filter((p) => !p.endsWith('.pack'))).toEqual([]);
  expect((await s.list('s1')).map((m) => m.checkpointId)).toEqual(['cp-1']);
});

test('a restore over many packs keeps open only the packs it still reads', async () => {
  const s = store();
  // A line of incremental checkpoints, each writing one changed region to a pack of its own: the last checkpoint's
  // chunks come from every one of them, in manifest order.
  const state = seeded(7, 4 * 1024 * 1024);
  await s.write(cp(1), Readable.from([state]));
  const checkpoints = 40;
  for (let i = 2; i <= checkpoints; i++) {
    seeded(700 + i, 4096).copy(state, Math.floor(((i - 1.5) / checkpoints) * state.length));
    await s.write(cp(i, `cp-${i - 1}`), Readable.from([state]));
  }
  const packsDir = path.join(dir, 's1', 'packs');
  const openPacks = () =>
    fs.readdirSync('/proc/self/fd').filter((fd) => {
      try {
        return fs.readlinkSync(path.join('/proc/self/fd', fd)).startsWith(packsDir);
      } catch {
        return false; // closed while listed
      }
    }).length;
  let most = 0;
  const digest = createHash('sha256');
  for await (const piece of (await s.open('s1', `cp-${checkpoints}`)).stream) {
    most = Math.max(most, openPacks());
    digest.update(piece as Buffer);
  }
  expect(digest.digest('hex')).toBe(sha(state));
  expect(packFiles().filter((p) => p.endsWith('.pack')).length).toBeGreaterThanOrEqual(checkpoints);
  expect(most).toBeLessThanOrEqual(8);
  expect(openPacks()).toBe(0);
});

test('a chunk table refuses ids that are not 64 hex digits, and round-trips the ones that are', () => {
  const id = (c: string) => c.repeat(64);
  const chunks: Array<[string, number, string, number, number]> = [
    [id('a'), 10, 'p1', 0, 40],
    [id('b'), 20, 'p2', 2 ** 40, 50],
  ];
  expect(decodeTable(encodeTable(chunks))).toEqual(chunks);
  expect(() => encodeTable([[`${id('a').slice(0, 62)}zz`, 10, 'p1', 0, 40]])).toThrow(/not 64 hex digits/);
  expect(() => encodeTable([[id('a').slice(0, 62), 10, 'p1', 0, 40]])).toThrow(/not 64 hex digits/);
});

test('the same state again writes no chunk', async () => {
  const s = store();
  const state = randomBytes(4 * 1024 * 1024);
  await s.write(cp(1), Readable.from([state]));
  const before = packBytes(dir);
  await s.write(cp(2, 'cp-1'), Readable.from([state]));
  expect(packBytes(dir)).toBe(before);
});

describe('tampering and wrong keys: typed errors and nothing restored', () => {
  async function written() {
    const s = store();
    await s.write(cp(1), Readable.from([randomBytes(1024 * 1024)]));
    return s;
  }

  test('a bit flipped in a pack', async () => {
    const s = await written();
    const [pack] = packFiles();
    const bytes = fs.readFileSync(pack!);
    bytes[Math.floor(bytes.length / 2)]! ^= 0x01;
    fs.writeFileSync(pack!, bytes);
    const { stream } = await s.open('s1', 'cp-1');
    await expect(readAll(stream)).rejects.toBeInstanceOf(SnapshotTamperedError);
    expect((await s.verifyLineage('s1'))[0]).toMatchObject({ checkpointId: 'cp-1', status: 'tampered' });
  });

  test('a truncated pack', async () => {
    const s = await written();
    const [pack] = packFiles();
    fs.truncateSync(pack!, fs.statSync(pack!).size - 100);
    const { stream } = await s.open('s1', 'cp-1');
    await expect(readAll(stream)).rejects.toMatchObject({ reason: 'truncated' });
  });

  test('a bit flipped in the manifest', async () => {
    const s = await written();
    const file = path.join(dir, 's1', 'cp-1.manifest');
    const bytes = fs.readFileSync(file);
    bytes[bytes.length - 20]! ^= 0x80;
    fs.writeFileSync(file, bytes);
    await expect(s.readManifest('s1', 'cp-1')).rejects.toBeInstanceOf(SnapshotTamperedError);
  });

  test('a manifest copied to another checkpoint id or another session', async () => {
    const s = await written();
    fs.copyFileSync(path.join(dir, 's1', 'cp-1.manifest'), path.join(dir, 's1', 'cp-9.manifest'));
    await expect(s.readManifest('s1', 'cp-9')).rejects.toBeInstanceOf(SnapshotTamperedError);
    fs.mkdirSync(path.join(dir, 's2'));
    fs.cpSync(path.join(dir, 's1', 'keys'), path.join(dir, 's2', 'keys'), { recursive: true });
    fs.copyFileSync(path.join(dir, 's1', 'cp-1.manifest'), path.join(dir, 's2', 'cp-1.manifest'));
    await expect(store().readManifest('s2', 'cp-1')).rejects.toThrow();
  });

  test('a missing master key and a destroyed data key (crypto-shredding)', async () => {
    await written();
    const other = new ChunkedSnapshotStore({ rootDir: dir, keyring: new Keyring([key2]) });
    await expect(other.readManifest('s1', 'cp-1')).rejects.toBeInstanceOf(KeyUnavailableError);
    const s = store();
    await s.shred('s1');
    await expect(s.open('s1', 'cp-1')).rejects.toBeInstanceOf(KeyUnavailableError);
  });

  test('a missing pack is SnapshotNotFound', async () => {
    const s = await written();
    for (const p of packFiles()) fs.rmSync(p);
    await expect(s.open('s1', 'cp-1')).rejects.toMatchObject({ code: 'SnapshotNotFound' });
    expect((await s.verifyLineage('s1'))[0]).toMatchObject({ status: 'missing' });
  });
});

test('the timeline is a hash chain: a replaced parent manifest is reported', async () => {
  const s = store();
  await s.write(cp(1), Readable.from([randomBytes(100_000)]));
  await s.write(cp(2, 'cp-1'), Readable.from([randomBytes(100_000)]));
  expect((await s.verifyLineage('s1')).map((r) => r.status)).toEqual(['ok', 'ok']);
  // Rewrite cp-1 with other content under the same id: valid on its own, but not the parent cp-2 was written after.
  await s.delete('s1', 'cp-1');
  await s.write(cp(1), Readable.from([randomBytes(100_000)]));
  const report = await s.verifyLineage('s1');
  expect(report.map((r) => [r.checkpointId, r.status])).toEqual([
    ['cp-1', 'ok'],
    ['cp-2', 'tampered'],
  ]);
});

describe('the parent a store published last is not opened again, unless its file changed', () => {
  /** An FsBlobBackend that counts reads by the key's last segment. */
  function countingBackend() {
    const backend = new FsBlobBackend(dir);
    const reads = new Map<string, number>();
    const read = backend.read.bind(backend);
    backend.read = (key, options) => {
      const name = key.slice(key.lastIndexOf('/') + 1);
      reads.set(name, (reads.get(name) ?? 0) + 1);
      return read(key, options);
    };
    return { backend, reads };
  }

  test('the next checkpoint reads its parent once, the data key twice, and deduplicates against it', async () => {
    const { backend, reads } = countingBackend();
    const s = store({ backend, rootDir: undefined });
    const state = randomBytes(1024 * 1024);
    await s.write(cp(1), Readable.from([state]));
    const before = packBytes(dir);
    reads.clear();
    await s.write(cp(2, 'cp-1'), Readable.from([state]));
    expect(packBytes(dir)).toBe(before);
    // The parent's bytes compared with those published; the key read to seal, then to confirm it is still there.
    expect(reads.get('cp-1.manifest')).toBe(1);
    expect(reads.get('data-key.json')).toBe(2);
    expect(sha(await readAll((await s.open('s1', 'cp-2')).stream))).toBe(sha(state));
  });

  test('a parent replaced by another writer is loaded: the hash chain names the parent as it is', async () => {
    const here = store();
    const elsewhere = store();
    await here.write(cp(1), Readable.from([randomBytes(100_000)]));
    await elsewhere.delete('s1', 'cp-1');
    await elsewhere.write(cp(1), Readable.from([randomBytes(100_000)]));
    await here.write(cp(2, 'cp-1'), Readable.from([randomBytes(100_000)]));
    expect((await here.verifyLineage('s1')).map((r) => [r.checkpointId, r.status])).toEqual([
      ['cp-1', 'ok'],
      ['cp-2', 'ok'],
    ]);
  });

  test('a parent deleted and collected by another writer costs deduplication, not the checkpoint', async () => {
    const here = store();
    const elsewhere = store({ gcGraceMs: 0 });
    const state = randomBytes(1024 * 1024);
    await here.write(cp(1), Readable.from([state]));
    await elsewhere.delete('s1', 'cp-1');
    await elsewhere.gc({ now: Date.now() + 1000 });
    expect(packBytes(dir)).toBe(0);
    await here.write(cp(2, 'cp-1'), Readable.from([state]));
    expect(sha(await readAll((await here.open('s1', 'cp-2')).stream))).toBe(sha(state));
  });
});

describe('branch: a rewind point over an older checkpoint', () => {
  test('writes no chunk, restores the source state, and joins the hash chain', async () => {
    const s = store();
    const first = seeded(11, 2_000_000);
    await s.write(cp(1), Readable.from([first]));
    await s.write(cp(2, 'cp-1'), Readable.from([seeded(12, 2_000_000)]));
    const before = packBytes(dir);
    const branched = await s.branch('cp-1', { ...cp(3, 'cp-2'), label: 'back to one' });
    expect(packBytes(dir)).toBe(before);
    expect(branched).toMatchObject({ checkpointId: 'cp-3', sequence: 3, parentId: 'cp-2', size: first.length });
    expect(branched.label).toBe('back to one');
    expect(branched.digest).toBe((await s.readManifest('s1', 'cp-1')).digest);
    expect(sha(await readAll((await s.open('s1', 'cp-3')).stream))).toBe(sha(first));
    expect((await s.verifyLineage('s1')).map((r) => r.status)).toEqual(['ok', 'ok', 'ok']);
    // The next checkpoint after a rewind deduplicates against it like against any parent.
    await s.write(cp(4, 'cp-3'), Readable.from([first]));
    expect(packBytes(dir)).toBe(before);
  });

  test('the branch keeps its chunks when the source is deleted and collected', async () => {
    const s = store({ gcGraceMs: 0 });
    const state = seeded(13, 1_000_000);
    await s.write(cp(1), Readable.from([state]));
    await s.branch('cp-1', cp(2, 'cp-1'));
    await s.delete('s1', 'cp-1');
    expect((await s.gc()).packsRemoved).toEqual([]);
    expect(sha(await readAll((await s.open('s1', 'cp-2')).stream))).toBe(sha(state));
  });

  test('refuses a missing source, an existing target, a format-1 source and a source missing a pack', async () => {
    const s = store();
    await expect(s.branch('cp-9', cp(2))).rejects.toMatchObject({ code: 'SnapshotNotFound' });
    await s.write(cp(1), Readable.from([seeded(14, 500_000)]));
    await expect(s.branch('cp-1', cp(1))).rejects.toThrow(/exists already/);
    await new FsSnapshotStore(dir).write(cp(5), Readable.from([Buffer.from('format one')]));
    await expect(s.branch('cp-5', cp(6))).rejects.toMatchObject({ code: 'SnapshotIncompatible' });
    for (const p of packFiles()) fs.rmSync(p);
    await expect(s.branch('cp-1', cp(7))).rejects.toMatchObject({ code: 'SnapshotNotFound' });
    expect(fs.existsSync(path.join(dir, 's1', 'cp-7.manifest'))).toBe(false);
    expect(fs.readdirSync(path.join(dir, 's1', 'pins'))).toEqual([]);
  });
});

describe('fork: a new session over a checkpoint of another, in the same lineage', () => {
  const forkOf = (s: ChunkedSnapshotStore, label?: string) =>
    s.fork(
      { sessionId: 's1', checkpointId: 'cp-1' },
      { sessionId: 's2', checkpointId: 'f-1', trigger: 'manual', ...(label ? { label } : {}) },
    );

  test('writes no chunk, restores the source state, and the fork deduplicates against the lineage', async () => {
    const s = store();
    const state = seeded(21, 3_000_000);
    await s.write(cp(1), Readable.from([state]));
    const before = packBytes(dir);
    const fork = await forkOf(s, 'experiment');
    expect(packBytes(dir)).toBe(before);
    expect(fork).toMatchObject({
      sessionId: 's2',
      checkpointId: 'f-1',
      sequence: 1,
      parentId: null,
      size: state.length,
    });
    expect(fork.label).toBe('experiment');
    expect(sha(await readAll((await s.open('s2', 'f-1')).stream))).toBe(sha(state));
    expect(fs.readdirSync(path.join(dir, 's2')).sort()).toEqual(['f-1.manifest', 'lineage.json']);

    // The fork goes on: a small change writes a chunk or two into the lineage's packs, not a copy of the state.
    const changed = Buffer.from(state);
    changed[1_500_000] = changed[1_500_000]! ^ 0xff;
    await s.write({ ...cp(2, 'f-1', 's2') }, Readable.from([changed]));
    expect(packBytes(dir) - before).toBeLessThan(state.length * 0.2);
    expect(sha(await readAll((await s.open('s2', 'cp-2')).stream))).toBe(sha(changed));
    expect((await s.verifyLineage('s2')).map((r) => r.status)).toEqual(['ok', 'ok']);
    expect((await s.list('s2')).map((m) => m.checkpointId)).toEqual(['f-1', 'cp-2']);
  });

  test('gc keeps every chunk the fork references after the source is deleted', async () => {
    const s = store({ gcGraceMs: 0 });
    const state = seeded(22, 1_000_000);
    await s.write(cp(1), Readable.from([state]));
    await forkOf(s);
    await s.delete('s1', 'cp-1');
    expect((await s.gc()).packsRemoved).toEqual([]);
    expect(sha(await readAll((await s.open('s2', 'f-1')).stream))).toBe(sha(state));
    await s.delete('s2', 'f-1');
    expect((await s.gc()).packsRemoved).toHaveLength(1);
  });

  test('the fork names its source in the hash chain: a replaced source is reported', async () => {
    const s = store();
    await s.write(cp(1), Readable.from([seeded(23, 200_000)]));
    await forkOf(s);
    await s.delete('s1', 'cp-1');
    await s.write(cp(1), Readable.from([seeded(24, 200_000)]));
    expect((await s.verifyLineage('s2'))[0]).toMatchObject({ checkpointId: 'f-1', status: 'tampered' });
  });

  test('a forged lineage.json makes the fork unreadable, never another lineage readable', async () => {
    const s = store();
    await s.write(cp(1), Readable.from([seeded(25, 200_000)]));
    await s.write(cp(1, null, 's3'), Readable.from([seeded(26, 200_000)]));
    await forkOf(s);
    fs.writeFileSync(path.join(dir, 's2', 'lineage.json'), JSON.stringify({ lineage: 's3' }));
    await expect(store().open('s2', 'f-1')).rejects.toBeInstanceOf(SnapshotTamperedError);
    fs.writeFileSync(path.join(dir, 's2', 'lineage.json'), 'not json');
    await expect(store().open('s2', 'f-1')).rejects.toMatchObject({ code: 'SnapshotCorrupt' });
    // gc cannot tell which lineage the fork's packs belong to: it removes nothing.
    const report = await store({ gcGraceMs: 0 }).gc();
    expect(report.packsRemoved).toEqual([]);
    expect(report.skipped.map((x) => x.reason)).toContain('the lineage of s2 is unreadable');
  });

  test('shredding a fork destroys the lineage: the origin becomes unreadable too', async () => {
    const s = store();
    await s.write(cp(1), Readable.from([seeded(27, 200_000)]));
    await forkOf(s);
    expect(await s.shred('s2')).toBe('s1');
    await expect(store().open('s1', 'cp-1')).rejects.toBeInstanceOf(KeyUnavailableError);
    await expect(store().open('s2', 'f-1')).rejects.toBeInstanceOf(KeyUnavailableError);
  });

  test('refuses an existing target session, the source session itself and a format-1 source', async () => {
    const s = store();
    await s.write(cp(1), Readable.from([seeded(28, 200_000)]));
    await s.write(cp(1, null, 's2'), Readable.from([seeded(29, 200_000)]));
    await expect(forkOf(s)).rejects.toThrow(/exists already/);
    await expect(
      s.fork({ sessionId: 's1', checkpointId: 'cp-1' }, { sessionId: 's1', checkpointId: 'x-1', trigger: 'manual' }),
    ).rejects.toThrow(/new session/);
    await new FsSnapshotStore(dir).write(cp(5, null, 's4'), Readable.from([Buffer.from('format one')]));
    await expect(
      s.fork({ sessionId: 's4', checkpointId: 'cp-5' }, { sessionId: 's5', checkpointId: 'f-1', trigger: 'manual' }),
    ).rejects.toMatchObject({ code: 'SnapshotIncompatible' });
    expect(fs.existsSync(path.join(dir, 's5'))).toBe(false);
  });
});

test('key rotation: new data keys use the newest master key; rekey re-wraps without rewriting chunks', async () => {
  await store().write(cp(1), Readable.from([randomBytes(200_000)]));
  const packsBefore = packFiles().map((p) => [p, fs.statSync(p).mtimeMs]);
  const rotated = new ChunkedSnapshotStore({ rootDir: dir, keyring: new Keyring([key1, key2], 'k2') });
  expect(await rotated.rekey()).toEqual({ rewrapped: 1, unchanged: 0 });
  expect(packFiles().map((p) => [p, fs.statSync(p).mtimeMs])).toEqual(packsBefore);
  // k1 can go: everything is readable with k2 alone.
  const onlyK2 = new ChunkedSnapshotStore({ rootDir: dir, keyring: new Keyring([key2]) });
  expect(await onlyK2.verify('s1', 'cp-1')).toMatchObject({ checkpointId: 'cp-1' });
});

test('plaintext mode is explicit, reported, and still detects corruption', async () => {
  const s = new ChunkedSnapshotStore({ rootDir: dir, keyring: null });
  expect(s.describeEncryption()).toEqual({ mode: 'none', primaryKeyId: null });
  const state = randomBytes(300_000);
  await s.write(cp(1), Readable.from([state]));
  expect(sha(await readAll((await s.open('s1', 'cp-1')).stream))).toBe(sha(state));
  const [pack] = packFiles();
  const bytes = fs.readFileSync(pack!);
  bytes[100]! ^= 0x01;
  fs.writeFileSync(pack!, bytes);
  await expect(readAll((await s.open('s1', 'cp-1')).stream)).rejects.toThrow();
});

describe('a manifest whose chunk list is malformed or disagrees with its size is SnapshotCorrupt', () => {
  // cp-1 of a plaintext store, opened and sealed again in the shape of each case (plaintext mode: no key needed).
  async function setup() {
    const s = new ChunkedSnapshotStore({ rootDir: dir, keyring: null });
    await s.write(cp(1), Readable.from([randomBytes(100_000)]));
    const file = path.join(dir, 's1', 'cp-1.manifest');
    const binding = { kind: 'manifest' as const, tenant: 'default', lineage: 's1', objectId: 'cp-1', sessionId: 's1' };
    const opened = openObject(fs.readFileSync(file), () => Buffer.alloc(0), {
      ...binding,
      formatVersion: 3,
      encrypted: false,
    });
    const { header, table } = splitManifestBody(opened.plaintext);
    const chunks = decodeTable(table);
    const fields = { ...(header as Record<string, unknown>) };
    delete fields.packs;
    delete fields.chunkCount;
    const reseal = (formatVersion: number, body: Buffer) =>
      fs.writeFileSync(file, sealPlaintextObject(body, { ...binding, formatVersion, codec: 0 }));
    const corrupt = (message: string) =>
      expect(s.readManifest('s1', 'cp-1')).rejects.toMatchObject({
        code: 'SnapshotCorrupt',
        message: expect.stringContaining(message),
      });
    return { fields, chunks, reseal, corrupt, body: opened.plaintext };
  }

  test('format 3: a cut or padded table, a pack index out of range, an empty location, a version mismatch', async () => {
    const { fields, chunks, reseal, corrupt, body } = await setup();
    reseal(3, body.subarray(0, body.length - 1));
    await corrupt('the chunk table has');
    reseal(3, Buffer.concat([body, Buffer.alloc(52)]));
    await corrupt('the chunk table has');
    // The table by column (manifest-codec.ts): ids, sizes, pack indexes, offsets, lengths; the first chunk's fields.
    const n = chunks.length;
    const table = body.length - n * 52;
    const badPack = Buffer.from(body);
    badPack.writeUInt32LE(7, table + 36 * n);
    reseal(3, badPack);
    await corrupt('names no pack');
    const empty = Buffer.from(body);
    empty.writeUInt32LE(0, table + 48 * n);
    reseal(3, empty);
    await corrupt('names no pack, or an empty or impossible location');
    reseal(3, Buffer.from('{"formatVersion":3}'));
    await corrupt('must start with "DSM3"');
    reseal(3, encodeManifestBody({ ...fields, formatVersion: 2 }, encodeTable(chunks)));
    await corrupt("not its envelope's");
    reseal(3, encodeManifestBody({ ...fields, size: (fields.size as number) + 1 }, encodeTable(chunks)));
    await corrupt('its chunks add up to');
  });

  test('format 2: a malformed JSON chunk list, or one that disagrees with the size', async () => {
    const { fields, chunks, reseal, corrupt } = await setup();
    const v2 = (content: object) => reseal(2, Buffer.from(JSON.stringify({ ...fields, formatVersion: 2, ...content })));
    // Written as format 2 would have been, it reads back.
    v2({ chunks });
    await expect(s().readManifest('s1', 'cp-1')).resolves.toMatchObject({ formatVersion: 2 });
    v2({ chunks, size: (fields.size as number) + 1 });
    await corrupt('its chunks add up to');
    const good = chunks[0]! as unknown[];
    const bad: unknown[][] = [
      [...good.slice(0, 4)],
      ['not-hex', ...good.slice(1)],
      [good[0], -1, ...good.slice(2)],
      [good[0], good[1], '../escape', ...good.slice(3)],
      [...good.slice(0, 3), 1.5, good[4]],
      [...good.slice(0, 4), 0],
    ];
    for (const entry of bad) {
      v2({ chunks: [entry] });
      await corrupt('chunks must be');
    }
  });

  const s = () => new ChunkedSnapshotStore({ rootDir: dir, keyring: null });
});

test('format 1 checkpoints written by the filesystem store stay readable', async () => {
  const v1 = new FsSnapshotStore(dir);
  const state = randomBytes(50_000);
  await v1.write(cp(1), Readable.from([state]));
  const s = store();
  expect(await s.readManifest('s1', 'cp-1')).toMatchObject({ formatVersion: 1 });
  expect(sha(await readAll((await s.open('s1', 'cp-1')).stream))).toBe(sha(state));
  // A format-3 child of a format-1 parent links to it in the chain.
  await s.write(cp(2, 'cp-1'), Readable.from([state]));
  expect((await s.verifyLineage('s1')).map((r) => [r.formatVersion, r.status])).toEqual([
    [1, 'ok'],
    [3, 'ok'],
  ]);
});

describe('garbage collection', () => {
  test('deleting a checkpoint never removes a chunk another still references; dry run reports what would go', async () => {
    const s = store({ gcGraceMs: 0 });
    const a = randomBytes(2 * 1024 * 1024);
    await s.write(cp(1), Readable.from([a]));
    const b = Buffer.concat([a, randomBytes(1024 * 1024)]);
    await s.write(cp(2, 'cp-1'), Readable.from([b]));
    await s.delete('s1', 'cp-1');
    const dry = await s.gc({ dryRun: true, now: Date.now() + 1000 });
    expect(dry.packsRemoved).toEqual([]);
    expect(sha(await readAll((await s.open('s1', 'cp-2')).stream))).toBe(sha(b));
    await s.delete('s1', 'cp-2');
    const plan = await s.gc({ dryRun: true, now: Date.now() + 1000 });
    expect(plan.packsRemoved.length).toBe(2);
    expect(plan.bytesRemoved).toBeGreaterThan(3 * 1024 * 1024);
    expect(packFiles()).toHaveLength(2);
    const done = await s.gc({ now: Date.now() + 1000 });
    expect(done.bytesRemoved).toBe(plan.bytesRemoved);
    expect(packFiles()).toHaveLength(0);
  });

  test('a session whose manifests cannot be read is skipped whole; temp files of crashed writers go', async () => {
    const s = store({ gcGraceMs: 0 });
    await s.write(cp(1), Readable.from([randomBytes(100_000)]));
    await s.write(cp(1, null, 's2'), Readable.from([randomBytes(100_000)]));
    await s.delete('s2', 'cp-1');
    fs.writeFileSync(path.join(dir, 's2', 'packs', '.crashed-writer.tmp'), 'half a pack');
    await s.shred('s1');
    const report = await s.gc({ now: Date.now() + 1000 });
    expect(report.skipped).toEqual([{ lineage: 's1', reason: expect.stringContaining('cp-1 is unreadable') }]);
    expect(packFiles()).toHaveLength(1);
    expect(report.packsRemoved.map((p) => p.lineage)).toEqual(['s2', 's2']);
    expect(fs.readdirSync(path.join(dir, 's2', 'packs'))).toEqual([]);
  });

  test('collection while checkpoints are written loses no chunk', async () => {
    const s = store({ gcGraceMs: 0 });
    const base = randomBytes(1024 * 1024);
    await s.write(cp(1), Readable.from([base]));
    const writes: Promise<unknown>[] = [];
    const gcs: Promise<unknown>[] = [];
    for (let i = 2; i <= 12; i++) {
      // Each writer reuses most of cp-1's chunks while collections run and old checkpoints disappear.
      writes.push(s.write(cp(i, 'cp-1'), Readable.from([base, randomBytes(64 * 1024)])));
      gcs.push(s.gc());
    }
    await Promise.all(writes);
    await s.delete('s1', 'cp-1');
    await Promise.all([...gcs, s.gc()]);
    for (let i = 2; i <= 12; i++) {
      const restored = await readAll((await s.open('s1', `cp-${i}`)).stream);
      expect(sha(restored.subarray(0, base.length))).toBe(sha(base));
    }
  });
});

describe('the manifest format written', () => {
  test("DS_SNAPSHOT_FORMAT=2 writes format 2, which today's reader reads and format 3 shares chunks with", async () => {
    const v2 = store({ formatVersion: 2 });
    const state = randomBytes(3 * 1024 * 1024);
    expect(await v2.write(cp(1), Readable.from([state]))).toMatchObject({ formatVersion: 2 });
    const v3 = store();
    expect(sha(await readAll((await v3.open('s1', 'cp-1')).stream))).toBe(sha(state));
    const before = packBytes(dir);
    // The same state again, as format 3 over a format-2 parent: every chunk is the parent's.
    expect(await v3.write(cp(2, 'cp-1'), Readable.from([state]))).toMatchObject({ formatVersion: 3 });
    expect(packBytes(dir)).toBe(before);
    // A rewind written as format 2 over a format-3 checkpoint.
    expect(await v2.branch('cp-2', { ...cp(3, 'cp-2') })).toMatchObject({ formatVersion: 2 });
    expect((await v3.verifyLineage('s1')).map((r) => [r.formatVersion, r.status])).toEqual([
      [2, 'ok'],
      [3, 'ok'],
      [2, 'ok'],
    ]);
  });

  test('a manifest of a newer format is SnapshotIncompatible, naming both versions', async () => {
    const s = new ChunkedSnapshotStore({ rootDir: dir, keyring: null });
    await s.write(cp(1), Readable.from([randomBytes(10_000)]));
    const file = path.join(dir, 's1', 'cp-1.manifest');
    const bytes = fs.readFileSync(file);
    // The format version is the u16 after flags, kind and codec in the envelope's header (crypto.ts).
    bytes.writeUInt16BE(4, 6 + 3);
    fs.writeFileSync(file, bytes);
    await expect(s.readManifest('s1', 'cp-1')).rejects.toMatchObject({
      code: 'SnapshotIncompatible',
      message: expect.stringMatching(/version 4 .*supports 1, 2, 3/),
    });
  });
});

test('a list fails typed while the store does not answer; a damaged manifest is left out of it', async () => {
  let unavailable = false;
  class StallingBackend extends FsBlobBackend {
    override async read(key: string, options?: Parameters<FsBlobBackend['read']>[1]) {
      if (unavailable && key.endsWith('.manifest')) throw new StoreUnavailableError(`${key}: no answer`);
      return super.read(key, options);
    }
  }
  const s = new ChunkedSnapshotStore({ backend: new StallingBackend(dir), keyring: keyring() });
  await s.write(cp(1), Readable.from([randomBytes(1000)]));
  await s.write(cp(2, 'cp-1'), Readable.from([randomBytes(1000)]));
  expect((await s.list('s1')).map((m) => m.checkpointId)).toEqual(['cp-1', 'cp-2']);

  unavailable = true;
  await expect(s.list('s1')).rejects.toBeInstanceOf(StoreUnavailableError);
  unavailable = false;

  const manifest = path.join(dir, 's1', 'cp-2.manifest');
  const bytes = fs.readFileSync(manifest);
  bytes.writeUInt8(bytes.readUInt8(bytes.length - 5) ^ 0xff, bytes.length - 5);
  fs.writeFileSync(manifest, bytes);
  expect((await s.list('s1')).map((m) => m.checkpointId)).toEqual(['cp-1']);
});
