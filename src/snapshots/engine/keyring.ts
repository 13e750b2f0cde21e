/**
 * Master keys and data keys (envelope encryption).
 *
 * Objects are sealed under random per-lineage data keys; data keys are stored only wrapped (AES-256-GCM) under a
 * master key from the worker's Keyring. Rotating a master key re-wraps data keys (`rewrapDataKey`), never
 * chunks. Destroying every wrapped copy of a data key, or every master key that wraps it, makes the objects
 * sealed under it unreadable for good (crypto-shredding).
 *
 * Rotation hazard: every worker that may unwrap must hold a new master key *before* any worker uses it as
 * primary. Roll out `k2` as a non-primary key first (DS_MASTER_KEY_PRIMARY=k1), then switch the primary, then
 * rewrap, and remove `k1` only after no wrapped key names it.
 */
import { createCipheriv, createDecipheriv, randomBytes, timingSafeEqual } from 'node:crypto';
import * as fs from 'node:fs/promises';
import { join } from 'node:path';
import { inspect } from 'node:util';
import { z } from 'zod';
import { canonicalJson, KEY_BYTES, KEY_ID_PATTERN, keyCommitment, NONCE_BYTES, TAG_BYTES } from './crypto';
import { KeyringConfigError, KeyUnavailableError, SnapshotTamperedError, type CryptoErrorContext } from '../errors';

const KEY_FILE_SUFFIX = '.key';
const COMMITMENT_BYTES = 16;

/** The variables a keyring is read from, and what its keys are called in messages. */
export interface KeyVariables {
  /** `id:base64,id:base64`, newest last. */
  keys: string;
  /** The id of the key new material is sealed under. */
  primary: string;
  /** "master key", "payload key". */
  noun: string;
}

/** The snapshot store's master keys. */
export const MASTER_KEY_VARIABLES: KeyVariables = {
  keys: 'DS_MASTER_KEYS',
  primary: 'DS_MASTER_KEY_PRIMARY',
  noun: 'master key',
};

/** Where a deployment's keys are configured, as its configuration resolved them. */
export interface KeySources {
  /** A directory of `<id>.key` files; wins over `list`. */
  dir?: string;
  /** `id:base64,id:base64`. */
  list?: string;
  /** The primary key's id; default: the last of `list`, the greatest file id. */
  primary?: string;
  /** Used when neither `dir` nor `list` is set, if it exists (the embedded default's generated keys). */
  defaultDir: string;
}

export interface KeyringEntry {
  id: string;
  key: Buffer;
}

/**
 * The master keys a worker holds, by id, and which one wraps new data keys (`primaryKeyId`).
 * Immutable: `withKey`, `withPrimary` and `withoutKey` return new keyrings. Key bytes are copied in, kept in a
 * private field, and left out of `inspect`, `console.log` and `JSON.stringify`.
 */
export class Keyring {
  readonly #keys: ReadonlyMap<string, Buffer>;
  /** The key new data keys are wrapped under. */
  readonly primaryKeyId: string;

  /** `primaryKeyId` defaults to the last entry (the newest). */
  constructor(entries: Iterable<KeyringEntry>, primaryKeyId?: string) {
    const keys = new Map<string, Buffer>();
    for (const { id, key } of entries) {
      checkKeyId(id, 'key id');
      if (keys.has(id)) throw new KeyringConfigError(`duplicate master key id '${id}'`, id);
      if (!Buffer.isBuffer(key) || key.length !== KEY_BYTES) {
        throw new KeyringConfigError(`master key '${id}' is not ${KEY_BYTES} bytes`, id);
      }
      keys.set(id, copyKey(key));
    }
    const primary = primaryKeyId ?? [...keys.keys()].at(-1);
    if (primary === undefined) throw new KeyringConfigError('a keyring needs at least one master key');
    if (!keys.has(primary)) {
      throw new KeyringConfigError(`primary master key ${describeId(primary)} is not in the keyring`, primary);
    }
    this.#keys = keys;
    this.primaryKeyId = primary;
  }

  /**
   * Reads `DS_MASTER_KEYS` (`id:base64key,id:base64key`, newest last; base64 or base64url), or the variables
   * `variables` names. The primary is `DS_MASTER_KEY_PRIMARY` (`variables.primary`) if set, else the last entry.
   */
  static fromEnv(env: NodeJS.ProcessEnv = process.env, variables: KeyVariables = MASTER_KEY_VARIABLES): Keyring {
    const list = env[variables.keys];
    if (!list?.trim()) throw new KeyringConfigError(`${variables.keys} is not set or empty`);
    const entries: KeyringEntry[] = [];
    try {
      list.split(',').forEach((raw, index) => {
        const entry = raw.trim();
        if (entry === '') return; // tolerate a trailing comma
        const colon = entry.indexOf(':');
        // Never echo the entry: without its colon it may be a bare key.
        if (colon < 0) throw new KeyringConfigError(`${variables.keys} entry #${index + 1} is not 'id:base64key'`);
        const id = entry.slice(0, colon).trim();
        checkKeyId(id, `${variables.keys} entry #${index + 1}: key id`);
        entries.push({
          id,
          key: decodeBase64Key(entry.slice(colon + 1).trim(), id, `in ${variables.keys}`, variables.noun),
        });
      });
      return new Keyring(entries, primaryFromEnv(env, variables));
    } finally {
      for (const { key } of entries) key.fill(0); // the keyring holds copies
    }
  }

  /**
   * Reads `<id>.key` files in `dir` (other files are ignored): base64 of 32 bytes (whitespace trimmed) or exactly
   * 32 raw bytes. Refuses files whose mode grants group or others any access. The primary is
   * `DS_MASTER_KEY_PRIMARY` (`variables.primary`) if set, else the lexicographically greatest id (name keys by date:
   * `2025-06-01`).
   */
  static async fromDirectory(
    dir: string,
    env: NodeJS.ProcessEnv = process.env,
    variables: KeyVariables = MASTER_KEY_VARIABLES,
  ): Promise<Keyring> {
    let names: string[];
    try {
      names = await fs.readdir(dir);
    } catch (error) {
      throw new KeyringConfigError(`cannot read master key directory ${dir}: ${(error as Error).message}`);
    }
    const ids = names
      .filter((name) => name.endsWith(KEY_FILE_SUFFIX))
      .map((name) => name.slice(0, -KEY_FILE_SUFFIX.length))
      .sort(compareCodeUnits);
    if (ids.length === 0) throw new KeyringConfigError(`no *${KEY_FILE_SUFFIX} files in ${dir}`);
    const entries: KeyringEntry[] = [];
    try {
      for (const id of ids) {
        const file = join(dir, id + KEY_FILE_SUFFIX);
        checkKeyId(id, `key file ${file}: key id`);
        entries.push({ id, key: await readKeyFile(file, id, variables.noun) });
      }
      return new Keyring(entries, primaryFromEnv(env, variables) ?? ids.at(-1));
    } finally {
      for (const { key } of entries) key.fill(0); // the keyring holds copies
    }
  }

  /**
   * The keyring `sources` describe, read from their values (not the process's environment): `dir`, else `list`, else
   * `defaultDir` when it exists; undefined when none holds keys. Messages name `variables`.
   */
  static async fromSources(sources: KeySources, variables: KeyVariables): Promise<Keyring | undefined> {
    const env = { [variables.keys]: sources.list, [variables.primary]: sources.primary };
    if (sources.dir) return Keyring.fromDirectory(sources.dir, env, variables);
    if (sources.list) return Keyring.fromEnv(env, variables);
    const isDirectory = await fs.stat(sources.defaultDir).then(
      (st) => st.isDirectory(),
      () => false,
    );
    return isDirectory ? Keyring.fromDirectory(sources.defaultDir, env, variables) : undefined;
  }

  /** A new master key: base64 of 32 random bytes, for DS_MASTER_KEYS or a `.key` file. */
  static generateKey(): string {
    return randomBytes(KEY_BYTES).toString('base64');
  }

  /**
   * A key directory for the embedded default (mode 0700): a `dev-1.key` (mode 0600) is generated in it when it holds
   * no key yet. Production configures its own keys.
   */
  static async ensureKeyDirectory(dir: string): Promise<void> {
    await fs.mkdir(dir, { recursive: true, mode: 0o700 });
    const existing = (await fs.readdir(dir)).filter((n) => n.endsWith(KEY_FILE_SUFFIX));
    if (existing.length === 0) {
      await fs.writeFile(join(dir, `dev-1${KEY_FILE_SUFFIX}`), Keyring.generateKey(), { mode: 0o600, flag: 'wx' });
    }
  }

  /** Key ids, in insertion order. */
  get keyIds(): string[] {
    return [...this.#keys.keys()];
  }

  has(id: string): boolean {
    return this.#keys.has(id);
  }

  /** The master key `id`. The buffer is the keyring's own: do not modify it. */
  get(id: string): Buffer {
    const key = this.#keys.get(id);
    if (!key) {
      throw new KeyUnavailableError(`master key ${describeId(id)} is not in this worker's keyring`, id, 'master');
    }
    return key;
  }

  /** A keyring with one more key; it becomes the primary only when asked (see the rotation hazard above). */
  withKey(id: string, key: Buffer, options: { primary?: boolean } = {}): Keyring {
    return new Keyring([...this.#entries(), { id, key }], options.primary ? id : this.primaryKeyId);
  }

  withPrimary(id: string): Keyring {
    return new Keyring(this.#entries(), id);
  }

  /** A keyring without `id`. Removing the primary is refused: choose another primary first. */
  withoutKey(id: string): Keyring {
    if (id === this.primaryKeyId) {
      throw new KeyringConfigError(`cannot remove primary master key ${describeId(id)}: choose another first`, id);
    }
    return new Keyring(
      this.#entries().filter((entry) => entry.id !== id),
      this.primaryKeyId,
    );
  }

  toJSON(): { primaryKeyId: string; keyIds: string[] } {
    return { primaryKeyId: this.primaryKeyId, keyIds: this.keyIds };
  }

  [inspect.custom](): string {
    return `Keyring { primaryKeyId: '${this.primaryKeyId}', keyIds: [${this.keyIds.map((id) => `'${id}'`).join(', ')}] }`;
  }

  #entries(): KeyringEntry[] {
    return [...this.#keys].map(([id, key]) => ({ id, key }));
  }
}

/** Where a lineage's data keys belong; bound into every wrapped key as additional data. */
export interface WrapContext {
  tenant: string;
  lineage: string;
}

export interface DataKey {
  dataKeyId: string;
  key: Buffer;
}

const Base64Of = (bytes: number) =>
  z.string().refine((value) => isCanonicalBase64(value) && Buffer.byteLength(value, 'base64') === bytes, {
    message: `must be base64 of ${bytes} bytes`,
  });

/** A data key wrapped under a master key. JSON-serializable; store it beside the lineage's manifests. */
export const WrappedDataKey = z.object({
  v: z.literal(1),
  dataKeyId: z.string().regex(KEY_ID_PATTERN),
  masterKeyId: z.string().regex(KEY_ID_PATTERN),
  nonce: Base64Of(NONCE_BYTES),
  ciphertext: Base64Of(KEY_BYTES),
  tag: Base64Of(TAG_BYTES),
  /** Commitment to the master key (see keyCommitment): tells a wrong master key from altered bytes. */
  keyCheck: Base64Of(COMMITMENT_BYTES),
});
export type WrappedDataKey = z.infer<typeof WrappedDataKey>;

/** A fresh random data key with a random id. */
export function createDataKey(): DataKey {
  return { dataKeyId: `dk-${randomBytes(16).toString('hex')}`, key: randomBytes(KEY_BYTES) };
}

/** Wraps `dataKey` under the keyring's primary master key, bound to `context`. */
export function wrapDataKey(keyring: Keyring, dataKey: DataKey, context: WrapContext): WrappedDataKey {
  if (!KEY_ID_PATTERN.test(dataKey.dataKeyId)) throw new TypeError(`dataKeyId must match ${KEY_ID_PATTERN}`);
  if (!Buffer.isBuffer(dataKey.key) || dataKey.key.length !== KEY_BYTES) {
    throw new TypeError(`a data key must be a Buffer of ${KEY_BYTES} bytes`);
  }
  const masterKeyId = keyring.primaryKeyId;
  const masterKey = keyring.get(masterKeyId);
  const nonce = randomBytes(NONCE_BYTES);
  const cipher = createCipheriv('aes-256-gcm', masterKey, nonce, { authTagLength: TAG_BYTES });
  cipher.setAAD(wrapAad(context, dataKey.dataKeyId, masterKeyId));
  const ciphertext = Buffer.concat([cipher.update(dataKey.key), cipher.final()]);
  return {
    v: 1,
    dataKeyId: dataKey.dataKeyId,
    masterKeyId,
    nonce: nonce.toString('base64'),
    ciphertext: ciphertext.toString('base64'),
    tag: cipher.getAuthTag().toString('base64'),
    keyCheck: keyCommitment(masterKey).toString('base64'),
  };
}

/**
 * Unwraps a data key. Throws KeyUnavailableError when its master key is not in the keyring, and
 * SnapshotTamperedError when it is malformed ('malformed'), was wrapped under another key with the same id
 * ('wrong-key'), or was altered or moved to another tenant, lineage or data key id ('tampered').
 */
export function unwrapDataKey(keyring: Keyring, wrapped: WrappedDataKey, context: WrapContext): Buffer {
  const parsed = WrappedDataKey.safeParse(wrapped);
  const errorContext: CryptoErrorContext = { objectId: describeWrapped(wrapped) };
  if (!parsed.success) {
    const fields = parsed.error.issues.map((issue) => issue.path.join('.') || '(root)').join(', ');
    throw new SnapshotTamperedError(`wrapped data key is malformed (${fields})`, 'malformed', errorContext);
  }
  const { dataKeyId, masterKeyId } = parsed.data;
  const what = `wrapped data key '${dataKeyId}' of lineage ${JSON.stringify(context.lineage)}`;
  const masterKey = keyring.get(masterKeyId);
  if (!timingSafeEqual(keyCommitment(masterKey), Buffer.from(parsed.data.keyCheck, 'base64'))) {
    throw new SnapshotTamperedError(
      `${what} was wrapped under another master key than this worker's '${masterKeyId}'`,
      'wrong-key',
      errorContext,
    );
  }
  const decipher = createDecipheriv('aes-256-gcm', masterKey, Buffer.from(parsed.data.nonce, 'base64'), {
    authTagLength: TAG_BYTES,
  });
  decipher.setAAD(wrapAad(context, dataKeyId, masterKeyId));
  decipher.setAuthTag(Buffer.from(parsed.data.tag, 'base64'));
  const key = decipher.update(Buffer.from(parsed.data.ciphertext, 'base64'));
  try {
    decipher.final();
  } catch {
    key.fill(0);
    throw new SnapshotTamperedError(
      `${what} failed authentication under master key '${masterKeyId}': altered, or not wrapped for this tenant and lineage`,
      'tampered',
      errorContext,
    );
  }
  return key;
}

/**
 * Re-wraps a data key under the keyring's primary master key (rekey: objects are not rewritten). Verifies the
 * old wrapping first; returns `wrapped` itself when it already uses the primary.
 */
export function rewrapDataKey(keyring: Keyring, wrapped: WrappedDataKey, context: WrapContext): WrappedDataKey {
  const key = unwrapDataKey(keyring, wrapped, context);
  try {
    if (wrapped.masterKeyId === keyring.primaryKeyId) return wrapped;
    return wrapDataKey(keyring, { dataKeyId: wrapped.dataKeyId, key }, context);
  } finally {
    key.fill(0);
  }
}

/**
 * A `keyFor` for openObject: looks the wrapped data key up and unwraps it. A data key with no wrapped copy
 * left (crypto-shredded) is a KeyUnavailableError, like a missing master key.
 */
export function dataKeyResolver(
  keyring: Keyring,
  lookup: (dataKeyId: string) => WrappedDataKey | undefined,
  context: WrapContext,
): (dataKeyId: string) => Buffer {
  return (dataKeyId) => {
    const wrapped = lookup(dataKeyId);
    if (!wrapped) {
      throw new KeyUnavailableError(
        `data key ${describeId(dataKeyId)} has no wrapped copy (destroyed?)`,
        dataKeyId,
        'data',
      );
    }
    if (wrapped.dataKeyId !== dataKeyId) {
      throw new SnapshotTamperedError(
        `wrapped data key found for ${describeId(dataKeyId)} is for ${describeId(String(wrapped.dataKeyId))}`,
        'tampered',
        { objectId: dataKeyId },
      );
    }
    return unwrapDataKey(keyring, wrapped, context);
  };
}

function wrapAad(context: WrapContext, dataKeyId: string, masterKeyId: string): Buffer {
  if (typeof context.tenant !== 'string' || typeof context.lineage !== 'string') {
    throw new TypeError('a wrap context needs a tenant and a lineage');
  }
  const record = { tenant: context.tenant, lineage: context.lineage, dataKeyId, masterKeyId, purpose: 'data-key' };
  return Buffer.from(canonicalJson(record), 'utf8');
}

function checkKeyId(id: string, what: string): void {
  // An id that fails the pattern is not echoed: it may be key material pasted in the wrong place.
  if (typeof id !== 'string' || !KEY_ID_PATTERN.test(id)) {
    throw new KeyringConfigError(`${what} is not valid: ids match ${KEY_ID_PATTERN}`);
  }
}

/** Names an id in a message if it is a well-formed id, and only its length otherwise. */
function describeId(id: string): string {
  return KEY_ID_PATTERN.test(id) ? `'${id}'` : `(invalid id of ${id.length} characters)`;
}

function describeWrapped(wrapped: unknown): string | undefined {
  const id = (wrapped as { dataKeyId?: unknown } | null)?.dataKeyId;
  return typeof id === 'string' && KEY_ID_PATTERN.test(id) ? id : undefined;
}

function primaryFromEnv(env: NodeJS.ProcessEnv, names: KeyVariables): string | undefined {
  const primary = env[names.primary]?.trim();
  return primary ? primary : undefined;
}

function isCanonicalBase64(value: string): boolean {
  return /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/.test(value);
}

/** Unpadded base64url, as long as it decodes back to itself (Node's decoder skips characters it does not know). */
function isCanonicalBase64Url(value: string): boolean {
  return /^[A-Za-z0-9_-]*$/.test(value) && Buffer.from(value, 'base64url').toString('base64url') === value;
}

function decodeBase64Key(text: string, id: string, where: string, noun: string): Buffer {
  const encoding = isCanonicalBase64(text) ? 'base64' : isCanonicalBase64Url(text) ? 'base64url' : undefined;
  if (!encoding) throw new KeyringConfigError(`${noun} '${id}' ${where} is not valid base64`, id);
  const key = Buffer.from(text, encoding);
  if (key.length !== KEY_BYTES) {
    const length = key.length;
    key.fill(0);
    throw new KeyringConfigError(`${noun} '${id}' ${where} is ${length} bytes; AES-256 needs ${KEY_BYTES}`, id);
  }
  return key;
}

async function readKeyFile(file: string, id: string, noun: string): Promise<Buffer> {
  let content: Buffer;
  try {
    const stat = await fs.stat(file);
    if (!stat.isFile()) throw new KeyringConfigError(`key file ${file} is not a regular file`, id);
    if (process.platform !== 'win32' && (stat.mode & 0o077) !== 0) {
      const mode = (stat.mode & 0o777).toString(8).padStart(4, '0');
      throw new KeyringConfigError(
        `key file ${file} has mode ${mode}: group and others must have no access to it (chmod 600)`,
        id,
      );
    }
    content = await fs.readFile(file);
  } catch (error) {
    if (error instanceof KeyringConfigError) throw error;
    throw new KeyringConfigError(`cannot read key file ${file}: ${(error as NodeJS.ErrnoException).code}`, id);
  }
  if (content.length === KEY_BYTES) {
    // 32 printable characters is a passphrase or hex, not a random key: (95/256)^32 ≈ 1e-14 for a real one.
    if (content.every((byte) => byte >= 0x20 && byte < 0x7f)) {
      content.fill(0);
      throw new KeyringConfigError(
        `key file ${file} holds 32 characters of text, not a key: write base64 of 32 random bytes (Keyring.generateKey())`,
        id,
      );
    }
    return content;
  }
  const text = content.toString('latin1').trim();
  content.fill(0);
  return decodeBase64Key(text, id, `in ${file}`, noun);
}

function copyKey(key: Buffer): Buffer {
  // Buffer.alloc, not Buffer.from: small Buffer.from copies live in a shared pool slab with unrelated data.
  const copy = Buffer.alloc(KEY_BYTES);
  key.copy(copy);
  return copy;
}

function compareCodeUnits(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
