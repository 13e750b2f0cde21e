/**
 * Chunk codecs of the snapshot engine: how one content-defined chunk (16 KiB – 256 KiB of plaintext) is compressed
 * before it is encrypted, and decompressed after it is decrypted.
 *
 * The default is Zstandard level 1 when the `zstd-napi` binding is installed, Brotli quality 1 (node:zlib) otherwise:
 * on chunk-sized inputs zstd-1 is the faster of the two both ways, at about the same ratio (`npx tsx bench/codec.ts`
 * prints both; bench/README.md, "Codecs"). A chunk is stored as is
 * (`none`) unless compression saves at least 1/16 of it, and chunks are probed first (see `looksIncompressible`) so
 * that random or already-compressed data is not run through a compressor at all.
 *
 * Everything here is synchronous (a chunk takes milliseconds at worst), and the codec contexts are per-thread state.
 * More cores are used by running the whole chunk pipeline (hash, compress, encrypt) on worker threads, each with its
 * own copy of this module (chunk-pool.ts): posting a single chunk to a worker costs more than probing an
 * incompressible one, so a pool for this call alone would gain nothing.
 */
import { createRequire } from 'node:module';
import * as zlib from 'node:zlib';
import { DurableSessionsError } from '../../domain/errors';

/**
 * Codec ids, stored as a u8 in every chunk header. They are part of the on-disk format: never renumber or reuse one;
 * a new codec gets a new id.
 */
export const CODECS = {
  /** The plaintext as is. */
  none: 0,
  /** One Brotli stream (RFC 7932), written at quality 1 with a 256 KiB window. node:zlib: always available. */
  brotli: 1,
  /** One Zstandard frame (RFC 8878) with the content size in its header, written at level 1. Needs `zstd-napi`. */
  zstd: 2,
} as const;

export type CodecName = keyof typeof CODECS;
export type CodecId = (typeof CODECS)[CodecName];

const CODEC_NAMES: Partial<Record<number, CodecName>> = Object.fromEntries(
  Object.entries(CODECS).map(([name, id]) => [id, name as CodecName]),
);

export interface CompressedChunk {
  codec: CodecId;
  /** The body to encrypt and store; for `none`, the plaintext buffer itself (not a copy). */
  data: Buffer;
}

interface CompressOptions {
  /** Compress with this codec instead of the default (still stored as `none` when it does not pay). */
  codec?: CodecId;
  /**
   * The caller uses the result before the next call on this thread: a zstd result may then be a view of the reused
   * scratch buffer instead of a copy.
   */
  transient?: boolean;
  /**
   * The chunk before this one was stored as is: probe 2 slices (its first and last bytes) instead of PROBE_SLICES.
   * Incompressible data comes in runs (a random or compressed file, a media file), and measuring 8 slices of each of
   * its chunks cost half as much as encrypting the chunk; a run of compressible data ends the shortcut at its first
   * chunk, which is probed whole again after it.
   */
  afterIncompressible?: boolean;
}

/** Why a chunk body could not be decoded: the closed set of `ChunkCodecError.reason` values. */
export type ChunkCodecFailure =
  /** The codec id is not one this version knows. */
  | 'UnknownCodec'
  /** The codec id is known, but its implementation is not installed on this machine. */
  | 'CodecUnavailable'
  /** The body decodes (or claims to decode) to a size other than the chunk header's. */
  | 'SizeMismatch'
  /** The body is not a valid stream of its codec. */
  | 'Corrupt';

/** Thrown when a chunk body cannot be decoded into the expected plaintext: unknown codec, corrupt body, wrong size. */
export class ChunkCodecError extends DurableSessionsError {
  readonly code: ChunkCodecFailure;
  constructor(
    message: string,
    readonly reason: ChunkCodecFailure,
    /** The codec id from the chunk header (may be one that is not in `CODECS`). */
    readonly codec: number,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.code = reason;
  }
}

/**
 * The largest plaintext this module encodes or decodes: far above the chunker's 256 KiB maximum, it bounds what a
 * corrupt or hostile header can make `decompressChunk` allocate.
 */
export const CODEC_MAX_CHUNK_SIZE = 16 * 1024 * 1024;

/** A chunk is compressed only if that saves at least 1/16 of its size; otherwise storing it as is costs less to read. */
const MIN_SAVING_DIVISOR = 16;
/** Chunks at least this large are probed before being compressed whole. */
const PROBE_MIN_SIZE = 16 * 1024;
/**
 * The probe measures the byte entropy of PROBE_SLICES slices of PROBE_SLICE_SIZE bytes, evenly spaced so that a chunk
 * spanning several files is sampled across all of them. A chunk is compressed if any slice looks compressible.
 * Measuring is a few thousand array operations a chunk; compressing the same 2 KiB with Brotli, as the probe used to,
 * also sets up an encoder per chunk, which cost more than sealing the chunk.
 */
const PROBE_SLICES = 8;
const PROBE_SLICE_SIZE = 256;
/**
 * Bits per byte below which a slice counts as compressible. Uniformly random bytes have 8 bits, estimated a little
 * lower on 256-byte samples (bias of small samples), still well above this; text, base64 (6 bits at most) and hex (4)
 * are below it. codec.test.ts checks both sides. Missed: data whose bytes are evenly spread but repeat at a distance (a
 * random block copied twice in one chunk), stored uncompressed.
 */
const PROBE_MAX_BITS = 6.5;

const ZSTD_LEVEL = 1;
const BROTLI_QUALITY = 1;
/** 2^18 = 256 KiB, the largest chunk: a larger window finds nothing more and makes every decoder allocate more. */
const BROTLI_LGWIN = 18;

/** The part of `zstd-napi/binding` (thin wrappers of libzstd's ZSTD_* functions) this module uses. */
interface ZstdBinding {
  CCtx: new () => { compress(dst: Uint8Array, src: Uint8Array, level: number): number };
  DCtx: new () => { decompress(dst: Uint8Array, src: Uint8Array): number };
  compressBound(size: number): number;
  getFrameContentSize(frame: Uint8Array): number | null;
}

interface Zstd {
  binding: ZstdBinding;
  cctx: InstanceType<ZstdBinding['CCtx']>;
  dctx: InstanceType<ZstdBinding['DCtx']>;
  /** Compression output, reused across calls (compressChunk copies the bytes out). */
  scratch: Buffer;
}

let zstdState: Zstd | null | undefined;

/**
 * The zstd binding and this thread's contexts, or null when `zstd-napi` is not installed. Loaded on first use and
 * not imported statically so that the module (and every chunk that is not zstd) works without the package. One
 * context of each kind per thread, reused rather than made per chunk; calls never interleave (synchronous).
 */
function zstd(): Zstd | null {
  if (zstdState === undefined) {
    try {
      const binding = createRequire(__filename)('zstd-napi/binding') as ZstdBinding;
      zstdState = {
        binding,
        cctx: new binding.CCtx(),
        dctx: new binding.DCtx(),
        scratch: Buffer.allocUnsafe(binding.compressBound(256 * 1024)),
      };
    } catch {
      zstdState = null;
    }
  }
  return zstdState;
}

/** Whether this machine can compress and decompress `codec`. */
export function isCodecAvailable(codec: CodecId): boolean {
  return codec !== CODECS.zstd || zstd() !== null;
}

/** The codec `compressChunk` uses without options: zstd when its binding is installed, brotli otherwise. */
export function defaultCodec(): CodecId {
  return isCodecAvailable(CODECS.zstd) ? CODECS.zstd : CODECS.brotli;
}

/**
 * Compresses `src` with `codec` (not `none`). The result may be a view of a scratch buffer, valid until the next call:
 * callers that keep it copy it.
 */
function encode(codec: CodecId, src: Buffer): Buffer {
  switch (codec) {
    case CODECS.zstd: {
      const z = zstd();
      if (!z) throw new ChunkCodecError('zstd is not installed (package zstd-napi)', 'CodecUnavailable', codec);
      const bound = z.binding.compressBound(src.length);
      if (z.scratch.length < bound) z.scratch = Buffer.allocUnsafe(bound);
      return z.scratch.subarray(0, z.cctx.compress(z.scratch, src, ZSTD_LEVEL));
    }
    case CODECS.brotli:
      return zlib.brotliCompressSync(src, {
        params: {
          [zlib.constants.BROTLI_PARAM_QUALITY]: BROTLI_QUALITY,
          [zlib.constants.BROTLI_PARAM_LGWIN]: BROTLI_LGWIN,
          [zlib.constants.BROTLI_PARAM_SIZE_HINT]: src.length,
        },
      });
    case CODECS.none:
      return src;
  }
}

const histogram = new Uint16Array(256);
/** log2 of 1..PROBE_SLICE_SIZE, so that the entropy of a slice costs no Math.log2 call per symbol. */
const LOG2 = Float64Array.from({ length: PROBE_SLICE_SIZE + 1 }, (_, n) => (n === 0 ? 0 : Math.log2(n)));

/** True when no sampled slice of `plain` (`slices` of them) measures under PROBE_MAX_BITS of entropy per byte. */
function looksIncompressible(plain: Buffer, slices: number): boolean {
  const step = Math.floor((plain.length - PROBE_SLICE_SIZE) / (slices - 1));
  for (let i = 0; i < slices; i++) {
    histogram.fill(0);
    const start = i * step;
    for (let j = start; j < start + PROBE_SLICE_SIZE; j++) histogram[plain[j]!]!++;
    // H = log2(n) - (1/n) Σ c·log2(c), for n bytes with counts c.
    let sum = 0;
    for (let symbol = 0; symbol < 256; symbol++) sum += histogram[symbol]! * LOG2[histogram[symbol]!]!;
    if (LOG2[PROBE_SLICE_SIZE]! - sum / PROBE_SLICE_SIZE < PROBE_MAX_BITS) return false;
  }
  return true;
}

/**
 * Compresses one chunk with the default codec (or `options.codec`), or returns it as is, as `none`, when compression
 * would not save at least 1/16 of its size. Throws a RangeError for a chunk over CODEC_MAX_CHUNK_SIZE.
 */
export function compressChunk(plain: Buffer, options: CompressOptions = {}): CompressedChunk {
  if (plain.length > CODEC_MAX_CHUNK_SIZE) {
    throw new RangeError(`chunk of ${plain.length} bytes is over the codec limit of ${CODEC_MAX_CHUNK_SIZE}`);
  }
  const codec = options.codec ?? defaultCodec();
  const stored: CompressedChunk = { codec: CODECS.none, data: plain };
  if (codec === CODECS.none) return stored;
  if (!(codec in CODEC_NAMES)) throw new ChunkCodecError(`unknown codec id ${codec}`, 'UnknownCodec', codec);
  if (plain.length >= PROBE_MIN_SIZE && looksIncompressible(plain, options.afterIncompressible ? 2 : PROBE_SLICES)) {
    return stored;
  }
  const compressed = encode(codec, plain);
  if (compressed.length > plain.length - Math.ceil(plain.length / MIN_SAVING_DIVISOR)) return stored;
  // zstd's output is a view of the reused scratch buffer: copied out unless the caller uses it at once.
  return { codec, data: codec === CODECS.zstd && !options.transient ? Buffer.from(compressed) : compressed };
}

/**
 * Decodes a chunk body written by `compressChunk` back into its `expectedSize` bytes of plaintext (the size from the
 * chunk header). For `none`, returns `data` itself. Throws ChunkCodecError for an unknown or unavailable codec, a
 * body that is not a valid stream, or one that decodes to any other size; never allocates more than `expectedSize`.
 */
export function decompressChunk(codec: number, data: Buffer, expectedSize: number): Buffer {
  const name = CODEC_NAMES[codec];
  if (name === undefined) throw new ChunkCodecError(`unknown codec id ${codec}`, 'UnknownCodec', codec);
  if (!Number.isSafeInteger(expectedSize) || expectedSize < 0 || expectedSize > CODEC_MAX_CHUNK_SIZE) {
    throw new ChunkCodecError(`invalid expected chunk size ${expectedSize}`, 'SizeMismatch', codec);
  }
  const plain = decode(CODECS[name], data, expectedSize);
  if (plain.length !== expectedSize) {
    throw new ChunkCodecError(
      `${name} chunk decoded to ${plain.length} bytes, expected ${expectedSize}`,
      'SizeMismatch',
      codec,
    );
  }
  return plain;
}

function decode(codec: CodecId, data: Buffer, expectedSize: number): Buffer {
  switch (codec) {
    case CODECS.none:
      return data;
    case CODECS.brotli:
      try {
        // maxOutputLength bounds the work and memory a corrupt stream can cause (Node's minimum is 1).
        // One output buffer a byte larger than the chunk, so the decoder never fills it and starts another: one
        // allocation and no concatenation of 16 KiB pieces (the default chunkSize).
        return zlib.brotliDecompressSync(data, {
          maxOutputLength: Math.max(1, expectedSize),
          chunkSize: Math.max(zlib.constants.Z_MIN_CHUNK, expectedSize + 1),
        });
      } catch (err) {
        if ((err as { code?: unknown }).code === 'ERR_BUFFER_TOO_LARGE') {
          throw new ChunkCodecError(`brotli chunk decodes to more than ${expectedSize} bytes`, 'SizeMismatch', codec, {
            cause: err,
          });
        }
        throw new ChunkCodecError('corrupt brotli chunk', 'Corrupt', codec, { cause: err });
      }
    case CODECS.zstd: {
      const z = zstd();
      if (!z) throw new ChunkCodecError('zstd is not installed (package zstd-napi)', 'CodecUnavailable', codec);
      let declared: number | null;
      try {
        declared = z.binding.getFrameContentSize(data);
      } catch (err) {
        throw new ChunkCodecError('corrupt zstd chunk: bad frame header', 'Corrupt', codec, { cause: err });
      }
      if (declared !== null && declared !== expectedSize) {
        throw new ChunkCodecError(
          `zstd chunk declares ${declared} bytes, expected ${expectedSize}`,
          'SizeMismatch',
          codec,
        );
      }
      // Decoding into a buffer of exactly expectedSize: libzstd fails rather than write past it.
      const plain = Buffer.allocUnsafe(expectedSize);
      let written: number;
      try {
        written = z.dctx.decompress(plain, data);
      } catch (err) {
        throw new ChunkCodecError('corrupt zstd chunk', 'Corrupt', codec, { cause: err });
      }
      return plain.subarray(0, written);
    }
  }
}
