import { randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { ChunkPool } from '../../../src/snapshots/engine/chunk-pool';
import { ChunkedSnapshotStore } from '../../../src/snapshots/engine/chunked-store';
import { Keyring } from '../../../src/snapshots/engine/keyring';
import { FsSnapshotStore } from '../../../src/snapshots/fs-snapshot-store';
import type { StateSource, UnchangedRange } from '../../../src/snapshots/state-source';
import { seeded } from '../../helpers/bytes';
import { cp, packBytes, readAll } from '../../helpers/checkpoints';

let dir: string;
beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ds-incremental-'));
});
afterEach(() => {
  fs.rmSync(dir, { recursive: true, force: true });
});

const MiB = 1024 * 1024;
const keyring = new Keyring([{ id: 'k1', key: randomBytes(32) }]);

/**
 * `state` with `changes` (offset → new bytes, same length) told the way a runtime that tracks its writes tells it:
 * the changed bytes, and ranges over `base` between them. Counts what is read through the ranges and whether the
 * source was closed.
 */
function source(base: string | null, state: Buffer, changes: Array<[number, number]>) {
  const counters = { read: 0, closed: 0 };
  const pieces: Array<Uint8Array | UnchangedRange> = [];
  let at = 0;
  const unchanged = (from: number, to: number): UnchangedRange => ({
    baseOffset: from,
    length: to - from,
    async *read(start, end) {
      counters.read += end - start;
      for (let p = from + start; p < from + end; p += MiB) yield state.subarray(p, Math.min(from + end, p + MiB));
    },
  });
  for (const [offset, length] of changes) {
    if (offset > at) pieces.push(unchanged(at, offset));
    pieces.push(state.subarray(offset, offset + length));
    at = offset + length;
  }
  if (at < state.length) pieces.push(unchanged(at, state.length));
  const stateSource: StateSource = {
    base,
    pieces: (async function* () {
      yield* pieces;
    })(),
    close: () => void counters.closed++,
  };
  return { stateSource, counters };
}

describe('writing a state source: unchanged ranges reuse the base checkpoint', () => {
  const size = 16 * MiB;
  const changes: Array<[number, number]> = Array.from({ length: 16 }, (_, i) => [i * MiB + 300_000, 40_000]);

  async function setup(options: { keyring: Keyring | null } = { keyring }) {
    const s = new ChunkedSnapshotStore({ rootDir: dir, ...options });
    const first = seeded(1, size);
    await s.write(cp(1), Readable.from([first]));
    const second = Buffer.from(first);
    for (const [offset, length] of changes) seeded(offset, length).copy(second, offset);
    return { s, second };
  }

  it.each([
    ['encrypted', keyring],
    ['plaintext', null],
  ])('%s: restores the new bytes, cut as a full read would, reading only around the changes', async (_, ring) => {
    const { s, second } = await setup({ keyring: ring });
    const before = packBytes(dir);
    const { stateSource, counters } = source('cp-1', second, changes);
    const manifest = await s.write(cp(2, 'cp-1'), stateSource);
    const written = packBytes(dir) - before;
    expect((await readAll((await s.open('s1', 'cp-2')).stream)).equals(second)).toBe(true);
    expect(manifest.size).toBe(size);
    // The same bytes written in full give the same chunk list (the digest commits to it).
    const full = await s.write(cp(3, 'cp-1'), Readable.from([second]));
    expect(manifest.digest).toBe(full.digest);
    // Each change costs a few chunks (64 KiB on average) of reading and writing, not the 1 MiB around it.
    const fewChunks = changes.length * 4 * 64 * 1024;
    expect(counters.read).toBeLessThan(fewChunks);
    expect(written).toBeLessThan(fewChunks);
    expect((await s.verifyLineage('s1')).map((r) => r.status)).toEqual(['ok', 'ok', 'ok']);
  });

  it('reads every byte when the base is not there, and still stores the right state', async () => {
    const { s, second } = await setup();
    const { stateSource, counters } = source('cp-9', second, changes);
    await s.write(cp(2, 'cp-1'), stateSource);
    expect((await readAll((await s.open('s1', 'cp-2')).stream)).equals(second)).toBe(true);
    expect(counters.read).toBe(size - changes.length * 40_000);
  });

  it('reads every byte when the base was written under another data key', async () => {
    const { second } = await setup();
    // The same session in a plaintext store: the encrypted base's chunks cannot serve a plaintext checkpoint.
    const plain = new ChunkedSnapshotStore({ rootDir: dir, keyring: null });
    const { stateSource, counters } = source('cp-1', second, changes);
    await plain.write(cp(2, 'cp-1'), stateSource);
    expect(counters.read).toBe(size - changes.length * 40_000);
  });

  it('refuses a range outside the base: a TypeError, nothing published, the source closed', async () => {
    const { s, second } = await setup();
    const { stateSource, counters } = source('cp-1', Buffer.concat([second, second]), []);
    await expect(s.write(cp(2, 'cp-1'), stateSource)).rejects.toThrow(/not inside the base state/);
    expect(counters.closed).toBe(1);
    expect((await s.list('s1')).map((m) => m.checkpointId)).toEqual(['cp-1']);
  });

  it('refuses a range that reads back another length than it claims, with or without a usable base', async () => {
    const { s, second } = await setup();
    for (const [base, checkpoint] of [
      ['cp-1', cp(2, 'cp-1')],
      ['gone', cp(3, 'cp-1')],
    ] as const) {
      const { stateSource, counters } = source(base, second, changes);
      // Every range hands back one byte short of what was asked.
      const shortened = (async function* () {
        for await (const piece of stateSource.pieces) {
          if (piece instanceof Uint8Array) yield piece;
          else {
            yield {
              ...piece,
              read: async function* (start: number, end: number) {
                for await (const part of piece.read(start, end - 1)) yield part;
              },
            };
          }
        }
      })();
      await expect(s.write(checkpoint, { ...stateSource, pieces: shortened })).rejects.toThrow(
        /an unchanged range read \d+ bytes where \d+ were asked for/,
      );
      expect(counters.closed).toBe(1);
    }
    expect((await s.list('s1')).map((m) => m.checkpointId)).toEqual(['cp-1']);
  });

  it('closes the source when the checkpoint is refused before any read', async () => {
    const { s, second } = await setup();
    const { stateSource, counters } = source('cp-1', second, changes);
    await expect(s.write(cp(1), stateSource)).rejects.toThrow(/exists already/);
    expect(counters.closed).toBe(1);
  });

  it('a format-1 store writes every byte of a source', async () => {
    const legacy = new FsSnapshotStore(dir);
    const state = seeded(3, MiB);
    const { stateSource } = source('cp-0', state, [[1000, 10]]);
    await legacy.write(cp(1), stateSource);
    expect((await readAll((await legacy.open('s1', 'cp-1')).stream)).equals(state)).toBe(true);
    // Refused before a byte is read (the id exists): the source is still released.
    const again = source('cp-0', state, [[1000, 10]]);
    await expect(legacy.write(cp(1), again.stateSource)).rejects.toThrow();
    expect(again.counters.closed).toBe(1);
  });

  it('keeps no more batches in flight than the pool asks for, however many places changed', async () => {
    /** A pool that counts the batches it is sealing at once. */
    class CountingPool extends ChunkPool {
      inFlight = 0;
      most = 0;
      override async seal(...args: Parameters<ChunkPool['seal']>) {
        this.most = Math.max(this.most, ++this.inFlight);
        try {
          return await super.seal(...args);
        } finally {
          this.inFlight--;
        }
      }
    }
    const pool = new CountingPool(1);
    try {
      const s = new ChunkedSnapshotStore({ rootDir: dir, keyring, pool });
      const first = seeded(1, size);
      await s.write(cp(1), Readable.from([first]));
      // A change every 80 KiB: reused and new chunks alternate all the way through.
      const many: Array<[number, number]> = [];
      for (let at = 40_000; at + 1_000 < size; at += 80 * 1024) many.push([at, 1_000]);
      const second = Buffer.from(first);
      for (const [offset, length] of many) seeded(offset, length).copy(second, offset);
      const progress: number[] = [];
      await s.write(cp(2, 'cp-1'), source('cp-1', second, many).stateSource, { onProgress: (n) => progress.push(n) });
      expect(pool.most).toBeLessThanOrEqual(pool.window);
      expect(progress.length).toBeGreaterThan(2);
      expect((await readAll((await s.open('s1', 'cp-2')).stream)).equals(second)).toBe(true);
    } finally {
      await pool.close();
    }
  });
});
