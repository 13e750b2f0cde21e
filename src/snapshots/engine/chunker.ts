/**
 * Content-defined chunking: FastCDC as published in 2020 (Xia et al., "The Design of Fast Content-Defined Chunking
 * for Data Deduplication Based Storage Systems", IEEE TPDS 31(9)): a gear rolling hash, cut-point skipping below
 * `minSize`, normalized chunking with two masks (a harder one before `avgSize`, an easier one after, normalization
 * level 1) and "rolling two bytes each time".
 *
 * Cut points are bit-for-bit those of the Rust crate `fastcdc` (`v2020::FastCDC::new(source, min, avg, max)`): same
 * GEAR table, same MASKS, same mask selection (`round(log2(avgSize))` ± 1) and the same quirks, so chunk boundaries
 * written by this module can be reproduced by other tools. test/fixtures/chunker/ holds vectors produced by that
 * crate. Two of the crate's quirks matter to a reader:
 *
 *   - the byte that triggers a cut is the first byte of the *next* chunk: a match after hashing byte `i` cuts at `i`;
 *   - bytes are examined in pairs counted from the chunk start, and a pair is examined only when both of its bytes
 *     exist, so at the end of the input the last byte of an odd-length remainder is never a cut candidate.
 *
 * Because of the pairs, all three sizes must be even (the crate requires it too since 5.0.0: with an odd `minSize`
 * a chunk could come out one byte shorter than the minimum).
 *
 * Speed: the crate's hash is 64-bit, and JavaScript has no cheap 64-bit integers (BigInt arithmetic allocates), so the
 * hot loop is a small WebAssembly function (gear-scan.wat, assembled by scripts/build-wasm.ts into gear-scan-wasm.ts;
 * see `scan`). Everything around it — sizes, masks, pairs, streaming — stays here.
 */
import { GEAR_SCAN_WASM } from './gear-scan-wasm';

const KiB = 1024;
const MiB = 1024 * KiB;

/** Sizes of the chunks a {@link Chunker} cuts, in bytes. All three must be even; see {@link validateChunkerOptions}. */
export interface ChunkerOptions {
  /** No chunk is shorter, except the last chunk of an input. 64 B … 1 MiB. Bytes below it are never hashed. */
  readonly minSize: number;
  /** The target; picks the masks (nearest power of two counts). 256 B … 4 MiB, minSize ≤ avgSize ≤ maxSize. */
  readonly avgSize: number;
  /** No chunk is longer: a chunk without a cut point is cut here. 1 KiB … 16 MiB. */
  readonly maxSize: number;
}

/**
 * The engine's chunk sizes: 8 / 32 / 128 KiB.
 *
 * Chunking runs at the same speed whatever the size, so the size trades what an incremental checkpoint writes (a
 * changed place costs at least a chunk) against the number of chunks: manifest entries and per-chunk hashing,
 * sealing and opening. 32 KiB writes less after scattered small changes; `DS_CHUNK_KIB=64` suits states mostly
 * written whole. bench/chunker.ts and bench/engine.ts print the trade (their figures: bench/README.md, "Chunk size").
 */
export const DEFAULT_CHUNKER: ChunkerOptions = Object.freeze({
  minSize: 8 * KiB,
  avgSize: 32 * KiB,
  maxSize: 128 * KiB,
});

/** The engine's chunk sizes around another average (a power of two): a quarter of it to four times it. */
export function chunkerFor(avgSize: number): ChunkerOptions {
  const options = { minSize: avgSize / 4, avgSize, maxSize: avgSize * 4 };
  validateChunkerOptions(options);
  return options;
}

/**
 * The FastCDC gear table: entry `i` is the first 8 bytes (big-endian) of MD5 of 64 bytes of value `i`, as in the
 * C reference implementation (destor) and the `fastcdc` crate's `v2020::GEAR`.
 */
// prettier-ignore
export const GEAR: readonly bigint[] = Object.freeze([
  0x3b5d3c7d207e37dcn, 0x784d68ba91123086n, 0xcd52880f882e7298n, 0xeacf8e4e19fdcca7n,
  0xc31f385dfbd1632bn, 0x1d5f27001e25abe6n, 0x83130bde3c9ad991n, 0xc4b225676e9b7649n,
  0xaa329b29e08eb499n, 0xb67fcbd21e577d58n, 0x0027baaada2acf6bn, 0xe3ef2d5ac73c2226n,
  0x0890f24d6ed312b7n, 0xa809e036851d7c7en, 0xf0a6fe5e0013d81bn, 0x1d026304452cec14n,
  0x03864632648e248fn, 0xcdaacf3dcd92b9b4n, 0xf5e012e63c187856n, 0x8862f9d3821c00b6n,
  0xa82f7338750f6f8an, 0x1e583dc6c1cb0b6fn, 0x7a3145b69743a7f1n, 0xabb20fee404807ebn,
  0xb14b3cfe07b83a5dn, 0xb9dc27898adb9a0fn, 0x3703f5e91baa62ben, 0xcf0bb866815f7d98n,
  0x3d9867c41ea9dcd3n, 0x1be1fa65442bf22cn, 0x14300da4c55631d9n, 0xe698e9cbc6545c99n,
  0x4763107ec64e92a5n, 0xc65821fc65696a24n, 0x76196c064822f0b7n, 0x485be841f3525e01n,
  0xf652bc9c85974ff5n, 0xcad8352face9e3e9n, 0x2a6ed1dceb35e98en, 0xc6f483badc11680fn,
  0x3cfd8c17e9cf12f1n, 0x89b83c5e2ea56471n, 0xae665cfd24e392a9n, 0xec33c4e504cb8915n,
  0x3fb9b15fc9fe7451n, 0xd7fd1fd1945f2195n, 0x31ade0853443efd8n, 0x255efc9863e1e2d2n,
  0x10eab6008d5642cfn, 0x46f04863257ac804n, 0xa52dc42a789a27d3n, 0xdaaadf9ce77af565n,
  0x6b479cd53d87febbn, 0x6309e2d3f93db72fn, 0xc5738ffbaa1ff9d6n, 0x6bd57f3f25af7968n,
  0x67605486d90d0a4an, 0xe14d0b9663bfbdaen, 0xb7bbd8d816eb0414n, 0xdef8a4f16b35a116n,
  0xe7932d85aaaffed6n, 0x08161cbae90cfd48n, 0x855507beb294f08bn, 0x91234ea6ffd399b2n,
  0xad70cf4b2435f302n, 0xd289a97565bc2d27n, 0x8e558437ffca99den, 0x96d2704b7115c040n,
  0x0889bbcdfc660e41n, 0x5e0d4e67dc92128dn, 0x72a9f8917063ed97n, 0x438b69d409e016e3n,
  0xdf4fed8a5d8a4397n, 0x00f41dcf41d403f7n, 0x4814eb038e52603fn, 0x9dafbacc58e2d651n,
  0xfe2f458e4be170afn, 0x4457ec414df6a940n, 0x06e62f1451123314n, 0xbd1014d173ba92ccn,
  0xdef318e25ed57760n, 0x9fea0de9dfca8525n, 0x459de1e76c20624bn, 0xaeec189617e2d666n,
  0x126a2c06ab5a83cbn, 0xb1321532360f6132n, 0x65421503dbb40123n, 0x2d67c287ea089ab3n,
  0x6c93bff5a56bd6b6n, 0x4ffb2036cab6d98dn, 0xce7b785b1be7ad4fn, 0xedb42ef6189fd163n,
  0xdc905288703988f6n, 0x365f9c1d2c691884n, 0xc640583680d99bfen, 0x3cd4624c07593ec6n,
  0x7f1ea8d85d7c5805n, 0x014842d480b57149n, 0x0b649bcb5a828688n, 0xbcd5708ed79b18f0n,
  0xe987c862fbd2f2f0n, 0x982731671f0cd82cn, 0xbaf13e8b16d8c063n, 0x8ea3109cbd951bban,
  0xd141045bfb385cadn, 0x2acbc1a0af1f7d30n, 0xe6444d89df03bfdfn, 0xa18cc771b8188ff9n,
  0x9834429db01c39bbn, 0x214add07fe086a1fn, 0x8f07c19b1f6b3ff9n, 0x56a297b1bf4ffe55n,
  0x94d558e493c54fc7n, 0x40bfc24c764552cbn, 0x931a706f8a8520cbn, 0x32229d322935bd52n,
  0x2560d0f5dc4fefafn, 0x9dbcc48355969bb6n, 0x0fd81c3985c0b56an, 0xe03817e1560f2bdan,
  0xc1bb4f81d892b2d5n, 0xb0c4864f4e28d2d7n, 0x3ecc49f9d9d6c263n, 0x51307e99b52ba65en,
  0x8af2b688da84a752n, 0xf5d72523b91b20b6n, 0x6d95ff1ff4634806n, 0x562f21555458339an,
  0xc0ce47f889336346n, 0x487823e5089b40d8n, 0xe4727c7ebc6d9592n, 0x5a8f7277e94970ban,
  0xfca2f406b1c8bb50n, 0x5b1f8a95f1791070n, 0xd304af9fc9028605n, 0x5440ab7fc930e748n,
  0x312d25fbca2ab5a1n, 0x10f4a4b234a4d575n, 0x90301d55047e7473n, 0x3b6372886c61591en,
  0x293402b77c444e06n, 0x451f34a4d3e97dd7n, 0x3158d814d81bc57bn, 0x034942425b9bda69n,
  0xe2032ff9e532d9bbn, 0x62ae066b8b2179e5n, 0x9545e10c2f8d71d8n, 0x7ff7483eb2d23fc0n,
  0x00945fcebdc98d86n, 0x8764bbbe99b26ca2n, 0x1b1ec62284c0bfc3n, 0x58e0fcc4f0aa362bn,
  0x5f4abefa878d458dn, 0xfd74ac2f9607c519n, 0xa4e3fb37df8cbfa9n, 0xbf697e43cac574e5n,
  0x86f14a3f68f4cd53n, 0x24a23d076f1ce522n, 0xe725cd8048868cc8n, 0xbf3c729eb2464362n,
  0xd8f6cd57b3cc1ed8n, 0x6329e52425541577n, 0x62aa688ad5ae1ac0n, 0x0a242566269bf845n,
  0x168b1a4753aca74bn, 0xf789afefff2e7e3cn, 0x6c3362093b6fccdbn, 0x4ce8f50bd28c09b2n,
  0x006a2db95ae8aa93n, 0x975b0d623c3d1a8cn, 0x18605d3935338c5bn, 0x5bb6f6136cad3c71n,
  0x0f53a20701f8d8a6n, 0xab8c5ad2e7e93c67n, 0x40b5ac5127acaa29n, 0x8c7bf63c2075895fn,
  0x78bd9f7e014a805cn, 0xb2c9e9f4f9c8c032n, 0xefd6049827eb91f3n, 0x2be459f482c16fbdn,
  0xd92ce0c5745aaa8cn, 0x0aaa8fb298d965b9n, 0x2b37f92c6c803b15n, 0x8c54a5e94e0f0e78n,
  0x95f9b6e90c0a3032n, 0xe7939faa436c7874n, 0xd16bfe8f6a8a40c9n, 0x44982b86263fd2fan,
  0xe285fb39f984e583n, 0x779a8df72d7619d3n, 0xf2d79a8de8d5dd1en, 0xd1037354d66684e2n,
  0x004c82a4e668a8e5n, 0x31d40a7668b044e6n, 0xd70578538bd02c11n, 0xdb45431078c5f482n,
  0x977121bb7f6a51adn, 0x73d5ccbd34eff8ddn, 0xe437a07d356e17cdn, 0x47b2782043c95627n,
  0x9fb251413e41d49an, 0xccd70b60652513d3n, 0x1c95b31e8a1b49b2n, 0xcae73dfd1bcb4c1bn,
  0x34d98331b1f5b70fn, 0x784e39f22338d92fn, 0x18613d4a064df420n, 0xf1d8dae25f0bceben,
  0x33f77c15ae855efcn, 0x3c88b3b912eb109cn, 0x956a2ec96bafeea5n, 0x1aa005b5e0ad0e87n,
  0x5500d70527c4bb8en, 0xe36c57196421cc44n, 0x13c4d286cc36ee39n, 0x5654a23d818b2a81n,
  0x77b1dc13d161abdcn, 0x734f44de5f8d5eb5n, 0x60717e174a6c89a2n, 0xd47d9649266a211en,
  0x5b13a4322bb69e90n, 0xf7669609f8b5fc3cn, 0x21e6ac55bedcdac9n, 0x9b56b62b61166dean,
  0xf48f66b939797e9cn, 0x35f332f9c0e6ae9an, 0xcc733f6a9a878db0n, 0x3da161e41cc108c2n,
  0xb7d74ae535914d51n, 0x4d493b0b11d36469n, 0xce264d1dfba9741an, 0xa9d1f2dc7436dc06n,
  0x70738016604c2a27n, 0x231d36e96e93f3d5n, 0x7666881197838d19n, 0x4a2a83090aaad40cn,
  0xf1e761591668b35dn, 0x7363236497f730a7n, 0x301080e37379dd4dn, 0x502dea2971827042n,
  0xc2c5eb858f32625fn, 0x786afb9edfafbdffn, 0xdaee0d868490b2a4n, 0x617366b3268609f6n,
  0xae0e35a0fe46173en, 0xd1a07de93e824f11n, 0x079b8b115ea4cca8n, 0x93a99274558faebbn,
  0xfb1e6e22e08a03b3n, 0xea635fdba3698dd0n, 0xcf53659328503a5cn, 0xcde3b31e6fd5d780n,
  0x8e3e4221d3614413n, 0xef14d0d86bf1a22cn, 0xe1d830d3f16c5ddbn, 0xaabd2b2a451504e1n,
]);

/**
 * The `fastcdc` crate's `v2020::MASKS`, indexed by bit count (entries 0..5 unused): a mask with `n` bits set matches
 * one position in 2^n. Level-1 normalization uses `MASKS[bits + 1]` before `avgSize` and `MASKS[bits - 1]` after it,
 * where `bits = round(log2(avgSize))`. Every mask is below 2^48.
 */
// prettier-ignore
export const MASKS: readonly bigint[] = Object.freeze([
  0n, 0n, 0n, 0n, 0n,
  0x0000000001804110n, // unused (normalization level 3)
  0x0000000001803110n, // 64 B
  0x0000000018035100n, // 128 B
  0x0000001800035300n, // 256 B
  0x0000019000353000n, // 512 B
  0x0000590003530000n, // 1 KiB
  0x0000d90003530000n, // 2 KiB
  0x0000d90103530000n, // 4 KiB
  0x0000d90303530000n, // 8 KiB
  0x0000d90313530000n, // 16 KiB
  0x0000d90f03530000n, // 32 KiB
  0x0000d90303537000n, // 64 KiB
  0x0000d90703537000n, // 128 KiB
  0x0000d90707537000n, // 256 KiB
  0x0000d91707537000n, // 512 KiB
  0x0000d91747537000n, // 1 MiB
  0x0000d91767537000n, // 2 MiB
  0x0000d93767537000n, // 4 MiB
  0x0000d93777537000n, // 8 MiB
  0x0000d93777577000n, // 16 MiB
  0x0000db3777577000n, // unused (normalization level 3)
]);

/** Below this, a leftover piece of input is copied into the chunker's own buffer instead of being referenced. */
const COPY_BELOW = 4 * KiB;

/** Options checked and turned into the masks the scan uses. */
interface Resolved {
  readonly minSize: number;
  readonly avgSize: number;
  readonly maxSize: number;
  /** Mask before avgSize (harder: bits + 1). */
  readonly smallMask: bigint;
  /** Mask from avgSize on (easier: bits - 1). */
  readonly largeMask: bigint;
}

/** The rolling hash between two calls of `scan` over one chunk (reset to 0 at each chunk start). */
interface HashState {
  hash: bigint;
}

function checkSize(name: keyof ChunkerOptions, value: unknown, min: number, max: number): void {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max || value % 2 !== 0) {
    throw new RangeError(
      `ChunkerOptions.${name} must be an even integer from ${min} to ${max} bytes, got ${String(value)}`,
    );
  }
}

/**
 * Throws a RangeError unless `options` are sizes this chunker (and the `fastcdc` crate) supports: even integers,
 * minSize 64 B … 1 MiB, avgSize 256 B … 4 MiB, maxSize 1 KiB … 16 MiB, and minSize ≤ avgSize ≤ maxSize.
 */
export function validateChunkerOptions(options: ChunkerOptions): void {
  checkSize('minSize', options.minSize, 64, 1 * MiB);
  checkSize('avgSize', options.avgSize, 256, 4 * MiB);
  checkSize('maxSize', options.maxSize, 1 * KiB, 16 * MiB);
  if (options.avgSize < options.minSize || options.avgSize > options.maxSize) {
    const { minSize, avgSize, maxSize } = options;
    throw new RangeError(
      `ChunkerOptions.avgSize (${avgSize}) must be between minSize (${minSize}) and maxSize (${maxSize})`,
    );
  }
}

function resolve(options: ChunkerOptions): Resolved {
  validateChunkerOptions(options);
  const { minSize, avgSize, maxSize } = options;
  // The crate's logarithm2: log2 rounded to the nearest integer, so 48 KiB picks the 64 KiB masks.
  const bits = Math.round(Math.log2(avgSize));
  return {
    minSize,
    avgSize,
    maxSize,
    smallMask: MASKS[bits + 1]!,
    largeMask: MASKS[bits - 1]!,
  };
}

/**
 * The gear-hash scan runs in WebAssembly (gear-scan.wat): 64-bit arithmetic is native there, where JavaScript had to
 * keep the 48 bits the masks see in two 32-bit halves (bench/chunker.ts prints what it chunks at). Bytes are copied
 * into its memory a block at a time, so a scan that stops early copies little.
 */
const WASM_DATA = 2048;
const WASM_BLOCK = 64 * KiB;
/** The part of the WebAssembly API used here (the project's type libraries do not declare it). */
interface WasmApi {
  Module: new (bytes: Uint8Array) => object;
  Instance: new (module: object, imports: object) => { exports: unknown };
}
const gearScan = (() => {
  const wasm = (globalThis as unknown as { WebAssembly: WasmApi }).WebAssembly;
  const instance = new wasm.Instance(new wasm.Module(Buffer.from(GEAR_SCAN_WASM, 'base64')), {});
  // (Not named `exports`: compiled to CommonJS, that name would hide the module's own exports, GEAR among them.)
  const api = instance.exports as {
    memory: { buffer: ArrayBuffer };
    hash: { value: bigint };
    scan: (from: number, to: number, mask: bigint) => number;
  };
  if (api.memory.buffer.byteLength < WASM_DATA + WASM_BLOCK) throw new Error('gear-scan memory is too small');
  new BigUint64Array(api.memory.buffer, 0, GEAR.length).set(GEAR);
  return { ...api, heap: new Uint8Array(api.memory.buffer) };
})();

/**
 * Rolls the gear hash over `src[from..to)` and returns the index of the first byte after which
 * `(hash & mask) == 0`, or -1 with the hash saved in `state` so that a later call can continue it.
 *
 * The crate computes `hash = (hash << 1) + GEAR[byte]` in 64 bits, as the WebAssembly function does.
 */
function scan(src: Uint8Array, from: number, to: number, mask: bigint, state: HashState): number {
  gearScan.hash.value = state.hash;
  for (let at = from; at < to;) {
    const n = Math.min(WASM_BLOCK, to - at);
    gearScan.heap.set(src.subarray(at, at + n), WASM_DATA);
    const found = gearScan.scan(WASM_DATA, WASM_DATA + n, mask);
    if (found >= 0) return at + found - WASM_DATA;
    at += n;
  }
  state.hash = gearScan.hash.value;
  return -1;
}

/** Hash state for the synchronous entry points: they never yield mid-scan, so one is enough. */
const SCRATCH: HashState = { hash: 0n };

/** The crate's `cut_gear` over `data[offset..end)`, `end` being the end of the input. */
function cut(data: Uint8Array, offset: number, end: number, p: Resolved): number {
  const remaining = end - offset;
  if (remaining <= p.minSize) return end;
  // Pairs are examined only when both bytes exist: up to maxSize (even), or to the last whole pair of the input.
  const scanEnd = offset + (remaining > p.maxSize ? p.maxSize : remaining - (remaining & 1));
  SCRATCH.hash = 0n;
  let i = offset + p.minSize;
  const center = offset + p.avgSize;
  if (i < center) {
    const stop = center < scanEnd ? center : scanEnd;
    const found = scan(data, i, stop, p.smallMask, SCRATCH);
    if (found >= 0) return found;
    i = stop;
  }
  if (i < scanEnd) {
    const found = scan(data, i, scanEnd, p.largeMask, SCRATCH);
    if (found >= 0) return found;
  }
  return remaining > p.maxSize ? offset + p.maxSize : end;
}

/**
 * The FastCDC cut point of the chunk that starts at `offset`: the index where the next chunk starts, in
 * `(offset, end]`. `end` is taken as the end of the input, so the answer is final only if `end - offset >= maxSize`
 * or no more input follows `end`; a streaming caller must wait for that ({@link Chunker.chunks} does).
 */
export function cutPoint(
  data: Uint8Array,
  offset: number,
  end: number,
  options: ChunkerOptions = DEFAULT_CHUNKER,
): number {
  if (!Number.isInteger(offset) || !Number.isInteger(end) || offset < 0 || offset >= end || end > data.length) {
    throw new RangeError(`cutPoint: need 0 <= offset < end <= ${data.length}, got offset ${offset}, end ${end}`);
  }
  return cut(data, offset, end, resolve(options));
}

function asBuffer(piece: unknown): Buffer {
  if (Buffer.isBuffer(piece)) return piece;
  if (piece instanceof Uint8Array) return Buffer.from(piece.buffer, piece.byteOffset, piece.byteLength);
  throw new TypeError(
    `Chunker: input pieces must be Buffers or Uint8Arrays, got ${typeof piece} (is an encoding set?)`,
  );
}

/**
 * Splits bytes into content-defined chunks (FastCDC 2020, see the module doc). One instance may serve any number of
 * inputs, one after the other or interleaved: it keeps no state between calls.
 *
 * @example
 * const chunker = new Chunker();
 * for await (const chunk of chunker.chunks(fs.createReadStream(path))) store(sha256(chunk), chunk);
 */
export class Chunker {
  readonly options: ChunkerOptions;
  private readonly resolved: Resolved;

  /** @throws RangeError when the options are not supported (see {@link validateChunkerOptions}). */
  constructor(options: ChunkerOptions = DEFAULT_CHUNKER) {
    this.resolved = resolve(options);
    this.options = Object.freeze({ minSize: options.minSize, avgSize: options.avgSize, maxSize: options.maxSize });
  }

  /** Chunks of a buffer already in memory, as views into it (no copies). */
  *split(data: Uint8Array): Generator<Buffer, void, undefined> {
    const buffer = asBuffer(data);
    for (let offset = 0; offset < buffer.length;) {
      const next = cut(buffer, offset, buffer.length, this.resolved);
      yield buffer.subarray(offset, next);
      offset = next;
    }
  }

  /**
   * Chunks of a stream, cut exactly where {@link split} would cut the concatenated input, however it is divided
   * into pieces. Nothing is yielded for an empty input.
   *
   * Memory: it holds the part of the current chunk received so far (under `maxSize`) and the current piece. Each
   * byte is hashed once; no byte is copied more than twice (once when a piece smaller than 4 KiB must be kept, once
   * when a chunk spanning pieces is joined).
   *
   * A chunk that lies inside one input piece is yielded as a view into that piece (no copy), so pieces must not be
   * modified after they are handed over (fs and net streams never do that); every other chunk is a fresh Buffer.
   * Consumers may keep chunks as long as they like.
   */
  async *chunks(source: AsyncIterable<Uint8Array>): AsyncGenerator<Buffer, void, undefined> {
    const { minSize, avgSize, maxSize, smallMask, largeMask } = this.resolved;
    const state: HashState = { hash: 0n };
    // The current chunk so far: views into earlier pieces and into `staging` (own copies of small leftovers).
    let parts: Buffer[] = [];
    let held = 0;
    let staging: Buffer | undefined;
    let staged = 0;
    // Chunk-relative position of the next byte to hash. It trails `held` by one byte when the input so far ended in
    // the middle of a pair (the crate only examines whole pairs); that byte is the last byte of `parts`.
    let scanned = minSize;

    const join = (tail: Buffer, length: number): Buffer => {
      if (parts.length === 0) return tail;
      const only = parts[0]!;
      if (parts.length === 1 && tail.length === 0 && only.buffer !== staging?.buffer) return only;
      if (tail.length > 0) parts.push(tail);
      return Buffer.concat(parts, length);
    };

    for await (const input of source) {
      const piece = asBuffer(input);
      const size = piece.length;
      let at = 0; // start of the unconsumed part of `piece`
      while (at < size) {
        const available = held + size - at;
        const limit = available >= maxSize ? maxSize : available - (available & 1);
        let next = -1; // chunk-relative cut point, once found
        if (scanned < held && scanned < limit) {
          // The pending byte (see `scanned`): the piece just received completes its pair.
          const last = parts[parts.length - 1]!;
          const mask = scanned < avgSize ? smallMask : largeMask;
          if (scan(last, last.length - 1, last.length, mask, state) >= 0) next = scanned;
          scanned++;
        }
        const base = at - held; // piece index = base + chunk-relative position
        if (next < 0 && scanned < limit && scanned < avgSize) {
          const stop = avgSize < limit ? avgSize : limit;
          const found = scan(piece, base + scanned, base + stop, smallMask, state);
          if (found >= 0) next = found - base;
          else scanned = stop;
        }
        if (next < 0 && scanned < limit) {
          const found = scan(piece, base + scanned, base + limit, largeMask, state);
          if (found >= 0) next = found - base;
          else scanned = limit;
        }
        if (next < 0) {
          if (limit < maxSize) {
            // No cut yet and the chunk may still grow: keep the rest of the piece and wait for more input.
            const rest = piece.subarray(at);
            if (rest.length >= COPY_BELOW) {
              parts.push(rest);
            } else {
              staging ??= Buffer.allocUnsafeSlow(maxSize);
              rest.copy(staging, staged);
              const last = parts[parts.length - 1];
              if (
                last !== undefined &&
                last.buffer === staging.buffer &&
                last.byteOffset + last.length === staging.byteOffset + staged
              ) {
                parts[parts.length - 1] = staging.subarray(last.byteOffset - staging.byteOffset, staged + rest.length);
              } else {
                parts.push(staging.subarray(staged, staged + rest.length));
              }
              staged += rest.length;
            }
            held = available;
            break;
          }
          next = maxSize;
        }
        if (next >= held) {
          yield join(piece.subarray(at, base + next), next);
          at = base + next;
          parts = [];
          held = 0;
        } else {
          // The cut fell on the pending byte: it starts the next chunk. Copy it out, `staging` is reused.
          const last = parts[parts.length - 1]!;
          const carried = Buffer.from(last.subarray(last.length - 1));
          parts[parts.length - 1] = last.subarray(0, last.length - 1);
          yield join(piece.subarray(0, 0), next);
          parts = [carried];
          held = 1;
        }
        staged = 0;
        scanned = minSize;
        state.hash = 0n;
      }
    }
    if (held > 0) yield join(Buffer.alloc(0), held);
  }
}
