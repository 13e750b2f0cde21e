/**
 * The per-chunk work of the engine — id, compress, seal on the way in; open, decompress, check on the way out —
 * over batches of chunks. Pure functions of their inputs, so they run the same on a worker thread (chunk-pool.ts)
 * and on the calling thread.
 *
 * Batches, not single chunks, cross the thread boundary: a message costs about what sealing a chunk costs, so one
 * message per chunk would cost the main thread a good part of the work it hands off. A seal
 * batch's sealed objects are appended to a pack with one (vectored) write.
 */
import { createHash, createHmac } from 'node:crypto';
import { messageOf } from '../../errors';
import { ChunkCodecError, CODECS, compressChunk, decompressChunk, type CodecId } from './codec';
import { NONCE_BYTES, ObjectSealer, openObject } from './crypto';
import { nativeSealer, SEAL_IN_PLACE, type NativeSealer } from './native-sealer';
import { type CryptoFailureReason, SnapshotTamperedError } from '../errors';

/** The lineage key material a batch needs. */
export interface ChunkKey {
  dataKeyId: string;
  key: Buffer;
  /** HMAC key of chunk ids (derived from the data key). */
  chunkIdKey: Buffer;
}

/** Everything about a write or a read that is the same for all its chunks. */
export interface ChunkContext {
  tenant: string;
  lineage: string;
  formatVersion: number;
  /** null: plaintext mode. */
  key: ChunkKey | null;
}

/** A seal context also knows which chunks are stored already (the parent checkpoint's): those are not sealed. */
export interface SealContext extends ChunkContext {
  known: readonly string[];
  /** The codec new chunks are compressed with; this machine's default (`defaultCodec`) when absent. */
  codec?: CodecId;
}

/** A chunk of a seal batch: either stored already (only its id is returned) or sealed into the segment. */
export type SealedEntry =
  { id: string; size: number; known: true } | { id: string; size: number; at: number; length: number };

export interface SealBatchResult {
  /**
   * The sealed objects of the new chunks, back to back (`at`/`length` of each entry locate it): a view of one buffer,
   * the caller's afterwards (it may come back as the `spare` of a later batch).
   */
  sealed: Buffer;
  entries: SealedEntry[];
}

/** Chunk id: keyed with the lineage's key, so equal content in two lineages (or tenants) cannot be told apart by id. */
export function chunkId(chunk: Buffer, key: ChunkKey | null): string {
  return (key ? createHmac('sha256', key.chunkIdKey) : createHash('sha256')).update(chunk).digest('hex');
}

/**
 * A batch buffer in memory both threads see: posting it to a pool thread and back moves no bytes and makes no new
 * ArrayBuffer on either side. (A transferred ArrayBuffer arrives as a new one, and each counts as megabytes of fresh
 * external memory, which made V8 run a full collection every few batches.)
 */
export function shared(size: number): Buffer {
  return Buffer.from(new SharedArrayBuffer(size));
}

/** Output buffers are allocated in steps of this size, so that one fits most batches and can be reused. */
const OUTPUT_STEP = 256 * 1024;

/**
 * Ids, compresses and seals the chunks of `data` (cut at `sizes`) into one buffer: `spare` when it is large enough
 * (the output of an earlier batch, written out since), else a new one. Chunks whose id is in `known` are skipped,
 * and every id sealed here is added to it, so a chunk repeated within a write is sealed once per known-set.
 */
export function sealBatch(
  context: ChunkContext & { codec?: CodecId },
  known: Set<string>,
  data: Buffer,
  sizes: readonly number[],
  spare: Buffer | null = null,
): SealBatchResult {
  const native = context.key ? nativeSealer() : null;
  if (native && context.key)
    return sealBatchNative(native, { ...context, key: context.key }, known, data, sizes, spare);
  const entries: SealedEntry[] = [];
  const options = { transient: true, ...(context.codec !== undefined ? { codec: context.codec } : {}) };
  let out: Buffer | null = null;
  let sealer: ObjectSealer | null = null;
  // Whether the last chunk sealed was stored as is: the next one is probed less (compressChunk).
  let stored = false;
  const probeLess = { ...options, afterIncompressible: true };
  let offset = 0;
  let length = 0;
  for (let i = 0; i < sizes.length; i++) {
    const size = sizes[i]!;
    const chunk = data.subarray(offset, offset + size);
    offset += size;
    const id = chunkId(chunk, context.key);
    if (known.has(id)) {
      entries.push({ id, size, known: true });
      continue;
    }
    known.add(id);
    if (!sealer || !out) ({ sealer, out } = batchOutput(context, id, data.length, sizes.length, spare));
    const { codec, data: body } = compressChunk(chunk, stored ? probeLess : options);
    stored = codec === CODECS.none;
    const written = sealer.sealInto(body, id, codec, out, length);
    entries.push({ id, size, at: length, length: written });
    length += written;
  }
  // (With no new chunk the spare goes back unused, for a later batch.)
  return { sealed: (out ?? spare ?? EMPTY).subarray(0, length), entries };
}

/**
 * The sealer and output of a batch, made at its first new chunk: one header for the batch, patched per chunk (ids are
 * all 64 hex digits, so every object of the batch has the same envelope around its body), and room for every chunk
 * stored as is (a compressed body is never larger), sized by the whole batch buffer, so that the outputs of one write
 * are alike and each fits any later batch.
 */
function batchOutput(
  context: ChunkContext,
  firstId: string,
  dataLength: number,
  count: number,
  spare: Buffer | null,
): { sealer: ObjectSealer; out: Buffer } {
  const sealer = new ObjectSealer(
    {
      kind: 'chunk',
      tenant: context.tenant,
      lineage: context.lineage,
      formatVersion: context.formatVersion,
      objectId: firstId,
      codec: 0,
      ...(context.key ? { dataKeyId: context.key.dataKeyId } : {}),
    },
    context.key?.key ?? null,
  );
  const room = dataLength + count * sealer.sealedLength(0);
  const out = spare && spare.length >= room ? spare : shared(Math.ceil(room / OUTPUT_STEP) * OUTPUT_STEP);
  return { sealer, out };
}

/** This thread's scratch of the native path, grown to the largest batch seen: no per-batch allocation. */
let scratch = { sizes: new Uint32Array(0), ids: Buffer.alloc(0), objects: new Uint32Array(0) };

/**
 * sealBatch with the native sealer: the ids of the whole batch in one call, then the chunks compressed and laid out
 * (prefix, nonce, and a compressed body copied in) here, then all of them sealed in one call — the same bytes, without
 * a cipher and an HMAC object per chunk. A body stored as is is encrypted straight from `data`.
 */
function sealBatchNative(
  native: NativeSealer,
  context: ChunkContext & { key: ChunkKey; codec?: CodecId },
  known: Set<string>,
  data: Buffer,
  sizes: readonly number[],
  spare: Buffer | null,
): SealBatchResult {
  const count = sizes.length;
  if (scratch.sizes.length < count) {
    scratch = { sizes: new Uint32Array(count), ids: Buffer.alloc(32 * count), objects: new Uint32Array(4 * count) };
  }
  const { ids, objects } = scratch;
  for (let i = 0; i < count; i++) scratch.sizes[i] = sizes[i]!;
  native.chunkIds(context.key.chunkIdKey, data, scratch.sizes, count, ids);
  const entries: SealedEntry[] = [];
  const options = { transient: true, ...(context.codec !== undefined ? { codec: context.codec } : {}) };
  const probeLess = { ...options, afterIncompressible: true };
  let out: Buffer | null = null;
  let sealer: ObjectSealer | null = null;
  let stored = false;
  let sealing = 0;
  let offset = 0;
  let length = 0;
  for (let i = 0; i < count; i++) {
    const size = sizes[i]!;
    const chunk = data.subarray(offset, offset + size);
    const chunkAt = offset;
    offset += size;
    const id = ids.toString('hex', 32 * i, 32 * i + 32);
    if (known.has(id)) {
      entries.push({ id, size, known: true });
      continue;
    }
    known.add(id);
    if (!sealer || !out) ({ sealer, out } = batchOutput(context, id, data.length, count, spare));
    const { codec, data: body } = compressChunk(chunk, stored ? probeLess : options);
    stored = codec === CODECS.none;
    const bodyAt = sealer.layoutInto(body.length, id, codec, out, length);
    if (bodyAt === null) throw new Error(`chunk id ${id} does not fit the batch's header`);
    const o = 4 * sealing++;
    objects[o] = length;
    objects[o + 1] = bodyAt - NONCE_BYTES - length;
    objects[o + 2] = body.length;
    if (body === chunk || (stored && body.buffer === data.buffer && body.byteOffset === data.byteOffset + chunkAt)) {
      objects[o + 3] = chunkAt;
    } else {
      body.copy(out, bodyAt); // a compressed body (in a scratch buffer the next chunk reuses)
      objects[o + 3] = SEAL_IN_PLACE;
    }
    const written = sealer.sealedLength(body.length);
    entries.push({ id, size, at: length, length: written });
    length += written;
  }
  if (out && sealing > 0) native.seal(context.key.key, data, out, objects, sealing);
  return { sealed: (out ?? spare ?? EMPTY).subarray(0, length), entries };
}

/** No bytes: the output of a batch with nothing to seal and no spare. */
export const EMPTY = Buffer.alloc(0);

/** Where a chunk to open is in a read batch, and what it must turn out to be. */
export interface OpenEntry {
  id: string;
  /** Plaintext size from the manifest. */
  size: number;
  /** Offset and length of the sealed object in the batch's buffer. */
  at: number;
  length: number;
}

/** Why a chunk of a read batch was refused; turned back into a typed error by the caller, who knows the checkpoint. */
export type OpenFailure =
  | { kind: 'sealed'; reason: Exclude<CryptoFailureReason, 'missing-key'>; message: string; id: string }
  | { kind: 'decode'; message: string; id: string }
  | { kind: 'unavailable'; message: string; id: string }
  | { kind: 'id-mismatch'; id: string }
  | { kind: 'other'; message: string; id: string };

export type OpenBatchResult = { ok: true; chunks: Buffer[] } | { ok: false; failure: OpenFailure };

/** A chunk authenticated and decrypted, not yet decompressed. */
interface OpenedBody {
  id: string;
  /** Plaintext size from the manifest. */
  size: number;
  codec: number;
  body: Buffer;
}

/**
 * Opens the sealed chunks in `sealed`: authenticates and decrypts each (AES-GCM, or the plaintext-mode digest) and
 * returns the bodies, still compressed. The first chunk that fails stops the batch: nothing of it is returned then.
 */
function openBodies(
  context: ChunkContext & { dataKeyId: string | null },
  sealed: Buffer,
  entries: readonly OpenEntry[],
): { ok: true; bodies: OpenedBody[] } | { ok: false; failure: OpenFailure } {
  const bodies: OpenedBody[] = [];
  for (const entry of entries) {
    const object = sealed.subarray(entry.at, entry.at + entry.length);
    try {
      const opened = openObject(object, () => context.key!.key, {
        kind: 'chunk',
        tenant: context.tenant,
        lineage: context.lineage,
        objectId: entry.id,
        formatVersion: context.formatVersion,
        encrypted: context.key !== null,
        ...(context.dataKeyId !== null ? { dataKeyId: context.dataKeyId } : {}),
      });
      bodies.push({ id: entry.id, size: entry.size, codec: opened.header.codec, body: opened.plaintext });
    } catch (err) {
      for (const b of bodies) if (b.body.buffer !== sealed.buffer) b.body.fill(0);
      if (err instanceof SnapshotTamperedError) {
        return { ok: false, failure: { kind: 'sealed', reason: err.reason, message: err.message, id: entry.id } };
      }
      return { ok: false, failure: { kind: 'other', message: messageOf(err), id: entry.id } };
    }
  }
  return { ok: true, bodies };
}

/**
 * Decompresses opened bodies to exactly their manifest sizes and, with `checkIds` (plaintext mode, where nothing
 * else binds the bytes to the id; with a key, GCM already did), compares each with its id. Needs no key: it may run
 * on a pool thread.
 */
function decodeBodies(bodies: readonly OpenedBody[], checkIds: boolean): OpenBatchResult {
  const chunks: Buffer[] = [];
  const refuse = (failure: OpenFailure): OpenBatchResult => {
    chunks.forEach((c, i) => c !== bodies[i]!.body && c.fill(0));
    return { ok: false, failure };
  };
  for (const { id, size, codec, body } of bodies) {
    let chunk: Buffer;
    try {
      chunk = decompressChunk(codec, body, size);
    } catch (err) {
      // A codec this machine lacks says nothing about the checkpoint: reported apart from bytes that do not decode.
      const unavailable = err instanceof ChunkCodecError && err.reason === 'CodecUnavailable';
      return refuse({ kind: unavailable ? 'unavailable' : 'decode', message: messageOf(err), id });
    }
    if (checkIds && chunkId(chunk, null) !== id) return refuse({ kind: 'id-mismatch', id });
    chunks.push(chunk);
  }
  return { ok: true, chunks };
}

/**
 * Opens the sealed chunks in `sealed` (authenticates, decompresses to exactly the manifest's size, and in plaintext
 * mode compares with the id) and returns their plaintexts, in order. The first chunk that fails stops the batch:
 * nothing of the batch is returned then. (Not concatenated: the copy and the garbage it leaves cost more than the
 * consumer's handling of 16 pieces a MiB.)
 */
export function openBatch(
  context: ChunkContext & { dataKeyId: string | null },
  sealed: Buffer,
  entries: readonly OpenEntry[],
): OpenBatchResult {
  const opened = openBodies(context, sealed, entries);
  return opened.ok ? decodeBodies(opened.bodies, context.key === null) : opened;
}
