/**
 * The FastCDC chunker: cut points identical to the Rust crate `fastcdc`, streaming that cuts exactly where the
 * in-memory split does, boundaries that survive edits, and what an incremental checkpoint writes.
 *
 * test/fixtures/chunker/fastcdc-v2020.json was produced by a throwaway Rust program outside this repository,
 * depending on the crate `fastcdc` 3.2.1 from crates.io. For each case it built the input, ran
 * `fastcdc::v2020::FastCDC::new(&input[..length], minSize, avgSize, maxSize)` (normalization level 1, no gear seed)
 * and printed each chunk's offset, length and `hash` (hex), with the FNV-1a-32 of the input so that an input this
 * file fails to regenerate is reported as such. The inputs, regenerated below by `randomBytes` and `textBytes`:
 *
 *   - random: xorshift32 (x ^= x << 13; x ^= x >>> 17; x ^= x << 5), seed 0x9e3779b9, each step appending the
 *     new state as 4 little-endian bytes; 4 MiB, and its first 64 KiB and 1,000,001 bytes;
 *   - text:   xorshift32, seed 0x2545f491, each step appending WORDS[r & 63] then ".\n" when (r >>> 8) % 13 == 0,
 *     else " "; cut to the same lengths;
 *   - zeros:  1 MiB and 64 KiB + 1 of zero bytes.
 *
 * Option sets (min/avg/max bytes): 4096/16384/65536, 16384/65536/262144, 65536/262144/1048576, 6144/24576/98304 and
 * 8190/20000/65534 (not powers of two), 64/256/1024 (the smallest sizes the crate accepts, on 64 KiB inputs).
 * Built against fastcdc 5.0.0 the same program printed the same offsets and lengths; only the hash of a final chunk
 * of odd length differs there (5.0.0 folds the unexamined last byte into it), so `crateHash` follows 3.2.1.
 */
import { createHash } from 'node:crypto';
import { endianness } from 'node:os';
import { Readable } from 'node:stream';
import vectors from '../../fixtures/chunker/fastcdc-v2020.json';
import { GEAR_SCAN_WASM } from '../../../src/snapshots/engine/gear-scan-wasm';
import {
  Chunker,
  cutPoint,
  DEFAULT_CHUNKER,
  GEAR,
  MASKS,
  validateChunkerOptions,
  type ChunkerOptions,
} from '../../../src/snapshots/engine/chunker';

const KiB = 1024;
const MiB = 1024 * KiB;
const M64 = (1n << 64n) - 1n;
const GEAR_LS = GEAR.map((g) => (g << 1n) & M64);

// prettier-ignore
const WORDS = [
  'session', 'checkpoint', 'snapshot', 'worker', 'temporal', 'activity', 'workflow', 'signal',
  'query', 'update', 'state', 'resume', 'pause', 'restore', 'chunk', 'manifest',
  'the', 'a', 'of', 'and', 'to', 'in', 'is', 'it',
  'for', 'on', 'with', 'as', 'at', 'by', 'from', 'this',
  'durable', 'history', 'replay', 'timer', 'retry', 'heartbeat', 'cancel', 'deadline',
  '{"id":', '"seq":', 'null', 'true', 'false', '0', '1', '42',
  'error', 'warn', 'info', 'debug', 'trace', 'user', 'tool', 'model',
  'stdout', 'stderr', 'exit', 'pid', 'cwd', 'env', 'path', 'file',
];

function xorshift32(seed: number): () => number {
  let x = seed | 0;
  return () => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return x >>> 0;
  };
}

function randomBytes(length: number, seed: number): Buffer {
  const next = xorshift32(seed);
  const words = new Uint32Array(Math.ceil(length / 4));
  for (let i = 0; i < words.length; i++) words[i] = next();
  const bytes = Buffer.from(words.buffer);
  if (endianness() === 'BE') bytes.swap32();
  return bytes.subarray(0, length);
}

function textBytes(length: number, seed: number): Buffer {
  const next = xorshift32(seed);
  const pieces: string[] = [];
  let size = 0;
  while (size < length) {
    const r = next();
    const piece = WORDS[r & 63]! + ((r >>> 8) % 13 === 0 ? '.\n' : ' ');
    pieces.push(piece);
    size += piece.length;
  }
  return Buffer.from(pieces.join(''), 'latin1').subarray(0, length);
}

function fnv1a32(data: Uint8Array): string {
  let h = 0x811c9dc5;
  for (let i = 0; i < data.length; i++) {
    h ^= data[i]!;
    // h * 0x01000193 by shifts: Math.imul is ~50x slower under jest
    h = (h + (h << 1) + (h << 4) + (h << 7) + (h << 8) + (h << 24)) | 0;
  }
  return (h >>> 0).toString(16).padStart(8, '0');
}

/** The crate's `v2020::cut_gear`, transcribed with BigInt: [cut point, hash] for a chunk starting at src[0]. */
function crateCut(src: Uint8Array, { minSize, avgSize, maxSize }: ChunkerOptions): [number, bigint] {
  const bits = Math.round(Math.log2(avgSize));
  const maskS = MASKS[bits + 1]!;
  const maskL = MASKS[bits - 1]!;
  let remaining = src.length;
  if (remaining <= minSize) return [remaining, 0n];
  let center = avgSize;
  if (remaining > maxSize) remaining = maxSize;
  else if (remaining < center) center = remaining;
  let index = Math.floor(minSize / 2);
  let hash = 0n;
  for (const [stop, mask] of [
    [Math.floor(center / 2), maskS],
    [Math.floor(remaining / 2), maskL],
  ] as const) {
    while (index < stop) {
      const a = index * 2;
      hash = ((hash << 2n) + GEAR_LS[src[a]!]!) & M64;
      if ((hash & (mask << 1n)) === 0n) return [a, hash];
      hash = (hash + GEAR[src[a + 1]!]!) & M64;
      if ((hash & mask) === 0n) return [a + 1, hash];
      index++;
    }
  }
  return [remaining, hash];
}

/**
 * The crate's (3.2.1) `hash` of the chunk [offset, offset + length) of `input`, from the last (at most 64) bytes it
 * hashed: the byte at the cut for a cut by a mask (shifted once more when the cut is at an even chunk-relative
 * position, as the two-bytes-at-a-time loop leaves it), else the last byte of the last whole pair it examined.
 */
function crateHash(input: Uint8Array, offset: number, length: number, options: ChunkerOptions): bigint {
  const remaining = input.length - offset;
  if (remaining <= options.minSize) return 0n;
  const limit = Math.min(remaining, options.maxSize);
  const byMask = length < limit;
  const last = byMask ? length : limit - (limit & 1) - 1;
  let hash = 0n;
  for (let j = Math.max(options.minSize, last - 63); j <= last; j++) {
    hash = ((hash << 1n) + GEAR[input[offset + j]!]!) & M64;
  }
  return byMask && last % 2 === 0 ? (hash << 1n) & M64 : hash;
}

/** [offset, length] of each chunk. */
function layout(chunks: Iterable<Uint8Array>): [number, number][] {
  const out: [number, number][] = [];
  let offset = 0;
  for (const chunk of chunks) {
    out.push([offset, chunk.length]);
    offset += chunk.length;
  }
  return out;
}

/** `data` in consecutive pieces of the sizes `size()` returns. */
async function* inPieces(data: Buffer, size: () => number): AsyncGenerator<Buffer> {
  for (let at = 0; at < data.length;) {
    const n = Math.max(0, Math.min(size(), data.length - at));
    yield data.subarray(at, at + n);
    at += n;
  }
}

async function collect<T>(iterable: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const item of iterable) out.push(item);
  return out;
}

/** Piece sizes from 1 B to 1 MiB, uniform in log scale, so that tiny and huge pieces both occur often. */
function logUniformSizes(seed: number, maxLog2 = 20): () => number {
  const next = xorshift32(seed);
  return () => Math.floor(2 ** ((next() / 2 ** 32) * maxLog2));
}

function digest(chunk: Uint8Array): string {
  return createHash('sha256').update(chunk).digest('base64');
}

const SMALL: ChunkerOptions = { minSize: 64, avgSize: 256, maxSize: 1024 };

describe('options', () => {
  it('accepts the defaults and the limits of the crate', () => {
    expect(() => validateChunkerOptions(DEFAULT_CHUNKER)).not.toThrow();
    expect(() => new Chunker({ minSize: 64, avgSize: 256, maxSize: 1024 })).not.toThrow();
    expect(() => new Chunker({ minSize: MiB, avgSize: 4 * MiB, maxSize: 16 * MiB })).not.toThrow();
    expect(() => new Chunker({ minSize: 8190, avgSize: 20000, maxSize: 65534 })).not.toThrow();
    expect(() => new Chunker({ minSize: 4096, avgSize: 4096, maxSize: 4096 })).not.toThrow();
  });

  it.each<[string, ChunkerOptions, RegExp]>([
    [
      'avg above max',
      { minSize: 16 * KiB, avgSize: 512 * KiB, maxSize: 256 * KiB },
      /avgSize \(524288\) must be between minSize \(16384\) and maxSize \(262144\)/,
    ],
    ['avg below min', { minSize: 16 * KiB, avgSize: 8 * KiB, maxSize: 256 * KiB }, /avgSize \(8192\) must be between/],
    [
      'odd min',
      { minSize: 4097, avgSize: 16 * KiB, maxSize: 64 * KiB },
      /minSize must be an even integer from 64 to 1048576 bytes, got 4097/,
    ],
    ['odd max', { minSize: 4096, avgSize: 16 * KiB, maxSize: 65535 }, /maxSize must be an even integer/],
    ['min too small', { minSize: 32, avgSize: 256, maxSize: 1024 }, /minSize must be an even integer from 64/],
    [
      'avg too large',
      { minSize: 1 * MiB, avgSize: 8 * MiB, maxSize: 16 * MiB },
      /avgSize must be an even integer from 256 to 4194304/,
    ],
    [
      'max too large',
      { minSize: 1 * MiB, avgSize: 4 * MiB, maxSize: 32 * MiB },
      /maxSize must be an even integer from 1024 to 16777216/,
    ],
    ['not an integer', { minSize: 4096.5, avgSize: 16 * KiB, maxSize: 64 * KiB }, /minSize .* got 4096.5/],
    ['NaN', { minSize: NaN, avgSize: 16 * KiB, maxSize: 64 * KiB }, /minSize .* got NaN/],
  ])('rejects %s with a RangeError', (_name, options, message) => {
    expect(() => new Chunker(options)).toThrow(RangeError);
    expect(() => new Chunker(options)).toThrow(message);
    expect(() => cutPoint(Buffer.alloc(10), 0, 10, options)).toThrow(message);
  });

  it('rejects a region outside the buffer', () => {
    const data = Buffer.alloc(100);
    expect(() => cutPoint(data, 0, 101)).toThrow(RangeError);
    expect(() => cutPoint(data, 50, 50)).toThrow(/0 <= offset < end <= 100/);
    expect(() => cutPoint(data, -1, 10)).toThrow(RangeError);
  });
});

describe('cut points match the fastcdc crate', () => {
  it('uses the FastCDC gear table (MD5 of 64 bytes of each byte value, first 8 bytes big-endian)', () => {
    expect(GEAR).toHaveLength(256);
    GEAR.forEach((g, i) => expect(g).toBe(createHash('md5').update(Buffer.alloc(64, i)).digest().readBigUInt64BE(0)));
  });

  const inputs: Record<string, Buffer> = {
    random: randomBytes(4 * MiB, 0x9e3779b9),
    text: textBytes(4 * MiB, 0x2545f491),
    zeros: Buffer.alloc(MiB),
  };

  describe.each(
    vectors.vectors.map((v) => [`${v.input} ${v.length} B, ${v.minSize}/${v.avgSize}/${v.maxSize}`, v] as const),
  )('%s', (_name, vector) => {
    const options = { minSize: vector.minSize, avgSize: vector.avgSize, maxSize: vector.maxSize };
    const input = inputs[vector.input]!.subarray(0, vector.length);
    const expected = vector.chunks.map(([offset, length]) => [offset, length]);

    it('regenerates the input the vectors were made from', () => {
      expect(fnv1a32(input)).toBe(vector.fnv1a32);
    });

    it('cuts where the crate cuts, with the same gear hash', () => {
      const chunks = [...new Chunker(options).split(input)];
      expect(layout(chunks)).toEqual(expected);
      const hashes = vector.chunks.map(([offset, length]) => crateHash(input, Number(offset), Number(length), options));
      expect(hashes.map((h) => h.toString(16).padStart(16, '0'))).toEqual(vector.chunks.map((c) => c[2]));
    });

    it('cuts there when streamed in random pieces too', async () => {
      const chunks = await collect(new Chunker(options).chunks(inPieces(input, logUniformSizes(vector.length))));
      expect(layout(chunks)).toEqual(expected);
      expect(Buffer.concat(chunks).equals(input)).toBe(true);
    });
  });

  it('agrees with a BigInt transcription of the crate on random sizes and data', () => {
    const next = xorshift32(42);
    const even = (lo: number, hi: number) => lo + 2 * Math.floor(((next() / 2 ** 32) * (hi - lo)) / 2);
    for (let round = 0; round < 24; round++) {
      const minSize = even(64, 4096);
      const avgSize = even(Math.max(256, minSize), 16384);
      const maxSize = even(Math.max(1024, avgSize), 65536);
      const options = { minSize, avgSize, maxSize };
      const length = 1 + (next() % (256 * KiB));
      const kind = round % 3;
      // random bytes; bytes from a 4-letter alphabet; long runs of one byte (forced cuts at maxSize)
      const data =
        kind === 0
          ? randomBytes(length, next())
          : kind === 1
            ? randomBytes(length, next()).map((b) => 97 + (b & 3))
            : randomBytes(length, next()).map((b, i) => ((i >> 14) & 1 ? b : 7));
      const expected: [number, number, string][] = [];
      for (let offset = 0; offset < length;) {
        const [cut, hash] = crateCut(data.subarray(offset), options);
        expected.push([offset, cut, hash.toString(16)]);
        offset += cut;
      }
      const chunks = layout(new Chunker(options).split(data));
      expect({ options, length, chunks }).toEqual({ options, length, chunks: expected.map(([o, l]) => [o, l]) });
      expect(expected.map(([o, l]) => crateHash(data, o, l, options).toString(16))).toEqual(expected.map((e) => e[2]));
      for (const [offset, len] of expected) expect(cutPoint(data, offset, length, options)).toBe(offset + len);
    }
  });
});

describe('chunk sizes', () => {
  it('yields nothing for an empty input', async () => {
    const chunker = new Chunker();
    expect([...chunker.split(Buffer.alloc(0))]).toEqual([]);
    expect(await collect(chunker.chunks(Readable.from([])))).toEqual([]);
    expect(await collect(chunker.chunks(inPieces(Buffer.alloc(0), () => 0)))).toEqual([]);
    expect(await collect(chunker.chunks(Readable.from([Buffer.alloc(0), Buffer.alloc(0)])))).toEqual([]);
  });

  it('yields one chunk for an input no longer than minSize', async () => {
    const chunker = new Chunker();
    for (const length of [1, 2, 1000, DEFAULT_CHUNKER.minSize - 1, DEFAULT_CHUNKER.minSize]) {
      const data = randomBytes(length, length);
      expect([...chunker.split(data)]).toEqual([data]);
      const streamed = await collect(chunker.chunks(inPieces(data, logUniformSizes(length, 10))));
      expect(streamed).toEqual([data]);
    }
  });

  it('keeps every chunk within [minSize, maxSize], the last one within [1, maxSize]', () => {
    const cases: [ChunkerOptions, Buffer][] = [
      [DEFAULT_CHUNKER, randomBytes(8 * MiB + 3, 7)],
      [DEFAULT_CHUNKER, Buffer.alloc(3 * MiB + 1)],
      [SMALL, randomBytes(MiB + 1, 8)],
      [SMALL, textBytes(MiB, 9)],
      [{ minSize: 4096, avgSize: 4096, maxSize: 4096 }, randomBytes(MiB - 1, 10)],
    ];
    for (const [options, data] of cases) {
      const lengths = layout(new Chunker(options).split(data)).map(([, length]) => length);
      const last = lengths.pop()!;
      expect(Math.min(...lengths)).toBeGreaterThanOrEqual(options.minSize);
      expect(Math.max(...lengths)).toBeLessThanOrEqual(options.maxSize);
      expect(last).toBeGreaterThanOrEqual(1);
      expect(last).toBeLessThanOrEqual(options.maxSize);
    }
  });

  it('cuts data without cut points (all zeros) into maxSize chunks', () => {
    const lengths = layout(new Chunker().split(Buffer.alloc(MiB + 5))).map(([, length]) => length);
    const { maxSize } = DEFAULT_CHUNKER;
    expect(lengths).toEqual([...Array<number>(MiB / maxSize).fill(maxSize), 5]);
  });

  it('averages about avgSize on random data', () => {
    const data = randomBytes(16 * MiB, 11);
    const count = [...new Chunker().split(data)].length;
    // Level-1 normalization with min = avg / 4 gives a mean near 1.25 x avgSize on random data.
    expect(data.length / count).toBeGreaterThan(1.1 * DEFAULT_CHUNKER.avgSize);
    expect(data.length / count).toBeLessThan(1.4 * DEFAULT_CHUNKER.avgSize);
  });
});

describe('streaming', () => {
  const data = randomBytes(8 * MiB + 1, 0x5eed);
  const chunker = new Chunker();
  const expected = layout(chunker.split(data));

  it.each([1, 2, 3])(
    'cuts where the in-memory split cuts, whatever the piece sizes (1 B to 1 MiB, seed %i)',
    async (seed) => {
      const chunks = await collect(chunker.chunks(inPieces(data, logUniformSizes(seed))));
      expect(layout(chunks)).toEqual(expected);
      expect(Buffer.concat(chunks).equals(data)).toBe(true);
    },
  );

  it.each([
    ['one piece', () => data.length],
    ['64 KiB pieces', () => 64 * KiB],
    ['odd pieces (4097 B)', () => 4097],
    ['pieces of maxSize + 1', () => DEFAULT_CHUNKER.maxSize + 1],
  ])('cuts where the in-memory split cuts: %s', async (_name, size) => {
    const chunks = await collect(chunker.chunks(inPieces(data, size)));
    expect(layout(chunks)).toEqual(expected);
    expect(Buffer.concat(chunks).equals(data)).toBe(true);
  });

  it('handles tiny pieces, kept chunks stay intact (own buffers are not reused under them)', async () => {
    const source = randomBytes(256 * KiB + 1, 12);
    const small = new Chunker(SMALL);
    for (const [seed, maxLog2, length] of [
      [1, 0, 32 * KiB + 1], // 1-byte pieces
      [2, 3, 256 * KiB + 1],
      [3, 8, 256 * KiB + 1],
      [4, 12, 256 * KiB + 1],
    ] as const) {
      const input = source.subarray(0, length);
      const want = layout(small.split(input));
      // collected first, compared after: a chunk aliasing a reused buffer would have changed by then
      const chunks = await collect(small.chunks(inPieces(input, logUniformSizes(seed, maxLog2))));
      expect(layout(chunks)).toEqual(want);
      expect(Buffer.concat(chunks).equals(input)).toBe(true);
      chunks.forEach((chunk, i) =>
        expect(chunk.equals(input.subarray(want[i]![0], want[i]![0] + want[i]![1]))).toBe(true),
      );
    }
  });

  it('reads a Readable and plain Uint8Array pieces', async () => {
    const pieces = [...inPiecesSync(data, 100_003)];
    const fromReadable = await collect(chunker.chunks(Readable.from(pieces)));
    expect(layout(fromReadable)).toEqual(expected);
    const plain = pieces.map((p) => new Uint8Array(p.buffer, p.byteOffset, p.length));
    const fromPlain = await collect(chunker.chunks(Readable.from(plain, { objectMode: true })));
    expect(layout(fromPlain)).toEqual(expected);
    expect(fromPlain.every((c) => Buffer.isBuffer(c))).toBe(true);
  });

  it('rejects string pieces', async () => {
    await expect(collect(chunker.chunks(Readable.from(['abc'])))).rejects.toThrow(TypeError);
  });

  it('yields a chunk inside one piece as a view of it, without copying', async () => {
    const [first] = await collect(chunker.chunks(Readable.from([data])));
    expect(first!.buffer).toBe(data.buffer);
    expect(first!.byteOffset).toBe(data.byteOffset);
  });
});

function* inPiecesSync(data: Buffer, size: number): Generator<Buffer> {
  for (let at = 0; at < data.length; at += size) yield data.subarray(at, at + size);
}

describe('boundaries survive edits', () => {
  it('re-synchronizes within 3 chunks after inserting 100 bytes in the middle of 8 MiB', () => {
    const original = randomBytes(8 * MiB, 21);
    const at = 4 * MiB + 12345;
    const edited = Buffer.concat([original.subarray(0, at), randomBytes(100, 22), original.subarray(at)]);
    const chunker = new Chunker();
    const before = [...chunker.split(original)];
    const after = [...chunker.split(edited)];
    const old = layout(before);
    const unchangedPrefix = old.filter(([offset, length]) => offset + length <= at);
    expect(layout(after).slice(0, unchangedPrefix.length)).toEqual(unchangedPrefix);
    const known = new Set(before.map(digest));
    const changed = after.filter((c) => !known.has(digest(c)));
    expect(changed.length).toBeGreaterThanOrEqual(1);
    expect(changed.length).toBeLessThanOrEqual(3);
    // and everything after the re-synchronization is shifted by exactly 100 bytes
    const tail = layout(after).slice(-10);
    expect(tail).toEqual(old.slice(-10).map(([offset, length]) => [offset + 100, length]));
  });
});

describe('what an incremental checkpoint writes after 1% changed in 20 scattered places', () => {
  const PLACES = 20;

  /** Overwrites 1% of a copy of `state`, in PLACES runs at seeded random offsets, one in each 1/PLACES of it. */
  function scatteredChange(state: Buffer, seed: number): { changed: Buffer; runs: [number, number][] } {
    const changed = Buffer.from(state);
    const next = xorshift32(seed);
    const stretch = Math.floor(state.length / PLACES);
    const run = Math.floor(state.length / 100 / PLACES);
    const runs: [number, number][] = [];
    for (let place = 0; place < PLACES; place++) {
      const start = place * stretch + (next() % (stretch - run));
      randomBytes(run, next()).copy(changed, start);
      runs.push([start, start + run]);
    }
    return { changed, runs };
  }

  /** Bytes, and chunks, of the changed state that are in no chunk of the original state. */
  function written(chunker: Chunker, state: Buffer, changed: Buffer): { bytes: number; chunks: [number, number][] } {
    const known = new Set<string>();
    for (const chunk of chunker.split(state)) known.add(digest(chunk));
    const fresh = layout(chunker.split(changed)).filter(([o, l]) => !known.has(digest(changed.subarray(o, o + l))));
    return { bytes: fresh.reduce((sum, [, l]) => sum + l, 0), chunks: fresh };
  }

  it('rewrites the chunks around each changed place, about one per place (default options, 16 MiB)', () => {
    const state = randomBytes(16 * MiB, 31);
    const { changed, runs } = scatteredChange(state, 32);
    const { bytes, chunks } = written(new Chunker(), state, changed);
    // Every new chunk overlaps a changed run or follows one closely. Most places rewrite one chunk; some need a few
    // more before the boundaries re-synchronize, because with normalized chunking a position that matches only the
    // easier mask is a cut point only past avgSize into a chunk.
    const perPlace = runs.map(() => 0);
    for (const [offset, length] of chunks) {
      const place = runs.findLastIndex(([start]) => start < offset + length);
      expect(place).toBeGreaterThanOrEqual(0);
      const [, end] = runs[place]!;
      expect(offset).toBeLessThan(end + 6 * DEFAULT_CHUNKER.maxSize);
      perPlace[place]!++;
    }
    expect(Math.min(...perPlace)).toBe(1);
    expect(Math.max(...perPlace)).toBeLessThanOrEqual(6);
    expect(chunks.length).toBeLessThanOrEqual(2 * PLACES);
    // About one chunk per place, larger than the average chunk (a place falls in a long chunk more often than in a
    // short one): several percent of a state this small. 3% would need 4 KiB chunks (see DEFAULT_CHUNKER and the last
    // test); on a 256 MiB state the same change writes under 2% (next test).
    expect(bytes / state.length).toBeLessThan(0.2);
  });

  it('writes <= 3% of a 256 MiB state with the default options', () => {
    const state = randomBytes(256 * MiB, 41);
    const { changed } = scatteredChange(state, 42);
    expect(written(new Chunker(), state, changed).bytes / state.length).toBeLessThanOrEqual(0.03);
  }, 60_000);

  it('writes <= 3% of a 16 MiB state with 4 KiB chunks', () => {
    const state = randomBytes(16 * MiB, 51);
    const { changed } = scatteredChange(state, 52);
    const options = { minSize: 1 * KiB, avgSize: 4 * KiB, maxSize: 16 * KiB };
    expect(written(new Chunker(options), state, changed).bytes / state.length).toBeLessThanOrEqual(0.03);
  });
});

test('the WebAssembly scan in gear-scan-wasm.ts is what gear-scan.wat assembles to', async () => {
  const { assembleGearScan } = await import('../../../scripts/build-wasm');
  expect(await assembleGearScan()).toBe(GEAR_SCAN_WASM);
});
