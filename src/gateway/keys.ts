import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { z } from 'zod';
import { TenantId } from '../domain/schemas';

/** `viewer` reads; `operator` also starts and steers sessions; `admin` may do everything an operator may. */
export const Role = z.enum(['viewer', 'operator', 'admin']);
export type Role = z.infer<typeof Role>;

const Sha256 = z.string().regex(/^[0-9a-f]{64}$/, 'sha256 must be 64 lowercase hex digits');

/** One key as the keys file holds it: its SHA-256, never the key itself. */
export const ApiKeyRecord = z.strictObject({
  /** A name for logs and revocation ("ci", "ops-alice"); never the key. */
  id: z.string().min(1).max(100),
  sha256: Sha256,
  /** Whose sessions the key reaches: it never sees another tenant's. */
  tenant: TenantId,
  role: Role,
});
export type ApiKeyRecord = z.infer<typeof ApiKeyRecord>;

export const ApiKeysFile = z.strictObject({ keys: z.array(ApiKeyRecord).max(10_000) });

export interface Principal {
  keyId: string;
  tenant: string;
  role: Role;
}

/** The key an `Authorization: Bearer <key>` header carries; undefined for any other header, or none. */
export function bearerKey(header: string | undefined): string | undefined {
  return /^Bearer\s+(\S+)$/i.exec(header ?? '')?.[1];
}

/** The SHA-256 the keys file holds for `key`. */
export function hashKey(key: string): string {
  return crypto.createHash('sha256').update(key, 'utf8').digest('hex');
}

/** A new random key (256 bits, base64url, prefixed so a leaked one is recognisable in logs and scanners). */
export function generateKey(): string {
  return `dsk_${crypto.randomBytes(32).toString('base64url')}`;
}

/**
 * API keys from a JSON file (`{ keys: [{ id, sha256, tenant, role }] }`), read again when the file changes: a key is
 * added, rotated or revoked by editing the file, without a restart. A file that does not parse keeps the keys that
 * were loaded before it (and says why in the log): a typo never locks everyone out or lets anyone in. Neither does a
 * file that lists one key's hash twice: it is refused the same way.
 */
export class ApiKeys {
  private byHash = new Map<string, ApiKeyRecord>();
  /** The file to read again; none for keys given as JSON (DS_API_KEYS), which are fixed. */
  private readonly file: string | undefined;
  /** mtime, size and inode of the file as loaded: a rename onto it changes the inode even within one mtime tick. */
  private loaded = '';
  private checkedAt = 0;

  /**
   * `source`: the keys file's path, or the same JSON as text (`{ json, name }`, `DS_API_KEYS`): fixed for the life of
   * the process.
   * @throws Error naming the file or variable and each problem, for keys that cannot be read or are not valid.
   */
  constructor(
    source: string | { json: string; name: string },
    private readonly log: (message: string) => void = (m) => console.warn(m),
  ) {
    if (typeof source === 'string') {
      this.file = source;
      this.reload(source, true);
      return;
    }
    const parsed = parseKeys(source.json, source.name);
    if (!parsed.ok) throw new Error(parsed.error);
    this.byHash = new Map(parsed.keys.map((k) => [k.sha256, k]));
  }

  /** Whom `key` belongs to, or undefined for a key the file does not hold. */
  authenticate(key: string): Principal | undefined {
    this.refresh();
    const record = this.byHash.get(hashKey(key));
    return record && { keyId: record.id, tenant: record.tenant, role: record.role };
  }

  /** Checks the file's mtime at most every 500 ms. */
  private refresh(): void {
    const now = Date.now();
    if (this.file === undefined || now - this.checkedAt < 500) return;
    this.checkedAt = now;
    this.reload(this.file, false);
  }

  private reload(file: string, first: boolean): void {
    let stat: fs.Stats;
    try {
      stat = fs.statSync(file);
    } catch (err) {
      if (first) throw new Error(`API keys file ${file}: ${(err as Error).message}`);
      this.log(`API keys file ${file} cannot be read; keeping the keys loaded before`);
      return;
    }
    const signature = `${stat.mtimeMs}:${stat.size}:${stat.ino}`;
    if (signature === this.loaded) return;
    const parsed = parseKeysFile(file);
    if (!parsed.ok) {
      if (first) throw new Error(parsed.error);
      this.log(`${parsed.error}; keeping the keys loaded before`);
      return;
    }
    this.byHash = new Map(parsed.keys.map((k) => [k.sha256, k]));
    this.loaded = signature;
  }
}

type ParsedKeys = { ok: true; keys: ApiKeyRecord[] } | { ok: false; error: string };

function parseKeysFile(file: string): ParsedKeys {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (err) {
    return { ok: false, error: `API keys file ${file} cannot be read: ${(err as Error).message}` };
  }
  return parseKeys(text, `API keys file ${file}`);
}

function parseKeys(text: string, source: string): ParsedKeys {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (err) {
    return { ok: false, error: `${source} is not JSON: ${(err as Error).message}` };
  }
  const parsed = ApiKeysFile.safeParse(json);
  if (!parsed.success) {
    const issues = parsed.error.issues.map((i) => `${i.path.join('.') || '(keys)'}: ${i.message}`).join('; ');
    return { ok: false, error: `${source}: ${issues}` };
  }
  // A hash listed twice would give one key two records, the last winning without a word: which one was meant is not
  // for the gateway to guess.
  const ids = new Map<string, string>();
  for (const key of parsed.data.keys) {
    const first = ids.get(key.sha256);
    if (first !== undefined) {
      return {
        ok: false,
        error: `${source}: keys "${first}" and "${key.id}" have the same sha256 (one key, two records)`,
      };
    }
    ids.set(key.sha256, key.id);
  }
  return { ok: true, keys: parsed.data.keys };
}

/**
 * The embedded default's key: made once under `dataDir` (the key in `gateway-dev-key`, mode 0600; its hash in
 * `gateway-keys.json`), then reused, so a restart keeps the key a developer copied.
 */
export function ensureDevKey(dataDir: string): { key: string; keyFile: string; keysFile: string } {
  const keyFile = path.join(dataDir, 'gateway-dev-key');
  const keysFile = path.join(dataDir, 'gateway-keys.json');
  let key: string;
  if (fs.existsSync(keyFile)) {
    key = fs.readFileSync(keyFile, 'utf8').trim();
  } else {
    key = generateKey();
    fs.mkdirSync(dataDir, { recursive: true });
    fs.writeFileSync(keyFile, `${key}\n`, { mode: 0o600 });
  }
  if (!fs.existsSync(keysFile)) {
    const record: ApiKeyRecord = { id: 'dev', sha256: hashKey(key), tenant: 'default', role: 'admin' };
    fs.writeFileSync(keysFile, `${JSON.stringify({ keys: [record] }, null, 2)}\n`, { mode: 0o600 });
  }
  return { key, keyFile, keysFile };
}
