/**
 * The body of a chunked checkpoint's manifest (inside its sealed object).
 *
 * Format 2: the manifest as JSON, its chunk list an array of `[chunkId, size, packId, offset, sealedLength]`.
 *
 * Format 3: the same manifest with the chunk list as a binary table, because the list is most of a manifest (one
 * entry per ~64 KiB of state) and parsing and checking it as JSON took most of the time of a rewind or a fork:
 *
 *   "DSM3" | header length u32 | header: the manifest as JSON without `chunks`, plus `packs` (the pack ids the
 *   table refers to) and `chunkCount` (n) | table, by column: n chunk ids (32 bytes each) | n sizes (u32) |
 *   n pack indexes (u32) | n offsets in the pack (u64) | n sealed lengths (u32)                    (little-endian)
 *
 * By column so that the ids convert to and from hex in one call each: per-entry calls cost more than the rest.
 *
 * Both decode to the same `{ header, chunks }`; the header is checked by the caller's schema, the chunks here.
 */

/** Where a chunk is: `[chunkId (hex), plaintext size, pack id, offset in the pack, sealed length]`. */
export type Location = [string, number, string, number, number];

/** The manifest format whose body has a binary chunk table. */
export const TABLE_FORMAT_VERSION = 3;

/** Thrown for a body that does not decode; the caller reports it as the checkpoint's corruption. */
export class ManifestBodyError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ManifestBodyError';
  }
}

const MAGIC = Buffer.from('DSM3');
const ENTRY_BYTES = 52;
const ID_BYTES = 32;
const CHUNK_ID = /^[0-9a-f]{64}$/;
const PACK_ID = /^[A-Za-z0-9._-]+$/;
const U32 = 2 ** 32;

const isCount = (n: unknown, min: number): n is number => typeof n === 'number' && Number.isSafeInteger(n) && n >= min;

/** The format-3 body of a manifest: `manifest` without its chunks as the JSON header, the chunks as the table. */
export function encodeManifestBody(manifest: { chunks: readonly Location[] } & Record<string, unknown>): Buffer {
  const { chunks, ...rest } = manifest;
  const n = chunks.length;
  const packs: string[] = [];
  const packIndex = new Map<string, number>();
  const ids: string[] = new Array<string>(n);
  const numbers = Buffer.allocUnsafe(n * (ENTRY_BYTES - ID_BYTES));
  const [sizes, indexes, offsets, lengths] = [0, 4 * n, 8 * n, 16 * n];
  for (let i = 0; i < n; i++) {
    const [id, size, packId, offset, length] = chunks[i]!;
    if (id.length !== 2 * ID_BYTES) throw new TypeError(`chunk id ${JSON.stringify(id)} is not 64 hex digits`);
    ids[i] = id;
    let index = packIndex.get(packId);
    if (index === undefined) {
      index = packs.push(packId) - 1;
      packIndex.set(packId, index);
    }
    numbers.writeUInt32LE(size, sizes + 4 * i);
    numbers.writeUInt32LE(index, indexes + 4 * i);
    numbers.writeUInt32LE(offset % U32, offsets + 8 * i);
    numbers.writeUInt32LE(Math.floor(offset / U32), offsets + 8 * i + 4);
    numbers.writeUInt32LE(length, lengths + 4 * i);
  }
  const idBytes = Buffer.from(ids.join(''), 'hex');
  // Decoding stops at the first character that is not hex: a short result names a bad id.
  if (idBytes.length !== n * ID_BYTES) throw new TypeError('a chunk id is not 64 hex digits');
  const header = Buffer.from(JSON.stringify({ ...rest, packs, chunkCount: n }));
  const prefix = Buffer.allocUnsafe(MAGIC.length + 4);
  MAGIC.copy(prefix);
  prefix.writeUInt32LE(header.length, MAGIC.length);
  return Buffer.concat([prefix, header, idBytes, numbers]);
}

/**
 * The header and chunk list of a manifest body of `formatVersion` (2 or 3).
 * @throws ManifestBodyError when the body is not JSON, its chunk list is malformed, or the table is cut or padded
 */
export function decodeManifestBody(formatVersion: number, body: Buffer): { header: unknown; chunks: Location[] } {
  if (formatVersion < TABLE_FORMAT_VERSION) {
    const json = parseJson(body.toString('utf8'));
    const chunks = (json as { chunks?: unknown } | null)?.chunks;
    if (!isLocationList(chunks)) {
      throw new ManifestBodyError(
        'chunks must be [chunkId (64 hex), size >= 0, packId, offset >= 0, sealedLength >= 1] entries',
      );
    }
    return { header: json, chunks };
  }
  if (body.length < MAGIC.length + 4 || !body.subarray(0, MAGIC.length).equals(MAGIC)) {
    throw new ManifestBodyError(`a format-${formatVersion} manifest must start with "DSM3"`);
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
  if (body.length - headerEnd !== n * ENTRY_BYTES) {
    throw new ManifestBodyError(
      `the chunk table has ${body.length - headerEnd} bytes; ${n} chunks take ${n * ENTRY_BYTES}`,
    );
  }
  const hex = body.toString('hex', headerEnd, headerEnd + n * ID_BYTES);
  const base = headerEnd + n * ID_BYTES;
  const [sizes, indexes, offsets, lengths] = [base, base + 4 * n, base + 8 * n, base + 16 * n];
  const chunks: Location[] = new Array<Location>(n);
  for (let i = 0; i < n; i++) {
    const packId = packs[body.readUInt32LE(indexes + 4 * i)] as string | undefined;
    const offset = body.readUInt32LE(offsets + 8 * i) + body.readUInt32LE(offsets + 8 * i + 4) * U32;
    const length = body.readUInt32LE(lengths + 4 * i);
    if (packId === undefined || length < 1 || !Number.isSafeInteger(offset)) {
      throw new ManifestBodyError(`chunk ${i} of the table names no pack, or an empty or impossible location`);
    }
    const id = hex.slice(2 * ID_BYTES * i, 2 * ID_BYTES * (i + 1));
    chunks[i] = [id, body.readUInt32LE(sizes + 4 * i), packId, offset, length];
  }
  return { header, chunks };
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    throw new ManifestBodyError('the manifest is not JSON');
  }
}

/**
 * Format 2's chunk list, checked by hand rather than by a zod tuple schema: a 1 GiB state lists ~13,700 chunks and
 * a tuple schema per entry cost several times the JSON.parse.
 */
function isLocationList(value: unknown): value is Location[] {
  if (!Array.isArray(value)) return false;
  for (const l of value as unknown[]) {
    if (!Array.isArray(l) || l.length !== 5) return false;
    const [id, size, packId, offset, length] = l as unknown[];
    if (typeof id !== 'string' || !CHUNK_ID.test(id) || typeof packId !== 'string' || !PACK_ID.test(packId)) {
      return false;
    }
    if (!isCount(size, 0) || !isCount(offset, 0) || !isCount(length, 1)) return false;
  }
  return true;
}
