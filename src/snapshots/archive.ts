/**
 * Portable archives of checkpoints: what `export` writes and `import` reads, so a session moves between deployments
 * that share no key. The archive carries the state re-encrypted for its reader (an X25519 public key or a
 * passphrase), never a master or data key of the store it came from.
 *
 * Layout (all integers big-endian):
 *
 *   "DSARCHV\0" | u32 header length | header JSON          — readable, authenticated by every record
 *   record*: u8 type | u32 plaintext length | ciphertext | 16-byte GCM tag
 *
 * Records are AES-256-GCM under the archive key; record n's nonce is 4 zero bytes and n as a u64, its additional data
 * the header's SHA-256, the type, the length and n: a record altered, moved, dropped or taken from another archive
 * fails. Types, in order: 1 the start spec (JSON), then per checkpoint of the header 2 its state in pieces of at most
 * 1 MiB and 3 its end (`{ checkpointId, size, sha256 }` of the plaintext), then 4 the archive's end (`{ records }`).
 * An archive without its end record is truncated.
 *
 * The archive key: for a recipient, X25519 between a fresh ephemeral key and the recipient's public key, then
 * HKDF-SHA256 (salt random, info naming the format and both public keys) to 64 bytes; for a passphrase, scrypt
 * (N 2^15, r 8, p 1, a random salt) to 64 bytes. The first 32 bytes are the AES key; the SHA-256 of the other 32 is
 * the header's `keyCheck`, which tells a wrong key from a damaged archive before a byte is decrypted.
 */
import {
  createCipheriv,
  createDecipheriv,
  createHash,
  createPrivateKey,
  createPublicKey,
  diffieHellman,
  generateKeyPairSync,
  hkdfSync,
  randomBytes,
  scrypt as scryptCallback,
  timingSafeEqual,
  type KeyObject,
} from 'node:crypto';
import { Readable } from 'node:stream';
import { promisify } from 'node:util';
import { z } from 'zod';
import { CheckpointId, CheckpointTrigger, Label, SessionId } from '../domain/schemas';
import { strictObject } from '../domain/strict';
import { SnapshotCorruptError, SnapshotIncompatibleError, SnapshotTamperedError } from './errors';
import type { CheckpointManifest, SnapshotStore } from './snapshot-store';

const scrypt = promisify(scryptCallback) as (
  password: Uint8Array,
  salt: Uint8Array,
  keylen: number,
  options: { N: number; r: number; p: number; maxmem: number },
) => Promise<Buffer>;

export const ARCHIVE_FORMAT_VERSION = 1;
/**
 * The media type of an archive over HTTP (an export's answer, an import's body): plain bytes, which every generated
 * client handles (a type of its own is not); the archive names itself by its first bytes.
 */
export const ARCHIVE_MEDIA_TYPE = 'application/octet-stream';

const MAGIC = Buffer.from('DSARCHV\0', 'latin1');
const MAX_HEADER_BYTES = 1 << 20;
const MAX_RECORD_BYTES = 1 << 20;
const TAG_BYTES = 16;
const RECORD_HEAD_BYTES = 5;
const SCRYPT = { N: 1 << 15, r: 8, p: 1, maxmem: 64 << 20 } as const;
const HKDF_INFO = 'durable-sessions archive 1 x25519';

const RECORD = { spec: 1, data: 2, checkpointEnd: 3, end: 4 } as const;

const Base64 = z
  .string()
  .max(200)
  .regex(/^[A-Za-z0-9+/]*={0,2}$/);
const Sha256Hex = z.string().regex(/^[0-9a-f]{64}$/);

/** One checkpoint of the archive, as its manifest described it in the store it came from. */
export const ArchivedCheckpoint = strictObject({
  checkpointId: CheckpointId,
  sequence: z.number().int().min(1),
  parentId: CheckpointId.nullable(),
  runtime: strictObject({ kind: z.string().min(1).max(100), version: z.string().max(100) }),
  size: z.number().int().min(0),
  createdAt: z.iso.datetime(),
  label: Label.optional(),
  trigger: CheckpointTrigger,
  /** Conversation runtime: the messages the checkpoint holds (what its session's timeline says). */
  messageCount: z.number().int().min(0).optional(),
});
export type ArchivedCheckpoint = z.infer<typeof ArchivedCheckpoint>;

const Seal = z.discriminatedUnion('kind', [
  strictObject({
    kind: z.literal('x25519-hkdf-sha256'),
    ephemeralPublicKey: Base64,
    /** SHA-256 of the recipient's raw public key: which key pair opens the archive. */
    recipient: Sha256Hex,
    salt: Base64,
  }),
  strictObject({
    kind: z.literal('scrypt'),
    salt: Base64,
    // Read from the archive before it is authenticated: bounded, so that no archive makes its reader spend more than
    // 128 MiB (128·N·r bytes) or long on the key.
    N: z
      .number()
      .int()
      .min(1024)
      .max(1 << 17),
    r: z.number().int().min(1).max(8),
    p: z.number().int().min(1).max(4),
  }),
]);

/** The readable part of an archive: what it holds and how it is sealed. */
export const ArchiveHeader = strictObject({
  format: z.literal('durable-sessions-archive'),
  formatVersion: z.literal(ARCHIVE_FORMAT_VERSION),
  createdAt: z.iso.datetime(),
  source: strictObject({ sessionId: SessionId }),
  runtime: strictObject({ kind: z.string().min(1).max(100), version: z.string().max(100) }),
  /** Oldest first; the last is the checkpoint the importing session starts from. */
  checkpoints: z.array(ArchivedCheckpoint).min(1).max(10_000),
  seal: Seal,
  cipher: z.literal('aes-256-gcm'),
  keyCheck: Sha256Hex,
});
export type ArchiveHeader = z.infer<typeof ArchiveHeader>;

/** Whom an archive is sealed for: an X25519 public key (PEM or KeyObject), or a passphrase. */
export type ArchiveSeal = { recipient: string | KeyObject } | { passphrase: string | Uint8Array };
/** What opens an archive: the recipient's X25519 private key (PEM or KeyObject), or the passphrase. */
export type ArchiveKey = { privateKey: string | KeyObject } | { passphrase: string | Uint8Array };

/** A new X25519 key pair for a recipient of archives, both halves as PEM (SPKI and PKCS#8). */
export function generateArchiveKeyPair(): { publicKey: string; privateKey: string } {
  const pair = generateKeyPairSync('x25519');
  return {
    publicKey: pair.publicKey.export({ type: 'spki', format: 'pem' }).toString(),
    privateKey: pair.privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(),
  };
}

export interface ExportOptions {
  sessionId: string;
  /** Checkpoint ids, oldest first (a checkpoint and its ancestors, or one checkpoint). */
  checkpointIds: readonly string[];
  seal: ArchiveSeal;
  /** The session's start spec: sealed with the state (it may hold secrets). */
  spec: unknown;
  /** Conversation runtime: the messages each checkpoint holds, by checkpoint id, as the session's timeline says. */
  messageCounts?: ReadonlyMap<string, number>;
}

/** The archive of a checkpoint (and its ancestors) as a stream: read from the store as it is consumed. */
export function exportArchive(store: SnapshotStore, options: ExportOptions): Readable {
  return Readable.from(archiveBytes(store, options), { objectMode: false, highWaterMark: 1 << 20 });
}

async function* archiveBytes(store: SnapshotStore, options: ExportOptions): AsyncGenerator<Buffer> {
  const { sessionId } = options;
  const manifests: CheckpointManifest[] = [];
  for (const id of options.checkpointIds) manifests.push(await store.readManifest(sessionId, id));
  const head = manifests[manifests.length - 1]!;
  const { seal, key, keyCheck } = await sealFor(options.seal);
  const header: ArchiveHeader = {
    format: 'durable-sessions-archive',
    formatVersion: ARCHIVE_FORMAT_VERSION,
    createdAt: new Date().toISOString(),
    source: { sessionId },
    runtime: head.runtime,
    checkpoints: manifests.map((m) => ({
      checkpointId: m.checkpointId,
      sequence: m.sequence,
      // The first checkpoint of an archive has no parent in it.
      parentId: m === manifests[0] ? null : m.parentId,
      runtime: m.runtime,
      size: m.size,
      createdAt: m.createdAt,
      ...(m.label !== undefined ? { label: m.label } : {}),
      trigger: m.trigger,
      ...(options.messageCounts?.has(m.checkpointId)
        ? { messageCount: options.messageCounts.get(m.checkpointId) }
        : {}),
    })),
    seal,
    cipher: 'aes-256-gcm',
    keyCheck,
  };
  const json = Buffer.from(JSON.stringify(header));
  const prelude = Buffer.concat([MAGIC, u32(json.length), json]);
  yield prelude;
  const sealer = new RecordCipher(key, sha256(prelude));
  yield sealer.seal(RECORD.spec, Buffer.from(JSON.stringify(options.spec ?? null)));
  for (const manifest of manifests) {
    // The store's stream authenticates each chunk as it is read, and fails before its end on anything wrong.
    const { stream } = await store.open(sessionId, manifest.checkpointId);
    const digest = createHash('sha256');
    let size = 0;
    for await (const piece of stream as AsyncIterable<Buffer>) {
      for (let at = 0; at < piece.length; at += MAX_RECORD_BYTES) {
        const part = piece.subarray(at, at + MAX_RECORD_BYTES);
        digest.update(part);
        size += part.length;
        yield sealer.seal(RECORD.data, part);
      }
    }
    const end = { checkpointId: manifest.checkpointId, size, sha256: digest.digest('hex') };
    yield sealer.seal(RECORD.checkpointEnd, Buffer.from(JSON.stringify(end)));
  }
  yield sealer.seal(RECORD.end, Buffer.from(JSON.stringify({ records: sealer.count + 1 })));
}

/** One checkpoint as a reader hands it on: its header entry and its verified bytes (consume before the next). */
export interface ArchiveEntry {
  checkpoint: ArchivedCheckpoint;
  data: AsyncIterable<Buffer>;
}

/**
 * Reads an archive: its header (checked first: magic, format version, key), its spec, then each checkpoint's bytes,
 * decrypted and authenticated record by record; a checkpoint's bytes end only after its size and SHA-256 matched, so a
 * consumer that waits for their end never accepts bad bytes. Throws SnapshotIncompatibleError for a format it does not
 * know, SnapshotTamperedError for a wrong key (`wrong-key`), an altered record (`tampered`), a cut archive
 * (`truncated`, code SnapshotCorrupt), SnapshotCorruptError for anything else malformed.
 */
export async function openArchive(
  input: AsyncIterable<Uint8Array>,
  key: ArchiveKey,
): Promise<{ header: ArchiveHeader; spec: unknown; entries: AsyncGenerator<ArchiveEntry> }> {
  const reader = new ByteReader(input);
  const { header, prelude } = await readPrelude(reader);
  const derived = await keyFor(header, key);
  const opener = new RecordCipher(derived, sha256(prelude));
  const spec = parseJson(await readRecord(reader, opener, RECORD.spec), 'spec');
  return { header, spec, entries: entriesOf(header, reader, opener) };
}

/** An archive's readable header, without a key (what it holds, how it is sealed); nothing past it is read. */
export async function readArchiveHeader(input: AsyncIterable<Uint8Array>): Promise<ArchiveHeader> {
  return (await readPrelude(new ByteReader(input))).header;
}

async function readPrelude(reader: ByteReader): Promise<{ header: ArchiveHeader; prelude: Buffer }> {
  const magic = await reader.take(MAGIC.length);
  if (!magic || !magic.equals(MAGIC)) throw corrupt('this is not a durable-sessions archive');
  const length = await reader.take(4);
  if (!length) throw truncated();
  const headerBytes = length.readUInt32BE(0);
  if (headerBytes > MAX_HEADER_BYTES) throw corrupt(`its header claims ${headerBytes} bytes`);
  const json = await reader.take(headerBytes);
  if (!json) throw truncated();
  return { header: parseHeader(json), prelude: Buffer.concat([magic, length, json]) };
}

async function* entriesOf(
  header: ArchiveHeader,
  reader: ByteReader,
  opener: RecordCipher,
): AsyncGenerator<ArchiveEntry> {
  for (const checkpoint of header.checkpoints) {
    let consumed = false;
    const data = async function* (): AsyncGenerator<Buffer> {
      const digest = createHash('sha256');
      let size = 0;
      for (;;) {
        const { type, plain } = await nextRecord(reader, opener);
        if (type === RECORD.data) {
          size += plain.length;
          if (size > checkpoint.size)
            throw corrupt(`checkpoint ${checkpoint.checkpointId} is longer than its header says`);
          digest.update(plain);
          yield plain;
          continue;
        }
        if (type !== RECORD.checkpointEnd) throw corrupt(`record ${opener.count} is out of order`);
        const end = z
          .object({ checkpointId: z.string(), size: z.number(), sha256: z.string() })
          .safeParse(parseJson(plain, 'checkpoint end'));
        const ok =
          end.success &&
          end.data.checkpointId === checkpoint.checkpointId &&
          end.data.size === size &&
          size === checkpoint.size &&
          end.data.sha256 === digest.digest('hex');
        if (!ok) throw corrupt(`checkpoint ${checkpoint.checkpointId} does not match its digest or size`);
        consumed = true;
        return;
      }
    };
    yield { checkpoint, data: data() };
    if (!consumed) throw new Error('an archive entry must be read to its end before the next');
  }
  const { type, plain } = await nextRecord(reader, opener);
  const end = type === RECORD.end ? parseJson(plain, 'end') : null;
  if (!end || (end as { records?: unknown }).records !== opener.count) throw corrupt('its end record does not match');
  if (await reader.take(1)) throw corrupt('bytes follow its end');
}

/** Reads the whole archive, checking every record and digest, and keeps nothing: what an import does first. */
export async function verifyArchive(
  input: AsyncIterable<Uint8Array>,
  key: ArchiveKey,
): Promise<{ header: ArchiveHeader; spec: unknown }> {
  const { header, spec, entries } = await openArchive(input, key);
  for await (const entry of entries) for await (const piece of entry.data) void piece;
  return { header, spec };
}

function parseHeader(json: Buffer): ArchiveHeader {
  let raw: unknown;
  try {
    raw = JSON.parse(json.toString('utf8'));
  } catch (err) {
    throw corrupt('its header is not JSON', err);
  }
  const version = (raw as { formatVersion?: unknown } | null)?.formatVersion;
  if (version !== ARCHIVE_FORMAT_VERSION) {
    throw new SnapshotIncompatibleError(
      `the archive is of format version ${JSON.stringify(version)}; this release reads version ${ARCHIVE_FORMAT_VERSION}`,
      '',
    );
  }
  const parsed = ArchiveHeader.safeParse(raw);
  if (!parsed.success) throw corrupt(`its header does not parse: ${z.prettifyError(parsed.error)}`, parsed.error);
  return parsed.data;
}

async function sealFor(seal: ArchiveSeal): Promise<{ seal: ArchiveHeader['seal']; key: Buffer; keyCheck: string }> {
  if ('passphrase' in seal) {
    const salt = randomBytes(16);
    const bytes = await scrypt(passphraseBytes(seal.passphrase), salt, 64, SCRYPT);
    const { N, r, p } = SCRYPT;
    return { seal: { kind: 'scrypt', salt: salt.toString('base64'), N, r, p }, ...split(bytes) };
  }
  const recipient = typeof seal.recipient === 'string' ? createPublicKey(seal.recipient) : seal.recipient;
  if (recipient.asymmetricKeyType !== 'x25519') throw new TypeError('the recipient key must be an X25519 public key');
  const ephemeral = generateKeyPairSync('x25519');
  const salt = randomBytes(16);
  const ephemeralRaw = rawPublic(ephemeral.publicKey);
  const recipientRaw = rawPublic(recipient);
  const shared = diffieHellman({ privateKey: ephemeral.privateKey, publicKey: recipient });
  const bytes = hkdf(shared, salt, ephemeralRaw, recipientRaw);
  return {
    seal: {
      kind: 'x25519-hkdf-sha256',
      ephemeralPublicKey: ephemeralRaw.toString('base64'),
      recipient: sha256(recipientRaw).toString('hex'),
      salt: salt.toString('base64'),
    },
    ...split(bytes),
  };
}

async function keyFor(header: ArchiveHeader, key: ArchiveKey): Promise<Buffer> {
  const { seal } = header;
  let bytes: Buffer;
  if (seal.kind === 'scrypt') {
    if (!('passphrase' in key)) throw wrongKey('the archive is sealed with a passphrase, and none was given');
    const { N, r, p } = seal;
    bytes = await scrypt(passphraseBytes(key.passphrase), Buffer.from(seal.salt, 'base64'), 64, {
      N,
      r,
      p,
      maxmem: Math.max(SCRYPT.maxmem, 129 * N * r),
    });
  } else {
    if (!('privateKey' in key)) throw wrongKey('the archive is sealed to a public key, and no private key was given');
    const privateKey = typeof key.privateKey === 'string' ? createPrivateKey(key.privateKey) : key.privateKey;
    if (privateKey.asymmetricKeyType !== 'x25519') throw wrongKey('the private key is not an X25519 key');
    const recipientRaw = rawPublic(createPublicKey(privateKey));
    if (sha256(recipientRaw).toString('hex') !== seal.recipient) {
      throw wrongKey('the archive is sealed to another public key than this private key');
    }
    const ephemeralRaw = Buffer.from(seal.ephemeralPublicKey, 'base64');
    if (ephemeralRaw.length !== 32) throw corrupt('its ephemeral public key is not 32 bytes');
    const ephemeral = createPublicKey({
      key: { kty: 'OKP', crv: 'X25519', x: ephemeralRaw.toString('base64url') },
      format: 'jwk',
    });
    const shared = diffieHellman({ privateKey, publicKey: ephemeral });
    bytes = hkdf(shared, Buffer.from(seal.salt, 'base64'), ephemeralRaw, recipientRaw);
  }
  const { key: aesKey, keyCheck } = split(bytes);
  if (!timingSafeEqual(Buffer.from(keyCheck, 'hex'), Buffer.from(header.keyCheck, 'hex'))) {
    throw wrongKey(seal.kind === 'scrypt' ? 'the passphrase is wrong' : 'the private key does not open the archive');
  }
  return aesKey;
}

function hkdf(shared: Buffer, salt: Buffer, ephemeralRaw: Buffer, recipientRaw: Buffer): Buffer {
  const info = Buffer.concat([Buffer.from(HKDF_INFO), ephemeralRaw, recipientRaw]);
  return Buffer.from(hkdfSync('sha256', shared, salt, info, 64));
}

function split(bytes: Buffer): { key: Buffer; keyCheck: string } {
  return { key: bytes.subarray(0, 32), keyCheck: sha256(bytes.subarray(32, 64)).toString('hex') };
}

function rawPublic(key: KeyObject): Buffer {
  const jwk = key.export({ format: 'jwk' });
  return Buffer.from(jwk.x!, 'base64url');
}

function passphraseBytes(passphrase: string | Uint8Array): Buffer {
  const bytes = typeof passphrase === 'string' ? Buffer.from(passphrase, 'utf8') : Buffer.from(passphrase);
  if (bytes.length === 0) throw new TypeError('the passphrase is empty');
  return bytes;
}

/** Seals and opens the records of one archive, counting them (the count is each record's nonce). */
class RecordCipher {
  count = 0;
  constructor(
    private readonly key: Buffer,
    private readonly headerHash: Buffer,
  ) {}

  private nonceAndAad(type: number, length: number): { nonce: Buffer; aad: Buffer } {
    const nonce = Buffer.alloc(12);
    nonce.writeBigUInt64BE(BigInt(this.count), 4);
    const head = Buffer.alloc(RECORD_HEAD_BYTES);
    head.writeUInt8(type, 0);
    head.writeUInt32BE(length, 1);
    return { nonce, aad: Buffer.concat([this.headerHash, head, nonce.subarray(4)]) };
  }

  seal(type: number, plain: Buffer): Buffer {
    const { nonce, aad } = this.nonceAndAad(type, plain.length);
    const cipher = createCipheriv('aes-256-gcm', this.key, nonce).setAAD(aad);
    const head = Buffer.alloc(RECORD_HEAD_BYTES);
    head.writeUInt8(type, 0);
    head.writeUInt32BE(plain.length, 1);
    const out = Buffer.concat([head, cipher.update(plain), cipher.final(), cipher.getAuthTag()]);
    this.count++;
    return out;
  }

  open(type: number, sealed: Buffer): Buffer {
    const length = sealed.length - TAG_BYTES;
    const { nonce, aad } = this.nonceAndAad(type, length);
    const decipher = createDecipheriv('aes-256-gcm', this.key, nonce).setAAD(aad);
    decipher.setAuthTag(sealed.subarray(length));
    try {
      const plain = Buffer.concat([decipher.update(sealed.subarray(0, length)), decipher.final()]);
      this.count++;
      return plain;
    } catch (err) {
      throw new SnapshotTamperedError(
        `the archive's record ${this.count} fails authentication: it was altered`,
        'tampered',
        {},
        { cause: err },
      );
    }
  }
}

async function nextRecord(reader: ByteReader, opener: RecordCipher): Promise<{ type: number; plain: Buffer }> {
  const head = await reader.take(RECORD_HEAD_BYTES);
  if (!head) throw truncated();
  const type = head.readUInt8(0);
  const length = head.readUInt32BE(1);
  if (!Object.values(RECORD).includes(type as never) || length > MAX_RECORD_BYTES) {
    // The head is authenticated with its record: a bad one is an altered archive, but its length cannot be trusted.
    throw new SnapshotTamperedError(`the archive's record ${opener.count} has an impossible head`, 'tampered');
  }
  const sealed = await reader.take(length + TAG_BYTES);
  if (!sealed) throw truncated();
  return { type, plain: opener.open(type, sealed) };
}

async function readRecord(reader: ByteReader, opener: RecordCipher, want: number): Promise<Buffer> {
  const { type, plain } = await nextRecord(reader, opener);
  if (type !== want) throw corrupt(`record ${opener.count - 1} is out of order`);
  return plain;
}

function parseJson(bytes: Buffer, what: string): unknown {
  try {
    return JSON.parse(bytes.toString('utf8'));
  } catch (err) {
    throw corrupt(`its ${what} record is not JSON`, err);
  }
}

/** Exact reads from a byte stream, holding at most what one read asks for beyond the stream's own pieces. */
class ByteReader {
  private readonly iterator: AsyncIterator<Uint8Array>;
  private pending: Buffer[] = [];
  private buffered = 0;
  private done = false;

  constructor(input: AsyncIterable<Uint8Array>) {
    this.iterator = input[Symbol.asyncIterator]();
  }

  /** `n` bytes, or null when the stream ends first (at its end, or cut). */
  async take(n: number): Promise<Buffer | null> {
    while (this.buffered < n && !this.done) {
      const next = await this.iterator.next();
      if (next.done) this.done = true;
      else if (next.value.length > 0) {
        const piece = Buffer.from(next.value.buffer, next.value.byteOffset, next.value.length);
        this.pending.push(piece);
        this.buffered += piece.length;
      }
    }
    if (this.buffered < n) return null;
    const all = this.pending.length === 1 ? this.pending[0]! : Buffer.concat(this.pending, this.buffered);
    const out = all.subarray(0, n);
    const rest = all.subarray(n);
    this.pending = rest.length ? [rest] : [];
    this.buffered = rest.length;
    return out;
  }
}

function u32(n: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(n, 0);
  return b;
}

function sha256(bytes: Buffer): Buffer {
  return createHash('sha256').update(bytes).digest();
}

function corrupt(why: string, cause?: unknown): SnapshotCorruptError {
  return new SnapshotCorruptError(`the archive is damaged: ${why}`, '', '', cause !== undefined ? { cause } : {});
}

function truncated(): SnapshotTamperedError {
  return new SnapshotTamperedError('the archive is truncated: it ends before its end record', 'truncated');
}

function wrongKey(why: string): SnapshotTamperedError {
  return new SnapshotTamperedError(`the archive cannot be opened: ${why}`, 'wrong-key');
}

export interface ImportOptions {
  /**
   * The new session's id in this store, told once the archive verified (its header and spec in hand): it may refuse
   * what it reads (throw), before anything is written.
   */
  sessionId: (verified: { header: ArchiveHeader; spec: unknown }) => string;
  /** Whom the id is claimed for (the new session's workflow claims it again as the same owner). */
  owner: string;
  /** Opens the archive from its start: it is read twice, once to verify all of it and once to store it. */
  open: () => AsyncIterable<Uint8Array>;
  key: ArchiveKey;
}

/**
 * Stores an archive's checkpoints under a new session id, sealed under this store's keys (a new lineage: a new data
 * key). The whole archive is verified first, so a damaged, cut or wrongly keyed archive changes nothing: no claim,
 * no key, no checkpoint. Then the id is claimed and each checkpoint written (the store's writes publish nothing on
 * failure). Returns the stored manifests, oldest first.
 */
export async function importArchive(
  store: SnapshotStore,
  options: ImportOptions,
): Promise<{ header: ArchiveHeader; spec: unknown; manifests: CheckpointManifest[] }> {
  const sessionId = SessionId.parse(options.sessionId(await verifyArchive(options.open(), options.key)));
  await store.claim(sessionId, options.owner);
  const { header, spec, entries } = await openArchive(options.open(), options.key);
  const manifests: CheckpointManifest[] = [];
  for await (const { checkpoint, data } of entries) {
    manifests.push(
      await store.write(
        {
          sessionId,
          checkpointId: checkpoint.checkpointId,
          sequence: checkpoint.sequence,
          parentId: checkpoint.parentId,
          runtime: checkpoint.runtime,
          trigger: checkpoint.trigger,
          ...(checkpoint.label !== undefined ? { label: checkpoint.label } : {}),
        },
        Readable.from(data, { objectMode: false }),
      ),
    );
  }
  return { header, spec, manifests };
}
