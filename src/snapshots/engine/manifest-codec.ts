/**
 * The body of a chunked checkpoint's manifest (inside its sealed object).
 *
 * Format 2: the manifest as JSON, its chunk list an array of `[chunkId, size, packId, offset, sealedLength]`.
 *
 * Format 3: the same manifest with the chunk list as a binary table, because the list is most of a manifest (one
 * entry per chunk) and every restore, rewind, fork and incremental checkpoint loads it (the rewind and fork rows of
 * bench/engine.ts load a 1 GiB one):
 *
 *   "DSM3" | header length u32 | header: the manifest as JSON without `chunks`, plus `packs` (the pack ids the
 *   table refers to) and `chunkCount` (n) | table, by column: n chunk ids (32 bytes each) | n sizes (u32) |
 *   n pack indexes (u32) | n offsets in the pack (u64) | n sealed lengths (u32)                    (little-endian)
 *
 * By column so that the ids convert to and from hex in one call each: per-entry calls cost more than the rest.
 *
 * Both decode to the same `{ header, chunks }`; the header is checked by the caller's schema, the chunks here.
 */

import { DurableSessionsError } from '../../domain/errors';
import { TABLE_FORMAT_VERSION } from '../format';

/** Where a chunk is: `[chunkId (hex), plaintext size, pack id, offset in the pack, sealed length]`. */
export type Location = [string, number, string, number, number];

/** Thrown when a manifest body does not decode; the caller reports it as the checkpoint's corruption. */
export class ManifestBodyError extends DurableSessionsError {
  readonly code = 'ManifestBody';
}

const MAGIC = Buffer.from('DSM3');
const ENTRY_BYTES = 52;
const ID_BYTES = 32;
const CHUNK_ID = /^[0-9a-f]{64}$/;
const PACK_ID = /^[A-Za-z0-9._-]+$/;
const U32 = 2 ** 32;

const isCount = (n: unknown, min: number): n is number => typeof n === 'number' && Number.isSafeInteger(n) && n >= min;

/**
 * A format-3 chunk table as stored, checked but not decoded: what a new manifest over the same chunks (a rewind, a
 * fork) copies as it is, which spares it converting every entry twice.
 */
export interface ChunkTable {
  readonly packs: readonly string[];
  readonly count: number;
  /** The columns: ids, sizes, pack indexes, offsets, lengths. */
  readonly bytes: Buffer;
  /** Sum of the chunk sizes: the bytes of the state. */
  readonly size: number;
}

/**
 * Where each column of a table of `n` chunks starts: ids (32 bytes each), sizes (u32), pack indexes (u32), offsets
 * (u64), sealed lengths (u32).
 */
function columns(n: number): { sizes: number; indexes: number; offsets: number; lengths: number } {
  const sizes = ID_BYTES * n;
  const indexes = sizes + 4 * n;
  const offsets = indexes + 4 * n;
  return { sizes, indexes, offsets, lengths: offsets + 8 * n };
}

/** The table of `chunks`. */
export function encodeTable(chunks: readonly Location[]): ChunkTable {
  const n = chunks.length;
  const packs: string[] = [];
  const packIndex = new Map<string, number>();
  const ids: string[] = new Array<string>(n);
  const bytes = Buffer.allocUnsafe(n * ENTRY_BYTES);
  const { sizes, indexes, offsets, lengths } = columns(n);
  let size = 0;
  for (let i = 0; i < n; i++) {
    const [id, chunkSize, packId, offset, length] = chunks[i]!;
    if (id.length !== 2 * ID_BYTES) throw new TypeError(`chunk id ${JSON.stringify(id)} is not 64 hex digits`);
    ids[i] = id;
    let index = packIndex.get(packId);
    if (index === undefined) {
      index = packs.push(packId) - 1;
      packIndex.set(packId, index);
    }
    bytes.writeUInt32LE(chunkSize, sizes + 4 * i);
    bytes.writeUInt32LE(index, indexes + 4 * i);
    bytes.writeUInt32LE(offset % U32, offsets + 8 * i);
    bytes.writeUInt32LE(Math.floor(offset / U32), offsets + 8 * i + 4);
    bytes.writeUInt32LE(length, lengths + 4 * i);
    size += chunkSize;
  }
  // Decoding stops at the first character that is not hex: a short write names a bad id.
  if (bytes.write(ids.join(''), 0, 'hex') !== n * ID_BYTES) throw new TypeError('a chunk id is not 64 hex digits');
  return { packs, count: n, bytes, size };
}

/** The format-3 body of a manifest: `header` (the manifest's fields but its chunks) as JSON, then `table`. */
export function encodeManifestBody(header: Record<string, unknown>, table: ChunkTable): Buffer {
  const json = Buffer.from(JSON.stringify({ ...header, packs: table.packs, chunkCount: table.count }));
  const prefix = Buffer.allocUnsafe(MAGIC.length + 4);
  MAGIC.copy(prefix);
  prefix.writeUInt32LE(json.length, MAGIC.length);
  return Buffer.concat([prefix, json, table.bytes]);
}

/**
 * A format-3 body's header (parsed JSON, for the caller's schema) and its table, checked entry by entry (a pack
 * index in range, a sealed length of at least 1, an offset below 2^53) without converting the ids.
 * @throws ManifestBodyError when the body is not a format-3 body or an entry is malformed
 */
export function splitManifestBody(body: Buffer): { header: unknown; table: ChunkTable } {
  if (body.length < MAGIC.length + 4 || !body.subarray(0, MAGIC.length).equals(MAGIC)) {
    throw new ManifestBodyError(`a format-${TABLE_FORMAT_VERSION} manifest must start with "DSM3"`);
  }
  const headerEnd = MAGIC.length + 4 + body.readUInt32LE(MAGIC.length);
  if (headerEnd > body.length) throw new ManifestBodyError('the manifest header runs past the end of the body');
  const header = parseJson(body.toString('utf8', MAGIC.length + 4, headerEnd)) as {
    packs?: unknown;
    chunkCount?: unknown;
  } | null;
  const packs = header?.packs;
  const n = header?.chunkCount;
  if (!Array.isArray(packs) || !packs.every((p) => typeof p === 'string' && PACK_ID.test(p)) || !isCount(n, 0)) {
    throw new ManifestBodyError('the manifest header must list its packs (ids) and its chunkCount');
  }
  const bytes = body.subarray(headerEnd);
  if (bytes.length !== n * ENTRY_BYTES) {
    throw new ManifestBodyError(`the chunk table has ${bytes.length} bytes; ${n} chunks take ${n * ENTRY_BYTES}`);
  }
  const { sizes, indexes, offsets, lengths } = columns(n);
  let size = 0;
  for (let i = 0; i < n; i++) {
    const offset = bytes.readUInt32LE(offsets + 8 * i) + bytes.readUInt32LE(offsets + 8 * i + 4) * U32;
    if (
      bytes.readUInt32LE(indexes + 4 * i) >= packs.length ||
      bytes.readUInt32LE(lengths + 4 * i) < 1 ||
      offset > Number.MAX_SAFE_INTEGER
    ) {
      throw new ManifestBodyError(`chunk ${i} of the table names no pack, or an empty or impossible location`);
    }
    size += bytes.readUInt32LE(sizes + 4 * i);
  }
  return { header, table: { packs: packs as string[], count: n, bytes, size } };
}

/** The chunks of a table (checked by {@link splitManifestBody}). */
export function decodeTable(table: ChunkTable): Location[] {
  const { packs, count: n, bytes } = table;
  const hex = bytes.toString('hex', 0, n * ID_BYTES);
  const { sizes, indexes, offsets, lengths } = columns(n);
  const chunks: Location[] = new Array<Location>(n);
  for (let i = 0; i < n; i++) {
    chunks[i] = [
      hex.slice(2 * ID_BYTES * i, 2 * ID_BYTES * (i + 1)),
      bytes.readUInt32LE(sizes + 4 * i),
      packs[bytes.readUInt32LE(indexes + 4 * i)]!,
      bytes.readUInt32LE(offsets + 8 * i) + bytes.readUInt32LE(offsets + 8 * i + 4) * U32,
      bytes.readUInt32LE(lengths + 4 * i),
    ];
  }
  return chunks;
}

/** A format-2 body's header (the parsed JSON) and its checked chunk list. */
export function decodeJsonBody(body: Buffer): { header: unknown; chunks: Location[] } {
  const json = parseJson(body.toString('utf8'));
  const chunks = (json as { chunks?: unknown } | null)?.chunks;
  if (!isLocationList(chunks)) {
    throw new ManifestBodyError(
      'chunks must be [chunkId (64 hex), size >= 0, packId, offset >= 0, sealedLength >= 1] entries',
    );
  }
  return { header: json, chunks };
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    throw new ManifestBodyError('the manifest is not JSON');
  }
}

/**
 * Format 2's chunk list, checked by hand rather than by a zod tuple schema: a 1 GiB state lists tens of thousands of chunks
 * (bench/chunker.ts), and a schema parse per entry would run on every load.
 */
function isLocationList(value: unknown): value is Location[] {
  if (!Array.isArray(value)) return false;
  for (const l of value as unknown[]) {
    if (!Array.isArray(l) || l.length !== 5) return false;
    const [id, size, packId, offset, length] = l as unknown[];
    if (typeof id !== 'string' || !CHUNK_ID.test(id) || typeof packId !== 'string' || !PACK_ID.test(packId)) {
      return false;
    }
    // Sizes and lengths are 32-bit in format 3's table (a chunk is at most 16 MiB): larger ones are not chunks.
    if (!isCount(size, 0) || !isCount(offset, 0) || !isCount(length, 1) || size >= U32 || length >= U32) return false;
  }
  return true;
}
