import { randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { ChunkPool } from '../../../src/snapshots/engine/chunk-pool';
import { chunkId, openBatch, type ChunkKey, type SealBatchResult } from '../../../src/snapshots/engine/chunk-work';
import { CODECS, compressChunk } from '../../../src/snapshots/engine/codec';
import { ChunkedSnapshotStore } from '../../../src/snapshots/engine/chunked-store';
import { sealPlaintextObject } from '../../../src/snapshots/engine/crypto';
import { SnapshotTamperedError } from '../../../src/snapshots/errors';
import { Keyring } from '../../../src/snapshots/engine/keyring';
import { seeded } from '../../helpers/bytes';
import { cp, packBytes, readAll } from '../../helpers/checkpoints';

// The pool runs the per-chunk work on real worker threads; these tests compare it with the same work done inline.

const KiB = 1024;
const key: ChunkKey = { dataKeyId: 'dk-test', key: randomBytes(32), chunkIdKey: randomBytes(32) };
const context = { tenant: 't', lineage: 'l', formatVersion: 2, key };

function batchOf(...chunks: Buffer[]): { data: Buffer; sizes: number[] } {
  const data = Buffer.allocUnsafeSlow(chunks.reduce((n, c) => n + c.length, 0));
  let at = 0;
  for (const c of chunks) at += c.copy(data, at);
  return { data, sizes: chunks.map((c) => c.length) };
}

/** The new chunks' objects, checked to lie back to back in the batch's output. */
function located(result: SealBatchResult): Buffer {
  let at = 0;
  for (const e of result.entries) {
    if ('known' in e) continue;
    expect(e.at).toBe(at);
    at += e.length;
  }
  expect(result.sealed.length).toBe(at);
  return result.sealed;
}

function newChunks(result: SealBatchResult): number {
  return result.entries.filter((e) => !('known' in e)).length;
}

const pools: ChunkPool[] = [];
afterAll(async () => {
  await Promise.all(pools.map((p) => p.close()));
});
function pool(threads: number): ChunkPool {
  const p = new ChunkPool(threads);
  pools.push(p);
  return p;
}

test('threads id, skip and seal exactly what the calling thread does, and what they seal opens', async () => {
  const chunks = [seeded(1, 64 * KiB), Buffer.alloc(32 * KiB, 'text text text '), seeded(2, 20 * KiB)];
  const known = [chunkId(chunks[1]!, key)];
  const inline = pool(0);
  const threaded = pool(2);
  const a = await inline.seal(inline.context({ ...context, known }), batchOf(...chunks).data, batchOf(...chunks).sizes);
  const b = await threaded.seal(
    threaded.context({ ...context, known }),
    batchOf(...chunks).data,
    batchOf(...chunks).sizes,
  );
  expect(b.entries.map((e) => [e.id, e.size, 'known' in e])).toEqual(
    a.entries.map((e) => [e.id, e.size, 'known' in e]),
  );
  expect(b.entries.map((e) => e.id)).toEqual(chunks.map((c) => chunkId(c, key)));
  expect(b.entries[1]).toMatchObject({ known: true });
  expect(newChunks(b)).toBe(2);

  // The sealed objects (random nonces, so not byte-equal to the inline ones) open to the original chunks.
  const sealed = located(b);
  const entries = b.entries.flatMap((e) =>
    'known' in e ? [] : [{ id: e.id, size: e.size, at: e.at, length: e.length }],
  );
  const opened = openBatch({ ...context, dataKeyId: key.dataKeyId }, sealed, entries);
  expect(opened.ok && Buffer.concat(opened.chunks).equals(Buffer.concat([chunks[0]!, chunks[2]!]))).toBe(true);
});

test('opening on a thread returns what the calling thread would, and refuses what does not verify', async () => {
  const p = pool(1);
  const inline = pool(0);
  const text = Buffer.from('a line of a log, repeated\n'.repeat(3000));
  const raw = seeded(30, 20 * KiB);
  const batch = batchOf(text, raw);
  const sealed = await inline.seal(inline.context({ ...context, known: [] }), batch.data, batch.sizes);
  expect(compressChunk(text).codec).not.toBe(CODECS.none);
  const entries = sealed.entries.flatMap((e) =>
    'known' in e ? [] : [{ id: e.id, size: e.size, at: e.at, length: e.length }],
  );
  const readContext = { ...context, dataKeyId: key.dataKeyId };
  const local = openBatch(readContext, Buffer.from(sealed.sealed), entries);
  const threaded = await p.open(readContext, Buffer.from(sealed.sealed), entries);
  if (!threaded.result.ok || !local.ok) throw new Error('a valid batch was refused');
  expect(Buffer.concat(threaded.result.chunks).equals(Buffer.concat([text, raw]))).toBe(true);
  expect(threaded.result.chunks.map((c) => c.length)).toEqual(local.chunks.map((c) => c.length));
  // The sealed batch comes back whole, for the next read.
  expect(threaded.sealed.equals(sealed.sealed)).toBe(true);

  const tampered = Buffer.from(sealed.sealed);
  tampered[entries[0]!.at + entries[0]!.length - 20]! ^= 1;
  expect((await p.open(readContext, tampered, entries)).result).toMatchObject({
    ok: false,
    failure: { kind: 'sealed', reason: 'tampered', id: entries[0]!.id },
  });

  // Plaintext mode: the bytes must match their id too (nothing else binds them to it).
  const plain = { ...context, key: null, dataKeyId: null };
  const lie = sealPlaintextObject(raw, {
    kind: 'chunk',
    tenant: context.tenant,
    lineage: context.lineage,
    objectId: chunkId(text, null),
    formatVersion: context.formatVersion,
    codec: CODECS.none,
  });
  const refused = await p.open(plain, lie, [{ id: chunkId(text, null), size: raw.length, at: 0, length: lie.length }]);
  expect(refused.result).toMatchObject({ ok: false, failure: { kind: 'id-mismatch' } });
  const honest = sealPlaintextObject(raw, {
    kind: 'chunk',
    tenant: context.tenant,
    lineage: context.lineage,
    objectId: chunkId(raw, null),
    formatVersion: context.formatVersion,
    codec: CODECS.none,
  });
  const ok = await p.open(plain, honest, [{ id: chunkId(raw, null), size: raw.length, at: 0, length: honest.length }]);
  expect(ok.result.ok && ok.result.chunks[0]!.equals(raw)).toBe(true);
});

test('opening bytes that share their memory on a thread moves nothing else with them', async () => {
  const p = pool(1);
  const inline = pool(0);
  const chunk = seeded(31, 20 * KiB);
  const sealed = await inline.seal(inline.context({ ...context, known: [] }), batchOf(chunk).data, [chunk.length]);
  const entry = sealed.entries[0]!;
  const entries = 'known' in entry ? [] : [{ id: entry.id, size: entry.size, at: 0, length: entry.length }];
  // The sealed object at the start of a larger buffer whose other bytes belong to someone else.
  const shared = Buffer.alloc(sealed.sealed.length + 4096, 7);
  sealed.sealed.copy(shared);
  const opened = await p.open(
    { ...context, dataKeyId: key.dataKeyId },
    shared.subarray(0, sealed.sealed.length),
    entries,
  );
  expect(opened.result.ok && opened.result.chunks[0]!.equals(chunk)).toBe(true);
  expect(shared.length).toBe(sealed.sealed.length + 4096);
  expect(shared.subarray(sealed.sealed.length).equals(Buffer.alloc(4096, 7))).toBe(true);
});

test('a chunk repeated within one write is sealed once by a thread', async () => {
  const p = pool(1);
  const ctx = p.context({ ...context, known: [] });
  const chunk = seeded(3, 32 * KiB);
  const first = await p.seal(ctx, batchOf(chunk, chunk).data, [chunk.length, chunk.length]);
  const second = await p.seal(ctx, batchOf(chunk).data, [chunk.length]);
  expect(newChunks(first)).toBe(1);
  expect(first.entries[1]).toMatchObject({ known: true });
  expect(second.entries[0]).toMatchObject({ known: true });
  p.release(ctx);
});

test('a flipped byte is refused as tampered, with nothing returned', async () => {
  const p = pool(2);
  const chunk = seeded(4, 48 * KiB);
  const sealedBatch = await p.seal(p.context({ ...context, known: [] }), batchOf(chunk).data, [chunk.length]);
  const sealed = located(sealedBatch);
  sealed[sealed.length - 100]! ^= 1;
  const entry = sealedBatch.entries[0]!;
  const opened = openBatch({ ...context, dataKeyId: key.dataKeyId }, sealed, [
    { id: entry.id, size: entry.size, at: 0, length: sealed.length },
  ]);
  expect(opened).toMatchObject({ ok: false, failure: { kind: 'sealed', reason: 'tampered', id: entry.id } });
});

test('batches in flight when the pool closes fail, and a closed pool starts new threads for new work', async () => {
  const p = pool(1);
  const ctx = p.context({ ...context, known: [] });
  const big = batchOf(seeded(5, 256 * KiB), seeded(6, 256 * KiB), seeded(7, 256 * KiB));
  const inFlight = p.seal(ctx, big.data, big.sizes);
  await p.close();
  await expect(inFlight).rejects.toThrow(/chunk worker thread exited/);
  const again = await p.seal(p.context({ ...context, known: [] }), batchOf(seeded(8, 16 * KiB)).data, [16 * KiB]);
  expect(newChunks(again)).toBe(1);
});

test.each([0, 1])(
  'a batch seals into a spare buffer that is large enough and hands its input back (%i threads)',
  async (threads) => {
    const p = pool(threads);
    const ctx = p.context({ ...context, known: [] });
    const chunks = [seeded(9, 40 * KiB), seeded(10, 24 * KiB)];
    const batch = batchOf(...chunks);
    const input = Buffer.from(batch.data);
    // A spare with stale bytes in it, as a reused output has.
    const spare = Buffer.allocUnsafeSlow(1024 * KiB).fill(0xa5);
    const result = await p.seal(ctx, batch.data, batch.sizes, spare);
    expect(result.sealed.buffer.byteLength).toBe(1024 * KiB);
    expect(result.data.equals(input)).toBe(true);
    const entries = result.entries.flatMap((e) =>
      'known' in e ? [] : [{ id: e.id, size: e.size, at: e.at, length: e.length }],
    );
    const opened = openBatch({ ...context, dataKeyId: key.dataKeyId }, located(result), entries);
    expect(opened.ok && Buffer.concat(opened.chunks).equals(Buffer.concat(chunks))).toBe(true);

    // Too small a spare is not written into: the output is a buffer of its own.
    const small = Buffer.allocUnsafeSlow(16 * KiB).fill(0x5a);
    const other = batchOf(seeded(11, 40 * KiB));
    const second = await p.seal(ctx, other.data, other.sizes, small);
    expect(second.sealed.buffer.byteLength).toBeGreaterThan(40 * KiB);
    if (threads === 0) expect(small.equals(Buffer.alloc(16 * KiB, 0x5a))).toBe(true);
    p.release(ctx);
  },
);

test('a pool size outside 0..64 is refused', () => {
  expect(() => new ChunkPool(-1)).toThrow(RangeError);
  expect(() => new ChunkPool(1.5)).toThrow(RangeError);
  expect(() => new ChunkPool(65)).toThrow(RangeError);
});

describe('stores on pools of different sizes', () => {
  let dir: string;
  beforeEach(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ds-pool-'));
  });
  afterEach(() => {
    fs.rmSync(dir, { recursive: true, force: true });
  });

  test('write the same chunk ids and read each other, deduplicating the same way', async () => {
    const keyring = new Keyring([{ id: 'k1', key: randomBytes(32) }]);
    const inline = new ChunkedSnapshotStore({ rootDir: dir, keyring, pool: pool(0) });
    const threaded = new ChunkedSnapshotStore({ rootDir: dir, keyring, pool: pool(3) });
    // 6 MiB: several batches in flight on every thread at once.
    const state = Buffer.concat([seeded(9, 3 * 1024 * KiB), Buffer.from('log line\n'.repeat(350_000))]);
    const one = await threaded.write(cp(1), Readable.from([state]));
    const firstBytes = packBytes(path.join(dir, 's1', 'packs'));
    const changed = Buffer.from(state);
    changed[1_000_000] = changed[1_000_000]! ^ 0xff;
    const two = await inline.write(cp(2, 'cp-1'), Readable.from([changed]));
    // The second checkpoint (inline) reused every chunk but the changed one from the first (threaded): it wrote
    // one chunk (at most 256 KiB, incompressible here) and its seal, not a second copy of the state.
    expect(packBytes(path.join(dir, 's1', 'packs')) - firstBytes).toBeLessThan(300 * KiB);
    for (const s of [inline, threaded]) {
      expect((await readAll((await s.open('s1', 'cp-1')).stream)).equals(state)).toBe(true);
      expect((await readAll((await s.open('s1', 'cp-2')).stream)).equals(changed)).toBe(true);
    }
    expect(one.digest).not.toBe(two.digest);
    const list = await threaded.verifyLineage('s1');
    expect(list.map((r) => r.status)).toEqual(['ok', 'ok']);
  });

  test('a checkpoint seals batches itself while its thread is busy, and they restore like the thread ones', async () => {
    // The thread is made slow (each request reaches it 20 ms late), so that batches queue for it and the calling
    // thread takes some: every seal not posted to the thread was sealed here.
    class SlowThreadPool extends ChunkPool {
      seals = 0;
      sealedThere = 0;
      get sealedHere(): number {
        return this.seals - this.sealedThere;
      }
      override seal(...args: Parameters<ChunkPool['seal']>): ReturnType<ChunkPool['seal']> {
        this.seals++;
        return super.seal(...args);
      }
      protected override post(...args: Parameters<ChunkPool['post']>): void {
        if (args[1].type === 'seal') this.sealedThere++;
        setTimeout(() => super.post(...args), 20);
      }
    }
    const slow = new SlowThreadPool(1);
    pools.push(slow);
    const keyring = new Keyring([{ id: 'k1', key: randomBytes(32) }]);
    const s = new ChunkedSnapshotStore({ rootDir: dir, keyring, pool: slow });
    // A block repeated through the state: chunks that both sides meet first in this write.
    const block = seeded(13, 1536 * KiB);
    const state = Buffer.concat([...Array.from({ length: 5 }, () => block), seeded(14, 2 * 1024 * KiB)]);
    await s.write(cp(1), Readable.from([state]));
    expect(slow.sealedHere).toBeGreaterThan(0);
    expect(slow.sealedThere).toBeGreaterThan(0);
    expect((await readAll((await s.open('s1', 'cp-1')).stream)).equals(state)).toBe(true);
    expect((await s.verifyLineage('s1')).map((r) => r.status)).toEqual(['ok']);
  });

  test('with one thread, restores open batches on it and on the calling thread alike, encrypted and in plaintext', async () => {
    // 8 MiB of incompressible bytes: more batches in flight than the thread takes, so some open on each side; in
    // plaintext mode the chunks are views of the read buffers, which must then never be reused for a later read.
    const state = seeded(12, 8 * 1024 * KiB);
    for (const keyring of [new Keyring([{ id: 'k1', key: randomBytes(32) }]), null]) {
      const root = fs.mkdtempSync(path.join(dir, 'store-'));
      const s = new ChunkedSnapshotStore({ rootDir: root, keyring, pool: pool(1) });
      await s.write(cp(1), Readable.from([state]));
      expect((await readAll((await s.open('s1', 'cp-1')).stream)).equals(state)).toBe(true);
    }
  });

  test('compressible state round-trips through decompression threads, encrypted and in plaintext mode', async () => {
    const state = Buffer.from(
      Array.from({ length: 120_000 }, (_, i) => `step ${i} tool=shell exit=${i % 3} in /work/${i % 17}\n`).join(''),
    );
    for (const keyring of [new Keyring([{ id: 'k1', key: randomBytes(32) }]), null]) {
      const root = fs.mkdtempSync(path.join(dir, 'store-'));
      const s = new ChunkedSnapshotStore({ rootDir: root, keyring, pool: pool(2) });
      await s.write(cp(1), Readable.from([state]));
      expect((await readAll((await s.open('s1', 'cp-1')).stream)).equals(state)).toBe(true);
    }
  });

  test('a tampered chunk is SnapshotTampered naming the checkpoint', async () => {
    const keyring = new Keyring([{ id: 'k1', key: randomBytes(32) }]);
    const s = new ChunkedSnapshotStore({ rootDir: dir, keyring, pool: pool(2) });
    await s.write(cp(1), Readable.from([seeded(10, 2 * 1024 * KiB)]));
    const packs = path.join(dir, 's1', 'packs');
    const pack = path.join(packs, fs.readdirSync(packs)[0]!);
    const bytes = fs.readFileSync(pack);
    bytes[1024 * KiB] = bytes[1024 * KiB]! ^ 1;
    fs.writeFileSync(pack, bytes);
    const { stream } = await s.open('s1', 'cp-1');
    const err = await (async () => {
      for await (const _ of stream) void _;
    })().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SnapshotTamperedError);
    expect(err).toMatchObject({ code: 'SnapshotTampered', sessionId: 's1', checkpointId: 'cp-1' });
  });
});
