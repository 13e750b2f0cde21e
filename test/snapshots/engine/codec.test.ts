import { randomBytes } from 'node:crypto';
import * as zlib from 'node:zlib';
import {
  ChunkCodecError,
  CODEC_MAX_CHUNK_SIZE,
  CODECS,
  compressChunk,
  decompressChunk,
  defaultCodec,
  isCodecAvailable,
  type ChunkCodecFailure,
  type CodecId,
  type CodecName,
} from '../../../src/snapshots/engine/codec';

const KiB = 1024;
/** The chunker's largest chunk. */
const MAX_CHUNK = 256 * KiB;

let textCache = Buffer.alloc(0);

/** Deterministic, log-like text: compresses well, as most session state does. */
function text(size: number): Buffer {
  if (textCache.length < size) {
    const lines: string[] = [];
    for (let i = 0, length = 0; length < size; i++) {
      const line = `{"seq":${i},"level":"${i % 7 === 0 ? 'warn' : 'info'}","msg":"chunk ${(i * 7919) % 1000} stored","ms":${(i * 31) % 977}}`;
      lines.push(line);
      length += line.length + 1;
    }
    textCache = Buffer.from(lines.join('\n'));
  }
  return Buffer.from(textCache.subarray(0, size));
}

/** Random bytes whose first `zeros` bytes of every 8 KiB are zero: saves about zeros/8192 of the size, no more. */
function partlyCompressible(size: number, zeros: number): Buffer {
  const buf = randomBytes(size);
  for (let off = 0; off < size; off += 8 * KiB) buf.fill(0, off, Math.min(size, off + zeros));
  return buf;
}

function roundTrip(plain: Buffer, codec?: CodecId): { codec: CodecId; data: Buffer } {
  const compressed = compressChunk(plain, codec === undefined ? {} : { codec });
  expect(decompressChunk(compressed.codec, compressed.data, plain.length).equals(plain)).toBe(true);
  return compressed;
}

function codecError(fn: () => unknown): ChunkCodecError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(ChunkCodecError);
    return err as ChunkCodecError;
  }
  throw new Error('expected a ChunkCodecError, nothing was thrown');
}

const COMPRESSING: CodecName[] = ['brotli', 'zstd'];

test('codec ids are the on-disk format and never change', () => {
  expect(CODECS).toEqual({ none: 0, brotli: 1, zstd: 2 });
});

test('the default codec is zstd when its binding is installed, brotli otherwise', () => {
  expect(defaultCodec()).toBe(isCodecAvailable(CODECS.zstd) ? CODECS.zstd : CODECS.brotli);
  expect(isCodecAvailable(CODECS.none)).toBe(true);
  expect(isCodecAvailable(CODECS.brotli)).toBe(true);
});

describe.each(['none', ...COMPRESSING] as CodecName[])('%s', (name) => {
  const codec = CODECS[name];
  const available = isCodecAvailable(codec);
  const it_ = available ? it : it.skip; // zstd without zstd-napi installed

  it_.each([0, 1])('stores a %i-byte chunk as none and round-trips it', (size) => {
    expect(roundTrip(text(size), codec).codec).toBe(CODECS.none);
  });

  it_('round-trips a 100-byte chunk', () => {
    expect([codec, CODECS.none]).toContain(roundTrip(text(100), codec).codec);
  });

  it_.each([16 * KiB, 64 * KiB, MAX_CHUNK, CODEC_MAX_CHUNK_SIZE])('round-trips a %i-byte text chunk', (size) => {
    const plain = text(size);
    const { codec: used, data } = roundTrip(plain, codec);
    expect(used).toBe(codec);
    if (codec !== CODECS.none) expect(data.length).toBeLessThan(plain.length / 4);
  });

  it_('round-trips a chunk that is half random, half text (the probe must not call it incompressible)', () => {
    const plain = Buffer.concat([randomBytes(32 * KiB), text(32 * KiB)]);
    expect(roundTrip(plain, codec).codec).toBe(codec);
  });

  it_('rejects a decoded size other than expected', () => {
    const plain = text(64 * KiB);
    const { codec: used, data } = compressChunk(plain, { codec });
    expect(used).toBe(codec);
    for (const wrong of [0, plain.length - 1, plain.length + 1, 2 * plain.length]) {
      const err = codecError(() => decompressChunk(codec, data, wrong));
      expect(err.reason).toBe<ChunkCodecFailure>('SizeMismatch');
      expect(err.codec).toBe(codec);
    }
  });

  if (codec !== CODECS.none) {
    it_('throws ChunkCodecError on a corrupt body, never another error or a wrong-sized result', () => {
      const plain = text(64 * KiB);
      const { data } = compressChunk(plain, { codec });
      const bodies: Buffer[] = [Buffer.alloc(0), randomBytes(data.length), data.subarray(0, data.length >> 1)];
      bodies.push(Buffer.concat([data, Buffer.from([0, 1, 2, 3])]));
      // Flipped bytes all over the body: a flip in a literal may decode to the right size with other bytes (the
      // chunk's digest catches that); anything else must be a ChunkCodecError.
      for (let pos = 0; pos < data.length; pos += Math.max(1, data.length >> 6)) {
        const flipped = Buffer.from(data);
        flipped[pos]! ^= 0x5a;
        bodies.push(flipped);
      }
      let rejected = 0;
      for (const body of bodies) {
        try {
          expect(decompressChunk(codec, body, plain.length).length).toBe(plain.length);
        } catch (err) {
          expect(err).toBeInstanceOf(ChunkCodecError);
          expect(['Corrupt', 'SizeMismatch']).toContain((err as ChunkCodecError).reason);
          rejected++;
        }
      }
      // Empty, random, truncated and trailing-garbage bodies at least.
      expect(rejected).toBeGreaterThanOrEqual(4);
    });
  }
});

test('incompressible chunks are stored as none, as the same buffer', () => {
  for (const size of [16 * KiB, 64 * KiB, MAX_CHUNK]) {
    const plain = randomBytes(size);
    const { codec, data } = compressChunk(plain);
    expect(codec).toBe(CODECS.none);
    expect(data).toBe(plain);
    expect(decompressChunk(codec, data, size)).toBe(plain);
  }
});

test('after an incompressible chunk, text at either end of the next one is still found and compressed', () => {
  const afterIncompressible = { afterIncompressible: true };
  expect(compressChunk(randomBytes(64 * KiB), afterIncompressible).codec).toBe(CODECS.none);
  for (const plain of [text(64 * KiB), Buffer.concat([randomBytes(32 * KiB), text(32 * KiB)])]) {
    const { codec, data } = compressChunk(plain, afterIncompressible);
    expect(codec).toBe(defaultCodec());
    expect(decompressChunk(codec, data, plain.length)).toEqual(plain);
  }
});

test('text-like chunks are compressed with the default codec', () => {
  const plain = text(64 * KiB);
  const { codec, data } = roundTrip(plain);
  expect(codec).toBe(defaultCodec());
  expect(data.length).toBeLessThan(plain.length / 4);
});

test('a chunk is compressed only when that saves at least 1/16 of it', () => {
  // ~3 % of zeros: compressible, but not enough to be worth it.
  expect(compressChunk(partlyCompressible(64 * KiB, 256)).codec).toBe(CODECS.none);
  // ~12 % of zeros.
  expect(roundTrip(partlyCompressible(64 * KiB, 1024)).codec).toBe(defaultCodec());
});

test('unknown codec ids are rejected', () => {
  for (const id of [3, 7, 255]) {
    const err = codecError(() => decompressChunk(id, Buffer.from('abc'), 3));
    expect(err.reason).toBe<ChunkCodecFailure>('UnknownCodec');
    expect(err.codec).toBe(id);
    expect(err.name).toBe('ChunkCodecError');
    expect(err.message).toContain(String(id));
  }
  const err = codecError(() => compressChunk(text(64 * KiB), { codec: 9 as CodecId }));
  expect(err.reason).toBe<ChunkCodecFailure>('UnknownCodec');
});

test('impossible expected sizes are rejected before anything is allocated', () => {
  for (const size of [-1, 1.5, NaN, CODEC_MAX_CHUNK_SIZE + 1, 2 ** 40]) {
    expect(codecError(() => decompressChunk(CODECS.brotli, Buffer.alloc(8), size)).reason).toBe('SizeMismatch');
  }
});

test('brotli bodies are decoded whatever settings wrote them, empty and 1-byte ones included', () => {
  for (const plain of [Buffer.alloc(0), Buffer.from('x'), text(MAX_CHUNK)]) {
    for (const quality of [0, 6]) {
      const body = zlib.brotliCompressSync(plain, { params: { [zlib.constants.BROTLI_PARAM_QUALITY]: quality } });
      expect(decompressChunk(CODECS.brotli, body, plain.length).equals(plain)).toBe(true);
    }
  }
});

(isCodecAvailable(CODECS.zstd) ? test : test.skip)('zstd bodies are plain zstd frames (one from the zstd CLI)', () => {
  // printf 'durable-sessions durable-sessions durable-sessions durable-sessions\n' | zstd -1 --no-check -c
  const frame = Buffer.from('28b52ffd0048cd00009064757261626c652d73657373696f6e73200a0100a7682e01', 'hex');
  const plain = Buffer.from('durable-sessions durable-sessions durable-sessions durable-sessions\n');
  expect(decompressChunk(CODECS.zstd, frame, plain.length).equals(plain)).toBe(true);
  expect(codecError(() => decompressChunk(CODECS.zstd, frame, plain.length + 1)).reason).toBe('SizeMismatch');
});

test('a brotli body that decodes to more than expected stops at the expected size', () => {
  const bomb = zlib.brotliCompressSync(Buffer.alloc(8 * 1024 * 1024));
  expect(codecError(() => decompressChunk(CODECS.brotli, bomb, 64 * KiB)).reason).toBe('SizeMismatch');
});

test('chunks over the codec limit are refused on write', () => {
  expect(() => compressChunk(Buffer.alloc(CODEC_MAX_CHUNK_SIZE + 1))).toThrow(RangeError);
});

(isCodecAvailable(CODECS.zstd) ? test.skip : test)('without zstd-napi, zstd chunks are unavailable', () => {
  expect(codecError(() => decompressChunk(CODECS.zstd, Buffer.alloc(16), 16)).reason).toBe('CodecUnavailable');
  expect(codecError(() => compressChunk(text(64 * KiB), { codec: CODECS.zstd })).reason).toBe('CodecUnavailable');
});
