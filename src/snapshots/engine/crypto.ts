/**
 * Sealed objects: the on-disk envelope of every chunk and manifest of the snapshot engine.
 *
 * Encrypted mode (AES-256-GCM, one random 96-bit nonce per object):
 *
 *   magic "DSO\x01" (4) | header length u16 BE (2) | header | nonce (12) | ciphertext | tag (16)
 *
 * Plaintext mode (explicitly configured, `sealPlaintextObject`):
 *
 *   magic "DSO\x01" (4) | header length u16 BE (2) | header | body | SHA-256 of everything before it (32)
 *
 * Header v1, integers big-endian, strings as u16 byte length + UTF-8:
 *
 *   flags u8 (bit 0 = encrypted, the others 0) | kind u8 | codec u8 | formatVersion u16 | body length u32 |
 *   key commitment (16; zeros in plaintext mode) | dataKeyId | tenant | lineage | objectId | sessionId ('' = none)
 *
 * In encrypted mode the magic, the length and the header are the GCM additional data, so flipping any bit of
 * them, of the nonce, of the ciphertext or of the tag fails authentication, and the header binds the object to
 * where it belongs (tenant, lineage, object id, session): a reader states what it expects and a genuine object
 * moved to another place is refused like a forged one. The key commitment (an HMAC of the data key) makes GCM
 * key-committing and lets a reader tell "wrong key" from "altered bytes".
 *
 * Plaintext mode detects accidental corruption only: anyone who can write the store can rewrite the body and
 * recompute the SHA-256. It does not detect tampering, and its binding check only catches misfiled objects.
 */
import { createCipheriv, createDecipheriv, createHash, createHmac, randomFillSync, timingSafeEqual } from 'node:crypto';
import {
  SnapshotIncompatibleError,
  SnapshotTamperedError,
  type CryptoErrorContext,
  type CryptoFailureReason,
} from '../errors';

/** AES-256: every master key and data key is 32 bytes. */
export const KEY_BYTES = 32;
export const NONCE_BYTES = 12;
export const TAG_BYTES = 16;
const DIGEST_BYTES = 32;
const COMMITMENT_BYTES = 16;
const MAGIC = Buffer.from('DSO\x01', 'latin1');
const PREFIX_BYTES = MAGIC.length + 2;
const FLAG_ENCRYPTED = 0x01;

/** Whether a sealed object says it is encrypted (its flags byte; authenticated only when it is opened). */
export function isEncryptedObject(sealed: Buffer): boolean {
  return sealed.length > PREFIX_BYTES && (sealed[PREFIX_BYTES]! & FLAG_ENCRYPTED) === FLAG_ENCRYPTED;
}
/**
 * The format version a sealed object's header claims, or null if the bytes are not a sealed object of this envelope.
 * Not authenticated until the object is opened: for telling a newer format from damage before opening it.
 */
export function claimedFormatVersion(sealed: Buffer): number | null {
  if (sealed.length < PREFIX_BYTES + 5 || !sealed.subarray(0, MAGIC.length).equals(MAGIC)) return null;
  return sealed.readUInt16BE(PREFIX_BYTES + 3);
}
/**
 * The length a sealed object's prefix claims for the whole object (header, nonce, body and trailer), or null if the
 * bytes are too short to say or are not a sealed object of this envelope. Not authenticated: for reading exactly one
 * object from the start of a file, which openObject then checks.
 */
export function sealedObjectLength(prefix: Buffer): number | null {
  if (prefix.length < PREFIX_BYTES + 9 || !prefix.subarray(0, MAGIC.length).equals(MAGIC)) return null;
  const trailer = (prefix[PREFIX_BYTES]! & FLAG_ENCRYPTED) === FLAG_ENCRYPTED ? NONCE_BYTES + TAG_BYTES : DIGEST_BYTES;
  return PREFIX_BYTES + prefix.readUInt16BE(MAGIC.length) + prefix.readUInt32BE(PREFIX_BYTES + 5) + trailer;
}
/** Plaintext bytes per cipher.update() when sealing: see sealObject. */
const UPDATE_BYTES = 256 * 1024;
const MAX_U16 = 0xffff;
const MAX_U32 = 0xffffffff;
/** flags, kind, codec, formatVersion, body length, commitment, then five u16 string lengths. */
const FIXED_HEADER_BYTES = 1 + 1 + 1 + 2 + 4 + COMMITMENT_BYTES + 5 * 2;
const COMMITMENT_LABEL = Buffer.from('durable-sessions/key-commitment/v1');
const NO_COMMITMENT = Buffer.alloc(COMMITMENT_BYTES);

/** Master key ids and data key ids: safe as file names, in env lists (no ',' or ':') and in messages. */
export const KEY_ID_PATTERN = /^[A-Za-z0-9._-]{1,64}$/;

/** Object kinds and their header codes. Append new kinds with new codes; never renumber one. */
const KIND_CODES = { chunk: 1, manifest: 2, index: 3, pack: 4, timeline: 5 } as const;
export type ObjectKind = keyof typeof KIND_CODES;
const KINDS_BY_CODE = new Map<number, ObjectKind>(
  Object.entries(KIND_CODES).map(([kind, code]) => [code, kind as ObjectKind]),
);

/** Where an object belongs. Chunks carry no sessionId (they are shared by the sessions of a lineage). */
export interface ObjectBinding {
  kind: ObjectKind;
  tenant: string;
  lineage: string;
  /** Chunk id for chunks, checkpoint id for manifests, pack id for pack headers, the index for timeline records. */
  objectId: string;
  /** Required for manifests and timeline records. */
  sessionId?: string;
}

export interface ObjectHeader extends ObjectBinding {
  /** Version of the payload's format (the engine's, not the envelope's): 0..65535. */
  formatVersion: number;
  /** Compression codec of the plaintext, 0..255; 0 = none. */
  codec: number;
  dataKeyId: string;
}

export type PlaintextObjectHeader = Omit<ObjectHeader, 'dataKeyId'>;

export type OpenedObjectHeader = (ObjectHeader & { encrypted: true }) | (PlaintextObjectHeader & { encrypted: false });

/** What the reader expects the object to be. Every field must match the header, else the object is refused. */
export interface ExpectedBinding extends ObjectBinding {
  formatVersion: number | readonly number[];
  /** Whether the object must be encrypted. A mismatch either way is refused (no silent downgrade to plaintext). */
  encrypted: boolean;
  /**
   * The data key the object must be sealed under, when the reader knows it (e.g. from its manifest). Without it,
   * an altered data key id in a header sends `keyFor` after a key that does not exist: KeyUnavailableError
   * instead of SnapshotTamperedError (still no plaintext). Ignored for plaintext objects, which have no key.
   */
  dataKeyId?: string;
}

export interface OpenedObject {
  header: OpenedObjectHeader;
  /** In plaintext mode a view into the sealed buffer (no copy); in encrypted mode a fresh buffer. */
  plaintext: Buffer;
}

const commitments = new WeakMap<Buffer, { key: Buffer; commitment: Buffer }>();

/**
 * A 16-byte commitment to `key`: HMAC-SHA256(key, label), truncated. It reveals nothing usable about the key
 * (HMAC is a PRF) and is cached per Buffer, checked against a copy so a key mutated in place is recomputed.
 */
export function keyCommitment(key: Buffer): Buffer {
  const cached = commitments.get(key);
  if (cached && cached.key.equals(key)) return cached.commitment;
  const commitment = createHmac('sha256', key).update(COMMITMENT_LABEL).digest().subarray(0, COMMITMENT_BYTES);
  const copy = Buffer.alloc(key.length);
  key.copy(copy);
  commitments.set(key, { key: copy, commitment });
  return commitment;
}

/** JSON with keys sorted, for additional data that must encode the same fields the same way everywhere. */
export function canonicalJson(record: Readonly<Record<string, string | number>>): string {
  const sorted: Record<string, string | number> = {};
  for (const key of Object.keys(record).sort()) sorted[key] = record[key]!;
  return JSON.stringify(sorted);
}

/**
 * Random nonces, drawn from the CSPRNG NONCE_RESERVE bytes at a time rather than with one randomFillSync call per
 * chunk (a call has a fixed cost that small draws pay in full). Every nonce is fresh random bytes, handed out once
 * (each thread has its own reserve; a process never forks with it).
 */
const NONCE_RESERVE = 4096 - (4096 % NONCE_BYTES);
const nonces = Buffer.alloc(NONCE_RESERVE);
let nonceAt = NONCE_RESERVE;

function takeNonce(into: Buffer, at: number): void {
  if (nonceAt === NONCE_RESERVE) {
    randomFillSync(nonces);
    nonceAt = 0;
  }
  nonces.copy(into, at, nonceAt, nonceAt + NONCE_BYTES);
  nonces.fill(0, nonceAt, nonceAt + NONCE_BYTES);
  nonceAt += NONCE_BYTES;
}

/**
 * Encrypts `plaintext` under the 32-byte data `key` into a sealed object bound to `header`.
 * Nonces are random: keep well under 2^32 objects per data key (one data key per lineage is far below that).
 */
export function sealObject(plaintext: Buffer, key: Buffer, header: ObjectHeader): Buffer {
  checkKey(key);
  const prefix = encodePrefix(header, true, plaintext.length, keyCommitment(key));
  const out = Buffer.allocUnsafe(prefix.length + NONCE_BYTES + plaintext.length + TAG_BYTES);
  sealWithPrefix(prefix, plaintext, key, out, 0);
  return out;
}

/**
 * `sealObject` into `out` at `at` (for many objects in one buffer); returns the sealed object's length. A RangeError,
 * and nothing written, when it does not fit: `sealedLength` tells the room an object needs.
 */
export function sealObjectInto(plaintext: Buffer, key: Buffer, header: ObjectHeader, out: Buffer, at: number): number {
  checkKey(key);
  const prefix = encodePrefix(header, true, plaintext.length, keyCommitment(key));
  return sealWithPrefix(prefix, plaintext, key, out, at);
}

function sealWithPrefix(prefix: Buffer, plaintext: Buffer, key: Buffer, out: Buffer, start: number): number {
  const length = prefix.length + NONCE_BYTES + plaintext.length + TAG_BYTES;
  roomFor(out, start, length);
  encryptAfterPrefix(plaintext, key, out, start, start + prefix.copy(out, start));
  return length;
}

/** Nonce, ciphertext and tag of `plaintext` after the prefix already at `out[start..headerEnd)` (room checked). */
function encryptAfterPrefix(plaintext: Buffer, key: Buffer, out: Buffer, start: number, headerEnd: number): void {
  takeNonce(out, headerEnd);
  const nonce = out.subarray(headerEnd, headerEnd + NONCE_BYTES);
  const cipher = createCipheriv('aes-256-gcm', key, nonce, { authTagLength: TAG_BYTES });
  cipher.setAAD(out.subarray(start, headerEnd));
  // update() output (Node cannot encrypt into a given buffer) is copied in from pieces of at most UPDATE_BYTES, so
  // the temporary stays small and cache-hot.
  let at = headerEnd + NONCE_BYTES;
  for (let offset = 0; offset < plaintext.length; offset += UPDATE_BYTES) {
    at += cipher.update(plaintext.subarray(offset, offset + UPDATE_BYTES)).copy(out, at);
  }
  at += cipher.final().copy(out, at); // GCM's final() is empty
  if (at !== headerEnd + NONCE_BYTES + plaintext.length) {
    throw new Error(`AES-256-GCM produced ${at - headerEnd - NONCE_BYTES} bytes`);
  }
  cipher.getAuthTag().copy(out, at);
}

/**
 * Seals many objects whose headers differ only in object id (all of one byte length, as chunk ids are), codec and
 * body length, into given buffers: the header is encoded and checked once, then copied and patched per object, the
 * same bytes `sealObjectInto` / `sealPlaintextObjectInto` write (test/snapshots/engine/crypto.test.ts).
 */
export class ObjectSealer {
  private readonly prefix: Buffer;
  private readonly idAt: number;
  private readonly idLength: number;

  /** `header.objectId` is any id of the length the objects' ids have; `key` null: plaintext mode. */
  constructor(
    private readonly header: PlaintextObjectHeader & { dataKeyId?: string },
    private readonly key: Buffer | null,
  ) {
    if (key) checkKey(key);
    this.prefix = encodePrefix(
      { ...header, dataKeyId: key ? (header.dataKeyId ?? '') : '' },
      key !== null,
      0,
      key ? keyCommitment(key) : null,
    );
    // The object id is the fourth string of the header (each a u16 length and its bytes), after dataKeyId, tenant
    // and lineage.
    const before = [key ? (header.dataKeyId ?? '') : '', header.tenant, header.lineage];
    const strings = PREFIX_BYTES + FIXED_HEADER_BYTES - 5 * 2;
    this.idAt = strings + before.reduce((n, v) => n + 2 + Buffer.byteLength(v), 0) + 2;
    this.idLength = Buffer.byteLength(header.objectId);
  }

  /** The bytes an object with a body of `bodyLength` bytes takes. */
  sealedLength(bodyLength: number): number {
    return this.prefix.length + bodyLength + (this.key ? NONCE_BYTES + TAG_BYTES : DIGEST_BYTES);
  }

  /**
   * Lays out an encrypted object of a `bodyLength`-byte body as `sealInto` would — prefix and a fresh nonce at `at` —
   * and returns where its body goes, for a batch sealer to write the ciphertext and tag (native-sealer.ts). Null when
   * this sealer cannot (plaintext mode, or an id of another length): then `sealInto` it.
   */
  layoutInto(bodyLength: number, objectId: string, codec: number, out: Buffer, at: number): number | null {
    if (!this.key || objectId.length !== this.idLength || Buffer.byteLength(objectId) !== this.idLength) return null;
    checkInt('codec', codec, 0xff);
    if (bodyLength > MAX_U32) throw new RangeError(`an object body is at most ${MAX_U32} bytes`);
    roomFor(out, at, this.sealedLength(bodyLength));
    const headerEnd = at + this.prefix.copy(out, at);
    out[at + PREFIX_BYTES + 2] = codec;
    out.writeUInt32BE(bodyLength, at + PREFIX_BYTES + 5);
    out.write(objectId, at + this.idAt, this.idLength, 'utf8');
    takeNonce(out, headerEnd);
    return headerEnd + NONCE_BYTES;
  }

  /** Seals `body` as object `objectId` into `out` at `at`; returns the sealed object's length. */
  sealInto(body: Buffer, objectId: string, codec: number, out: Buffer, at: number): number {
    if (objectId.length !== this.idLength || Buffer.byteLength(objectId) !== this.idLength) {
      const header = { ...this.header, objectId, codec };
      return this.key
        ? sealObjectInto(body, this.key, { ...header, dataKeyId: header.dataKeyId ?? '' }, out, at)
        : sealPlaintextObjectInto(body, header, out, at);
    }
    checkInt('codec', codec, 0xff);
    if (body.length > MAX_U32) throw new RangeError(`an object body is at most ${MAX_U32} bytes`);
    const length = this.sealedLength(body.length);
    roomFor(out, at, length);
    const headerEnd = at + this.prefix.copy(out, at);
    out[at + PREFIX_BYTES + 2] = codec;
    out.writeUInt32BE(body.length, at + PREFIX_BYTES + 5);
    out.write(objectId, at + this.idAt, this.idLength, 'utf8');
    if (this.key) {
      encryptAfterPrefix(body, this.key, out, at, headerEnd);
    } else {
      const bodyEnd = headerEnd + body.length;
      body.copy(out, headerEnd);
      createHash('sha256').update(out.subarray(at, bodyEnd)).digest().copy(out, bodyEnd);
    }
    return length;
  }
}

/**
 * Plaintext mode: the same envelope without encryption, a SHA-256 in place of the tag. For stores explicitly
 * configured without encryption; detects corruption, not tampering.
 */
export function sealPlaintextObject(plaintext: Buffer, header: PlaintextObjectHeader): Buffer {
  const prefix = encodePrefix({ ...header, dataKeyId: '' }, false, plaintext.length, null);
  const out = Buffer.allocUnsafe(prefix.length + plaintext.length + DIGEST_BYTES);
  plaintextWithPrefix(prefix, plaintext, out, 0);
  return out;
}

/** `sealPlaintextObject` into `out` at `at`; returns the sealed object's length (see sealObjectInto). */
export function sealPlaintextObjectInto(
  plaintext: Buffer,
  header: PlaintextObjectHeader,
  out: Buffer,
  at: number,
): number {
  const prefix = encodePrefix({ ...header, dataKeyId: '' }, false, plaintext.length, null);
  return plaintextWithPrefix(prefix, plaintext, out, at);
}

function plaintextWithPrefix(prefix: Buffer, plaintext: Buffer, out: Buffer, start: number): number {
  const length = prefix.length + plaintext.length + DIGEST_BYTES;
  roomFor(out, start, length);
  prefix.copy(out, start);
  const bodyEnd = start + length - DIGEST_BYTES;
  plaintext.copy(out, bodyEnd - plaintext.length);
  createHash('sha256').update(out.subarray(start, bodyEnd)).digest().copy(out, bodyEnd);
  return length;
}

/** The bytes a sealed object with this header and a body of `bodyLength` bytes takes. */
export function sealedLength(header: PlaintextObjectHeader & { dataKeyId?: string }, bodyLength: number): number {
  const encrypted = header.dataKeyId !== undefined;
  const prefix = encodePrefix(
    { ...header, dataKeyId: header.dataKeyId ?? '' },
    encrypted,
    bodyLength,
    encrypted ? NO_COMMITMENT : null,
  );
  return prefix.length + bodyLength + (encrypted ? NONCE_BYTES + TAG_BYTES : DIGEST_BYTES);
}

function roomFor(out: Buffer, at: number, length: number): void {
  if (!Number.isSafeInteger(at) || at < 0 || at + length > out.length) {
    throw new RangeError(`a sealed object of ${length} bytes does not fit at ${at} in ${out.length} bytes`);
  }
}

/**
 * Verifies and opens a sealed object. `keyFor` is asked for the data key named in the header (only after the
 * header matched `expected`) and may throw KeyUnavailableError. Throws SnapshotTamperedError (with a `reason`)
 * when anything does not verify; never returns unverified bytes.
 */
export function openObject(
  sealed: Buffer,
  keyFor: (dataKeyId: string) => Buffer,
  expected: ExpectedBinding,
): OpenedObject {
  const context: CryptoErrorContext = {
    sessionId: expected.sessionId,
    checkpointId: expected.kind === 'manifest' ? expected.objectId : undefined,
    objectId: expected.objectId,
  };
  const fail = (reason: Exclude<CryptoFailureReason, 'missing-key'>, detail: string): never => {
    const what = `${expected.kind} ${quote(expected.objectId)} of lineage ${quote(expected.lineage)}`;
    throw new SnapshotTamperedError(`${what} ${detail}`, reason, context);
  };

  const { header, headerEnd, commitment } = decodePrefix(sealed, fail, context);
  const trailer = header.encrypted ? TAG_BYTES : DIGEST_BYTES;
  const bodyStart = headerEnd + (header.encrypted ? NONCE_BYTES : 0);
  const end = bodyStart + header.bodyLength + trailer;
  if (sealed.length < end) fail('truncated', `is truncated: ${sealed.length} of ${end} bytes`);
  if (sealed.length > end) fail('malformed', `has ${sealed.length - end} bytes after its end`);

  if (header.encrypted !== expected.encrypted) {
    fail('tampered', header.encrypted ? 'is encrypted but was expected in plaintext' : 'is not encrypted');
  }
  checkBinding(header.opened, expected, fail);
  if (header.encrypted && expected.dataKeyId !== undefined && header.dataKeyId !== expected.dataKeyId) {
    fail('tampered', `names data key ${quote(header.dataKeyId)}, expected ${quote(expected.dataKeyId)}`);
  }

  const body = sealed.subarray(bodyStart, bodyStart + header.bodyLength);
  if (!header.encrypted) {
    const digest = createHash('sha256')
      .update(sealed.subarray(0, bodyStart + header.bodyLength))
      .digest();
    if (!timingSafeEqual(digest, sealed.subarray(end - DIGEST_BYTES, end))) {
      fail('corrupt', 'does not match its SHA-256 (plaintext mode: corruption, not authenticated)');
    }
    return { header: header.opened, plaintext: body };
  }

  const key = keyFor(header.dataKeyId);
  checkKey(key);
  if (!timingSafeEqual(keyCommitment(key), commitment)) {
    fail('wrong-key', `was not sealed under the data key supplied for ${quote(header.dataKeyId)}`);
  }
  const decipher = createDecipheriv('aes-256-gcm', key, sealed.subarray(headerEnd, bodyStart), {
    authTagLength: TAG_BYTES,
  });
  decipher.setAAD(sealed.subarray(0, headerEnd));
  decipher.setAuthTag(sealed.subarray(end - TAG_BYTES, end));
  const plaintext = decipher.update(body);
  try {
    decipher.final();
  } catch {
    plaintext.fill(0); // unauthenticated bytes never leave this function
    fail('tampered', 'failed authentication: its bytes were altered');
  }
  return { header: header.opened, plaintext };
}

function checkKey(key: Buffer): void {
  if (!Buffer.isBuffer(key) || key.length !== KEY_BYTES) {
    throw new TypeError(`a data key must be a Buffer of ${KEY_BYTES} bytes`);
  }
}

/** Magic, length and header: everything of a sealed object before its nonce (or plaintext body). */
function encodePrefix(header: ObjectHeader, encrypted: boolean, bodyLength: number, commitment: Buffer | null): Buffer {
  const kind = KIND_CODES[header.kind];
  if (kind === undefined) throw new TypeError(`unknown object kind ${quote(String(header.kind))}`);
  if ((header.kind === 'manifest' || header.kind === 'timeline') && !header.sessionId) {
    throw new TypeError(`a ${header.kind} header needs a sessionId`);
  }
  checkInt('formatVersion', header.formatVersion, MAX_U16);
  checkInt('codec', header.codec, 0xff);
  if (bodyLength > MAX_U32) throw new RangeError(`an object body is at most ${MAX_U32} bytes`);
  if (encrypted && !KEY_ID_PATTERN.test(header.dataKeyId))
    throw new TypeError(`dataKeyId must match ${KEY_ID_PATTERN}`);
  const strings = [
    encodeString('dataKeyId', header.dataKeyId, encrypted),
    encodeString('tenant', header.tenant, true),
    encodeString('lineage', header.lineage, true),
    encodeString('objectId', header.objectId, true),
    encodeString('sessionId', header.sessionId ?? '', false),
  ];
  const headerLength = FIXED_HEADER_BYTES + strings.reduce((sum, s) => sum + s.length, 0);
  if (headerLength > MAX_U16) throw new RangeError(`an object header is at most ${MAX_U16} bytes`);

  const out = Buffer.allocUnsafe(PREFIX_BYTES + headerLength);
  MAGIC.copy(out, 0);
  let at = out.writeUInt16BE(headerLength, MAGIC.length);
  at = out.writeUInt8(encrypted ? FLAG_ENCRYPTED : 0, at);
  at = out.writeUInt8(kind, at);
  at = out.writeUInt8(header.codec, at);
  at = out.writeUInt16BE(header.formatVersion, at);
  at = out.writeUInt32BE(bodyLength, at);
  at += (commitment ?? NO_COMMITMENT).copy(out, at);
  for (const s of strings) {
    at = out.writeUInt16BE(s.length, at);
    at += s.copy(out, at);
  }
  return out;
}

function checkInt(name: string, value: number, max: number): void {
  if (!Number.isInteger(value) || value < 0 || value > max)
    throw new RangeError(`${name} must be an integer 0..${max}`);
}

function encodeString(name: string, value: string, required: boolean): Buffer {
  if (typeof value !== 'string') throw new TypeError(`${name} must be a string`);
  if (required && value.length === 0) throw new TypeError(`${name} must not be empty`);
  const bytes = Buffer.from(value, 'utf8');
  // A lone surrogate would be written as U+FFFD and never match on read: refuse it here, where it is a bug.
  if (bytes.toString('utf8') !== value) throw new TypeError(`${name} is not well-formed Unicode`);
  return bytes;
}

interface DecodedHeader {
  encrypted: boolean;
  bodyLength: number;
  dataKeyId: string;
  opened: OpenedObjectHeader;
}

/** Parses the magic, length and header; all failures go through `fail` (or an incompatibility error). */
function decodePrefix(
  sealed: Buffer,
  fail: (reason: 'truncated' | 'malformed', detail: string) => never,
  context: CryptoErrorContext,
): { header: DecodedHeader; headerEnd: number; commitment: Buffer } {
  const magicSeen = sealed.subarray(0, MAGIC.length);
  if (!magicSeen.equals(MAGIC.subarray(0, magicSeen.length))) {
    if (magicSeen.subarray(0, 3).equals(MAGIC.subarray(0, 3)) && magicSeen.length === MAGIC.length) {
      throw new SnapshotIncompatibleError(
        `sealed object envelope version ${magicSeen[3]} is not supported by this reader (it reads ${MAGIC[3]})`,
        context.sessionId ?? '',
        context.checkpointId ?? '',
      );
    }
    fail('malformed', 'is not a sealed object (bad magic)');
  }
  if (sealed.length < PREFIX_BYTES) fail('truncated', `is truncated: ${sealed.length} bytes`);
  const headerLength = sealed.readUInt16BE(MAGIC.length);
  const headerEnd = PREFIX_BYTES + headerLength;
  if (sealed.length < headerEnd) fail('truncated', `is truncated inside its header`);
  if (headerLength < FIXED_HEADER_BYTES) fail('malformed', 'has a header too short to parse');

  let at = PREFIX_BYTES;
  const flags = sealed.readUInt8(at++);
  const kindCode = sealed.readUInt8(at++);
  const codec = sealed.readUInt8(at++);
  const formatVersion = sealed.readUInt16BE(at);
  const bodyLength = sealed.readUInt32BE(at + 2);
  at += 6;
  const commitment = sealed.subarray(at, at + COMMITMENT_BYTES);
  at += COMMITMENT_BYTES;
  const strings: string[] = [];
  for (let i = 0; i < 5; i++) {
    if (at + 2 > headerEnd) fail('malformed', 'has a header that ends inside a field');
    const length = sealed.readUInt16BE(at);
    at += 2;
    if (at + length > headerEnd) fail('malformed', 'has a header that ends inside a field');
    strings.push(sealed.toString('utf8', at, at + length));
    at += length;
  }
  if (at !== headerEnd) fail('malformed', 'has unparsed bytes in its header');
  if ((flags & ~FLAG_ENCRYPTED) !== 0) fail('malformed', `has unknown header flags 0x${flags.toString(16)}`);
  const kind = KINDS_BY_CODE.get(kindCode) ?? fail('malformed', `has an unknown object kind ${kindCode}`);
  const [dataKeyId = '', tenant = '', lineage = '', objectId = '', sessionId = ''] = strings;
  const encrypted = (flags & FLAG_ENCRYPTED) !== 0;
  if (encrypted ? !KEY_ID_PATTERN.test(dataKeyId) : dataKeyId !== '') {
    fail('malformed', 'has a data key id that does not fit its mode');
  }

  const base = { kind, tenant, lineage, objectId, formatVersion, codec, ...(sessionId ? { sessionId } : {}) };
  const opened: OpenedObjectHeader = encrypted
    ? { ...base, dataKeyId, encrypted: true }
    : { ...base, encrypted: false };
  return { header: { encrypted, bodyLength, dataKeyId, opened }, headerEnd, commitment };
}

function checkBinding(
  header: OpenedObjectHeader,
  expected: ExpectedBinding,
  fail: (reason: 'tampered', detail: string) => never,
): void {
  const fields = ['kind', 'tenant', 'lineage', 'objectId', 'sessionId'] as const;
  for (const field of fields) {
    const found = header[field] ?? '';
    const wanted = expected[field] ?? '';
    if (found !== wanted) {
      fail('tampered', `is not the object asked for: its header names ${field} ${quote(found)}, not ${quote(wanted)}`);
    }
  }
  const versions: readonly number[] =
    typeof expected.formatVersion === 'number' ? [expected.formatVersion] : expected.formatVersion;
  if (!versions.includes(header.formatVersion)) {
    fail('tampered', `has format version ${header.formatVersion}, expected ${versions.join(' or ')}`);
  }
}

/** Quotes a (possibly hostile) header string for a message: escaped, and cut at 80 characters. */
function quote(value: string): string {
  return JSON.stringify(value.length > 80 ? `${value.slice(0, 80)}…` : value);
}
