/**
 * The data key of each lineage: `<lineage>/keys/data-key.json` in the store's backend, wrapped by a master key.
 *
 * A key unwrapped once is kept in memory, but every use reads the wrapped file again (a few hundred bytes) and
 * compares it with the bytes the key came from. So a key destroyed on disk (shred, or deleted by hand), damaged or
 * replaced is noticed by the next read or write, as it would be after a restart (or on another worker), and never used from memory: a
 * checkpoint published under a key that no longer exists could never be restored. A file whose bytes changed is
 * unwrapped again; the same data key re-wrapped (rekey) is accepted, any other is refused.
 */
import { hkdfSync, timingSafeEqual } from 'node:crypto';
import type { BlobBackend } from '../blob/backend';
import type { ChunkKey } from './chunk-work';
import { KeyUnavailableError, SnapshotTamperedError, type CryptoErrorContext } from '../errors';
import { startsWithSealedRecord, TIMELINE_DIR } from '../timeline-log';
import { TIMELINE_ENTRIES_DIR } from '../timeline-objects';
import { isEncryptedObject } from './crypto';
import { createDataKey, rewrapDataKey, unwrapDataKey, wrapDataKey, WrappedDataKey, type Keyring } from './keyring';

const DATA_KEY_FILE = 'data-key.json';
/** A wrapped key is about 300 bytes; anything far larger is not one and is not read into memory. */
const MAX_KEY_FILE_BYTES = 64 * 1024;

interface Held {
  /** The file's bytes the key was unwrapped from. */
  raw: Buffer;
  key: ChunkKey;
}

export class LineageKeys {
  private readonly held = new Map<string, Held>();

  constructor(
    private readonly backend: BlobBackend,
    private readonly tenant: string,
    private readonly keyring: Keyring | null,
  ) {}

  /** Whether the store has master keys (without them it stores, and can open, plaintext only). */
  get hasKeyring(): boolean {
    return Boolean(this.keyring);
  }

  /**
   * The lineage's data key as its file holds it now. Only a writer (`create`) makes one, and only for a lineage with
   * nothing sealed yet: a reader never invents a key, and a destroyed key is not silently replaced by a new one.
   * Throws KeyUnavailableError (no keyring, no master key, no key file, a malformed one) or SnapshotTamperedError
   * (a file that does not authenticate for this lineage, or holds another data key than the one in use).
   */
  async get(lineage: string, options: { create?: boolean } = {}): Promise<ChunkKey> {
    const keyring = this.requireKeyring();
    const raw = (await this.read(lineage)) ?? (await this.missing(lineage, options));
    const held = this.held.get(lineage);
    if (held?.raw.equals(raw)) return held.key;
    const key = this.unwrap(lineage, raw, keyring);
    if (held && !sameKey(held.key, key)) {
      // The next use starts from what is on disk, as a restarted worker would; this one fails.
      this.held.delete(lineage);
      throw new SnapshotTamperedError(
        `the data key file of lineage ${lineage} now holds data key '${key.dataKeyId}', not the '${held.key.dataKeyId}' in use: it was replaced`,
        'tampered',
        { sessionId: lineage, objectId: key.dataKeyId },
      );
    }
    // New, or the same data key re-wrapped (rekey): keep the key, remember the bytes.
    this.held.set(lineage, { raw, key: held?.key ?? key });
    return held?.key ?? key;
  }

  /**
   * Throws unless the lineage's key file still holds `used` (the key a write sealed its chunks under), naming the
   * checkpoint that is therefore not published. Cheap: one read of a small file, compared byte for byte.
   */
  async confirm(lineage: string, used: ChunkKey, at: { sessionId: string; checkpointId: string }): Promise<void> {
    const notPublished = `checkpoint ${at.checkpointId} of session ${at.sessionId} is not published`;
    let current: ChunkKey;
    try {
      current = await this.get(lineage);
    } catch (err) {
      if (err instanceof KeyUnavailableError) {
        throw new KeyUnavailableError(`${notPublished}: ${err.message}`, err.keyId, err.keyKind, at, { cause: err });
      }
      if (err instanceof SnapshotTamperedError) {
        throw new SnapshotTamperedError(
          `${notPublished}: ${err.message}`,
          err.reason,
          { ...at, objectId: err.objectId },
          {
            cause: err,
          },
        );
      }
      throw err;
    }
    if (!sameKey(current, used)) {
      throw new SnapshotTamperedError(
        `${notPublished}: its chunks are sealed under data key '${used.dataKeyId}', the lineage's key file now holds '${current.dataKeyId}'`,
        'tampered',
        { ...at, objectId: current.dataKeyId },
      );
    }
  }

  /** Re-wraps the lineage's data key under the primary master key; false if it already uses it. */
  async rewrap(lineage: string): Promise<boolean> {
    const keyring = this.requireKeyring();
    const raw = await this.read(lineage);
    if (raw === null) throw this.gone(lineage, `the data key of ${lineage} does not exist (destroyed?)`);
    const wrapped = this.parse(lineage, raw);
    if (wrapped.masterKeyId === keyring.primaryKeyId) return false;
    const next = rewrapDataKey(keyring, wrapped, this.context(lineage));
    // The key in memory stays valid: the next use sees new bytes, unwraps them and finds the same data key.
    await this.backend.put(this.file(lineage), Buffer.from(JSON.stringify(next)));
    return true;
  }

  /** Deletes the lineage's wrapped data key: everything sealed under it is unreadable from then on. */
  async destroy(lineage: string): Promise<void> {
    await this.backend.delete(this.file(lineage));
    this.held.delete(lineage);
  }

  /** Lineages of the store that have a data key file. */
  async lineages(sessions: readonly string[]): Promise<string[]> {
    const out: string[] = [];
    for (const lineage of sessions) if ((await this.backend.stat(this.file(lineage))) !== null) out.push(lineage);
    return out;
  }

  requireKeyring(): Keyring {
    if (!this.keyring) throw new KeyUnavailableError('this store runs without encryption keys', 'keyring', 'master');
    return this.keyring;
  }

  /** The bytes of the key file when there is none: a new key for a writer of a new lineage, else an error. */
  private async missing(lineage: string, { create = false }: { create?: boolean }): Promise<Buffer> {
    // A key this store was using is gone: never go on with the copy in memory, never replace it.
    if (this.held.delete(lineage)) {
      throw this.gone(
        lineage,
        `the data key of lineage ${lineage} was removed from the store while in use (destroyed?)`,
      );
    }
    if (!create) throw this.gone(lineage, `the data key of ${lineage} does not exist (destroyed?)`);
    if ((await this.hasSealedPacks(lineage)) || (await this.hasSealedTimeline(lineage))) {
      // Read again: a writer that created the key after our first look has also had time to write packs under it.
      const raw = await this.read(lineage);
      if (raw !== null) return raw;
      throw this.gone(
        lineage,
        `the data key of lineage ${lineage} is gone (destroyed?) while packs sealed under it remain: no new key is made for it`,
      );
    }
    const keyring = this.requireKeyring();
    const dataKey = createDataKey();
    const bytes = Buffer.from(JSON.stringify(wrapDataKey(keyring, dataKey, this.context(lineage))));
    dataKey.key.fill(0);
    // Two writers may race to create the key: exactly one wins, the other reads the winner's.
    if (await this.backend.create(this.file(lineage), bytes)) return bytes;
    const raw = await this.read(lineage);
    if (raw === null) throw new Error(`data key of lineage ${lineage} vanished while being created`);
    return raw;
  }

  /** Whether some pack of the lineage is encrypted: then a data key existed, whatever became of it. */
  private hasSealedPacks(lineage: string): Promise<boolean> {
    return someObjectStarts(this.backend, `${lineage}/packs/`, '.pack', 8, isEncryptedObject);
  }

  /**
   * Whether the lineage's own session has encrypted timeline records (timeline-log.ts): a claimed session may have
   * appended its timeline, sealed under the key, before writing any checkpoint.
   */
  private async hasSealedTimeline(lineage: string): Promise<boolean> {
    return (
      (await someObjectStarts(this.backend, `${lineage}/${TIMELINE_DIR}/`, '.log', 4, startsWithSealedRecord)) ||
      (await someObjectStarts(this.backend, `${lineage}/${TIMELINE_ENTRIES_DIR}/`, '', 4, startsWithSealedRecord))
    );
  }

  private unwrap(lineage: string, raw: Buffer, keyring: Keyring): ChunkKey {
    const wrapped = this.parse(lineage, raw);
    let key: Buffer;
    try {
      key = unwrapDataKey(keyring, wrapped, this.context(lineage));
    } catch (err) {
      // Named by its lineage: whoever reads the error reads it about a session, not about a file.
      const context: CryptoErrorContext = { sessionId: lineage, objectId: wrapped.dataKeyId };
      if (err instanceof SnapshotTamperedError) {
        throw new SnapshotTamperedError(err.message, err.reason, context, { cause: err });
      }
      if (err instanceof KeyUnavailableError) {
        throw new KeyUnavailableError(err.message, err.keyId, err.keyKind, context, { cause: err });
      }
      throw err;
    }
    return {
      dataKeyId: wrapped.dataKeyId,
      key,
      chunkIdKey: Buffer.from(hkdfSync('sha256', key, Buffer.alloc(0), 'durable-sessions/chunk-id/v2', 32)),
    };
  }

  /** The wrapped key in the file; a file that is not one (cut short, not JSON, wrong fields) is KeyUnavailable. */
  private parse(lineage: string, raw: Buffer): WrappedDataKey {
    let json: unknown;
    try {
      json = JSON.parse(raw.toString('utf8'));
    } catch (err) {
      throw this.gone(
        lineage,
        `the data key file of lineage ${lineage} is malformed (not JSON): it cannot be unwrapped`,
        err,
      );
    }
    const parsed = WrappedDataKey.safeParse(json);
    if (!parsed.success) {
      const fields = [...new Set(parsed.error.issues.map((issue) => issue.path.join('.') || '(root)'))].join(', ');
      throw this.gone(
        lineage,
        `the data key file of lineage ${lineage} is malformed (${fields}): it cannot be unwrapped`,
        parsed.error,
      );
    }
    return parsed.data;
  }

  private gone(lineage: string, message: string, cause?: unknown): KeyUnavailableError {
    return new KeyUnavailableError(message, lineage, 'data', { sessionId: lineage }, cause ? { cause } : undefined);
  }

  private context(lineage: string): { tenant: string; lineage: string } {
    return { tenant: this.tenant, lineage };
  }

  private file(lineage: string): string {
    return `${lineage}/keys/${DATA_KEY_FILE}`;
  }

  private read(lineage: string): Promise<Buffer | null> {
    return this.backend.read(this.file(lineage), { maxBytes: MAX_KEY_FILE_BYTES });
  }
}

/** Whether some object under `prefix` named `*<suffix>` starts with bytes (its first `length`) that `test` accepts. */
async function someObjectStarts(
  backend: BlobBackend,
  prefix: string,
  suffix: string,
  length: number,
  test: (prefix: Buffer) => boolean,
): Promise<boolean> {
  for await (const { key } of backend.list(prefix)) {
    if (!key.endsWith(suffix)) continue;
    const head = await backend.read(key, { range: { offset: 0, length } });
    if (head && test(head)) return true;
  }
  return false;
}

function sameKey(a: ChunkKey, b: ChunkKey): boolean {
  return a.dataKeyId === b.dataKeyId && timingSafeEqual(a.key, b.key);
}
