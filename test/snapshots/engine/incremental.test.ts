import { Chunker, type ChunkerOptions } from '../../../src/snapshots/engine/chunker';
import { planChunks, type PlannedChunk } from '../../../src/snapshots/engine/incremental';
import type { UnchangedRange } from '../../../src/snapshots/state-source';
import { seeded } from '../../helpers/bytes';

const SMALL: ChunkerOptions = { minSize: 64, avgSize: 256, maxSize: 1024 };

/** A deterministic pseudo-random sequence, so a failing case can be replayed from its seed. */
function rng(seed: number): (n: number) => number {
  let x = seed >>> 0 || 1;
  return (n) => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return (x >>> 0) % n;
  };
}

/** A range over `base`, counting the bytes the planner reads through it. */
function range(base: Buffer, baseOffset: number, length: number, reads: { bytes: number }): UnchangedRange {
  return {
    baseOffset,
    length,
    async *read(start, end) {
      if (start < 0 || end > length || start > end) throw new Error(`bad read ${start}..${end} of ${length}`);
      reads.bytes += end - start;
      // In uneven pieces, as a file read might give them.
      for (let at = start; at < end; at += 100)
        yield base.subarray(baseOffset + at, baseOffset + Math.min(end, at + 100));
    },
  };
}

type Piece = Uint8Array | UnchangedRange;

async function* from(pieces: Piece[]): AsyncGenerator<Piece> {
  for (const p of pieces) yield p;
}

/** The planner's chunks as bytes, and how many of them it reused. */
async function plan(pieces: Piece[], base: Buffer, chunker: Chunker, baseChunker = chunker) {
  const baseChunks = [...baseChunker.split(base)];
  const out: Buffer[] = [];
  let reused = 0;
  for await (const planned of planChunks(from(pieces), { sizes: baseChunks.map((c) => c.length) }, chunker)) {
    if ('reuse' in planned) {
      reused++;
      out.push(baseChunks[planned.reuse]!);
    } else out.push(Buffer.from(planned.chunk));
  }
  return { chunks: out, reused };
}

/**
 * A new state made from `base` by random edits (overwrites, inserts, deletes), told as bytes for what the edits wrote
 * and ranges for the untouched stretches of the base, the way a runtime that tracks its writes would tell it.
 */
function edited(base: Buffer, seed: number, reads: { bytes: number }): { state: Buffer; pieces: Piece[] } {
  const r = rng(seed);
  const pieces: Piece[] = [];
  const parts: Buffer[] = [];
  let at = 0;
  while (at < base.length) {
    const keep = Math.min(base.length - at, r(4000));
    if (keep > 0) {
      pieces.push(range(base, at, keep, reads));
      parts.push(base.subarray(at, at + keep));
      at += keep;
    }
    const edit = r(4);
    const len = 1 + r(600);
    if (edit === 0 || edit === 1) {
      const bytes = seeded(seed * 1000 + at, len);
      pieces.push(bytes);
      parts.push(bytes);
      if (edit === 0) at += len; // overwrite; 1 is an insert
    } else if (edit === 2) {
      at += len; // delete
    }
  }
  if (r(2) === 0) {
    const tail = seeded(seed + 7, r(3000));
    pieces.push(tail);
    parts.push(tail);
  }
  return { state: Buffer.concat(parts), pieces };
}

describe('planChunks: chunking with unchanged ranges', () => {
  const chunker = new Chunker(SMALL);

  it('cuts exactly where a full chunking of the new bytes cuts, over many random edits', async () => {
    for (let seed = 1; seed <= 60; seed++) {
      const base = seeded(seed, 20_000 + rng(seed)(40_000));
      const reads = { bytes: 0 };
      const { state, pieces } = edited(base, seed, reads);
      const { chunks } = await plan(pieces, base, chunker);
      const expected = [...chunker.split(state)];
      expect(chunks.map((c) => c.length)).toEqual(expected.map((c) => c.length));
      expect(Buffer.concat(chunks).equals(state)).toBe(true);
    }
  });

  it('reads none of a state whose every byte is unchanged, and reuses every chunk', async () => {
    const base = seeded(1, 100_000);
    const reads = { bytes: 0 };
    const { chunks, reused } = await plan([range(base, 0, base.length, reads)], base, chunker);
    expect(Buffer.concat(chunks).equals(base)).toBe(true);
    expect(reused).toBe([...chunker.split(base)].length);
    expect(reads.bytes).toBe(0);
  });

  it('reads only around a change: a few chunks, not the state', async () => {
    const base = seeded(2, 400_000);
    const reads = { bytes: 0 };
    const change = seeded(3, 500);
    const pieces = [range(base, 0, 200_000, reads), change, range(base, 200_500, base.length - 200_500, reads)];
    const state = Buffer.concat([base.subarray(0, 200_000), change, base.subarray(200_500)]);
    const { chunks } = await plan(pieces, base, chunker);
    expect(Buffer.concat(chunks).equals(state)).toBe(true);
    expect(chunks.map((c) => c.length)).toEqual([...chunker.split(state)].map((c) => c.length));
    expect(reads.bytes).toBeGreaterThan(0);
    expect(reads.bytes).toBeLessThan(8 * SMALL.maxSize);
  });

  it('keeps the bytes right when the base was chunked with other options', async () => {
    const base = seeded(4, 60_000);
    const reads = { bytes: 0 };
    const { state, pieces } = edited(base, 4, reads);
    const other = new Chunker({ minSize: 128, avgSize: 512, maxSize: 2048 });
    const { chunks } = await plan(pieces, base, chunker, other);
    expect(Buffer.concat(chunks).equals(state)).toBe(true);
  });

  it('handles an appended tail and a truncated end', async () => {
    const base = seeded(5, 50_000);
    const reads = { bytes: 0 };
    const tail = seeded(6, 5_000);
    const grown = await plan([range(base, 0, base.length, reads), tail], base, chunker);
    expect(Buffer.concat(grown.chunks).equals(Buffer.concat([base, tail]))).toBe(true);
    const shrunk = await plan([range(base, 0, 30_001, reads)], base, chunker);
    expect(shrunk.chunks.map((c) => c.length)).toEqual(
      [...chunker.split(base.subarray(0, 30_001))].map((c) => c.length),
    );
  });

  it('refuses a range outside the base with a TypeError', async () => {
    const base = seeded(7, 10_000);
    const reads = { bytes: 0 };
    await expect(plan([range(base, 9_000, 2_000, reads)], base, chunker)).rejects.toThrow(TypeError);
    await expect(plan([range(base, -1, 10, reads)], base, chunker)).rejects.toThrow(/not inside the base state/);
  });

  it('fails when a range reads fewer bytes than it claims', async () => {
    const base = seeded(8, 10_000);
    const short: UnchangedRange = {
      baseOffset: 0,
      length: 5_000,
      async *read() {
        yield base.subarray(0, 10);
      },
    };
    await expect(plan([seeded(9, 100), short], base, chunker)).rejects.toThrow(/read 10 bytes/);
  });

  it('names each reused chunk by its number in the base, in order, and the rest as bytes', async () => {
    const base = seeded(10, 50_000);
    const sizes = [...chunker.split(base)].map((c) => c.length);
    const reads = { bytes: 0 };
    const change = seeded(11, 300);
    const pieces = [range(base, 0, 20_000, reads), change, range(base, 20_300, base.length - 20_300, reads)];
    const planned: PlannedChunk[] = [];
    for await (const p of planChunks(from(pieces), { sizes }, chunker)) planned.push(p);
    const reused = planned.flatMap((p) => ('reuse' in p ? [p.reuse] : []));
    expect(reused.length).toBeGreaterThan(0);
    expect(planned.some((p) => 'chunk' in p)).toBe(true);
    // Numbers of base chunks, each taken once, in the base's order.
    expect(reused.every((k) => Number.isInteger(k) && k >= 0 && k < sizes.length)).toBe(true);
    expect([...reused].sort((a, b) => a - b)).toEqual(reused);
    expect(new Set(reused).size).toBe(reused.length);
  });
});
