/**
 * The chunked store's manifests (formats 2 and 3): loaded (envelope opened, header checked against its address and
 * its chunks), sealed and published, and the public view callers see. A checkpoint exists for readers exactly when
 * its manifest does.
 */
import { createHash } from 'node:crypto';
import { z } from 'zod';
import { CheckpointId, SessionId } from '../../domain/schemas';
import {
  KeyUnavailableError,
  SnapshotCorruptError,
  SnapshotIncompatibleError,
  SnapshotNotFoundError,
  SnapshotTamperedError,
} from '../errors';
import {
  CHUNKED_FORMAT_VERSION,
  ENGINE_FORMAT_VERSION,
  READABLE_FORMAT_VERSIONS,
  TABLE_FORMAT_VERSION,
} from '../format';
import type { FsSnapshotStore } from '../fs-snapshot-store';
import { CheckpointManifestSchema } from '../manifest';
import type { CheckpointManifest } from '../snapshot-store';
import type { ChunkKey } from './chunk-work';
import { claimedFormatVersion, isEncryptedObject, openObject, sealObject, sealPlaintextObject } from './crypto';
import { MAX_MANIFEST_BYTES, type StoreLayout } from './layout';
import type { LineageKeys } from './lineage-keys';
import {
  decodeJsonBody,
  decodeTable,
  encodeManifestBody,
  encodeTable,
  ManifestBodyError,
  splitManifestBody,
  type ChunkTable,
  type Location,
} from './manifest-codec';

const CHUNKED_FORMAT_VERSIONS = READABLE_FORMAT_VERSIONS.filter((v) => v >= CHUNKED_FORMAT_VERSION);

/** A chunked manifest without its chunk list (decoded and checked by manifest-codec.ts). */
export const ChunkedManifestHeader = CheckpointManifestSchema.extend({
  formatVersion: z.union([z.literal(CHUNKED_FORMAT_VERSION), z.literal(ENGINE_FORMAT_VERSION)]),
  lineage: SessionId,
  tenant: z.string(),
  /** SHA-256 of the parent's manifest file as stored: the timeline is a hash chain. */
  parentManifestDigest: z
    .string()
    .regex(/^sha256:[0-9a-f]{64}$/)
    .nullable(),
  encryption: z.object({ mode: z.enum(['aes-256-gcm', 'none']), dataKeyId: z.string().nullable() }),
  /** First checkpoint of a fork: the checkpoint of another session of the lineage it was made from. */
  forkedFrom: z.object({ sessionId: SessionId, checkpointId: CheckpointId }).optional(),
});

export type ChunkedHeader = z.infer<typeof ChunkedManifestHeader>;
/** A chunked checkpoint's manifest (format 2 or 3) as held in memory. */
export type ChunkedManifest = ChunkedHeader & { chunks: Location[] };

/** A manifest as read: format 1, or a chunked one with the SHA-256 of its file (what a child's hash-chain link names). */
export type Loaded =
  { kind: 'v1'; manifest: CheckpointManifest } | { kind: 'chunked'; manifest: ChunkedManifest; fileDigest: string };

/** A chunked manifest with its chunks as a table, as stored (format 3) or encoded from a format-2 list. */
export type LoadedTable =
  { kind: 'v1' } | { kind: 'chunked'; header: ChunkedHeader; table: ChunkTable; fileDigest: string };

/** How many sessions' newest manifests are kept for their next checkpoint's parent, and their chunks together. */
const NEWEST_KEPT = 1_024;
const NEWEST_CHUNKS_KEPT = 65_536;

interface Newest {
  checkpointId: string;
  manifest: ChunkedManifest;
  /** The manifest's file as published. */
  sealed: Buffer;
}

export class Manifests {
  /**
   * The manifest this store published last, per session, as the next checkpoint's parent: loading it back costs the
   * lineage, the data key and an opening at every checkpoint. It is used only while the file still holds the bytes
   * published (deleted or replaced since, the parent is loaded as before).
   */
  private readonly newest = new Map<string, Newest>();
  private newestChunks = 0;

  constructor(
    private readonly layout: StoreLayout,
    private readonly keys: LineageKeys,
    private readonly tenant: string,
    /** Reads format-1 manifests, which live beside the chunked ones. */
    private readonly legacy: Pick<FsSnapshotStore, 'readManifest'>,
  ) {}

  /**
   * Seals a manifest (under the lineage's key, or plaintext) and publishes it: the checkpoint exists from here on.
   * The chunks come as a list, or as a table read from another manifest (copied as it is in format 3).
   */
  async publish(
    manifest: ChunkedHeader,
    list: { chunks: Location[] } | { table: ChunkTable },
    key: ChunkKey | null,
  ): Promise<void> {
    const body =
      manifest.formatVersion >= TABLE_FORMAT_VERSION
        ? encodeManifestBody(manifest, 'table' in list ? list.table : encodeTable(list.chunks))
        : Buffer.from(
            JSON.stringify({ ...manifest, chunks: 'chunks' in list ? list.chunks : decodeTable(list.table) }),
          );
    const header = {
      kind: 'manifest' as const,
      tenant: this.tenant,
      lineage: manifest.lineage,
      objectId: manifest.checkpointId,
      sessionId: manifest.sessionId,
      formatVersion: manifest.formatVersion,
      codec: 0,
    };
    const sealed = key
      ? sealObject(body, key.key, { ...header, dataKeyId: key.dataKeyId })
      : sealPlaintextObject(body, header);
    if (sealed.length > MAX_MANIFEST_BYTES) {
      // Readers refuse larger manifests: a checkpoint that could never be read must not be published.
      throw new RangeError(
        `checkpoint ${manifest.checkpointId} would need a manifest of ${sealed.length} bytes, over the ${MAX_MANIFEST_BYTES} ` +
          'readers accept: the state has too many chunks (a larger DS_CHUNK_KIB, or format 3, lists fewer bytes per GiB)',
      );
    }
    // Created, never replaced: of two writers of one id (two workers on two hosts) the second fails instead of
    // replacing the first (a runtime told the second had stored its capture would describe a checkpoint not stored).
    const published = await this.layout.backend.create(
      this.layout.manifestKey(manifest.sessionId, manifest.checkpointId),
      sealed,
    );
    if (!published) throw existsAlready(manifest.sessionId, manifest.checkpointId);
    if ('chunks' in list) this.keepNewest({ ...manifest, chunks: list.chunks }, sealed);
  }

  private keepNewest(manifest: ChunkedManifest, sealed: Buffer): void {
    this.forget(manifest.sessionId);
    if (manifest.chunks.length > NEWEST_CHUNKS_KEPT) return;
    this.newest.set(manifest.sessionId, { checkpointId: manifest.checkpointId, manifest, sealed });
    this.newestChunks += manifest.chunks.length;
    // Oldest first: a Map iterates in insertion order, and a session's entry is re-inserted at each publish.
    for (const [sessionId, kept] of this.newest) {
      if (this.newestChunks <= NEWEST_CHUNKS_KEPT && this.newest.size <= NEWEST_KEPT) break;
      this.newest.delete(sessionId);
      this.newestChunks -= kept.manifest.chunks.length;
    }
  }

  private forget(sessionId: string): void {
    const kept = this.newest.get(sessionId);
    if (!kept) return;
    this.newest.delete(sessionId);
    this.newestChunks -= kept.manifest.chunks.length;
  }

  async load(sessionId: string, checkpointId: string): Promise<Loaded> {
    const read = await this.readBody(sessionId, checkpointId);
    if (read.kind === 'v1') return read;
    const { version, body, fileDigest } = read;
    const { header, chunks, size } = manifestBody(checkpointId, sessionId, () => {
      if (version < TABLE_FORMAT_VERSION) {
        const json = decodeJsonBody(body);
        return { ...json, size: json.chunks.reduce((n, [, chunkSize]) => n + chunkSize, 0) };
      }
      const { header, table } = splitManifestBody(body);
      return { header, chunks: decodeTable(table), size: table.size };
    });
    return {
      kind: 'chunked',
      manifest: { ...this.checkHeader(header, version, size, sessionId, checkpointId), chunks },
      fileDigest,
    };
  }

  /**
   * A chunked manifest with its chunks as a table (as stored in format 3, not decoded): for a new manifest over the
   * same chunks.
   */
  async loadTable(sessionId: string, checkpointId: string): Promise<LoadedTable> {
    const read = await this.readBody(sessionId, checkpointId);
    if (read.kind === 'v1') return read;
    const { version, body, fileDigest } = read;
    const { header, table } = manifestBody(checkpointId, sessionId, () => {
      if (version >= TABLE_FORMAT_VERSION) return splitManifestBody(body);
      const json = decodeJsonBody(body);
      return { header: json.header, table: encodeTable(json.chunks) };
    });
    return {
      kind: 'chunked',
      header: this.checkHeader(header, version, table.size, sessionId, checkpointId),
      table,
      fileDigest,
    };
  }

  /** A manifest file opened (its envelope checked and decrypted), or a format-1 manifest. */
  private async readBody(
    sessionId: string,
    checkpointId: string,
  ): Promise<
    { kind: 'v1'; manifest: CheckpointManifest } | { kind: 'sealed'; version: number; body: Buffer; fileDigest: string }
  > {
    if (!SessionId.safeParse(sessionId).success || !CheckpointId.safeParse(checkpointId).success) {
      throw new SnapshotNotFoundError(`no checkpoint ${checkpointId} of session ${sessionId}`, sessionId, checkpointId);
    }
    const sealed = await this.layout.backend.read(this.layout.manifestKey(sessionId, checkpointId), {
      maxBytes: MAX_MANIFEST_BYTES,
    });
    if (sealed === null) return { kind: 'v1', manifest: await this.legacy.readManifest(sessionId, checkpointId) };
    const lineage = await this.layout.lineageOf(sessionId);
    const peek = isEncryptedObject(sealed);
    const key = peek && this.keys.hasKeyring ? await this.keys.get(lineage) : null;
    if (peek && !this.keys.hasKeyring) {
      throw new KeyUnavailableError(
        `checkpoint ${checkpointId} is encrypted and this store has no keyring`,
        'keyring',
        'master',
      );
    }
    // The envelope's version is read before opening (it is authenticated by the opening): a manifest of a newer
    // format is incompatible, not tampered. Any other unexpected version is left to the opening, which calls it
    // tampered: a flipped bit must not read as "upgrade the reader".
    const claimed = claimedFormatVersion(sealed);
    if (claimed !== null && claimed > Math.max(...READABLE_FORMAT_VERSIONS)) {
      throw new SnapshotIncompatibleError(
        `checkpoint format version ${claimed} is not supported by this reader (supports ${READABLE_FORMAT_VERSIONS.join(', ')})`,
        sessionId,
        checkpointId,
      );
    }
    const opened = openObject(sealed, () => key!.key, {
      kind: 'manifest',
      tenant: this.tenant,
      lineage,
      objectId: checkpointId,
      sessionId,
      formatVersion: CHUNKED_FORMAT_VERSIONS,
      encrypted: peek,
      ...(key ? { dataKeyId: key.dataKeyId } : {}),
    });
    return {
      kind: 'sealed',
      version: opened.header.formatVersion,
      body: opened.plaintext,
      fileDigest: fileDigest(sealed),
    };
  }

  /** A manifest's fields checked: schema, the envelope's format version, its address, its size against its chunks. */
  private checkHeader(
    header: unknown,
    version: number,
    chunkBytes: number,
    sessionId: string,
    checkpointId: string,
  ): ChunkedHeader {
    const parsed = ChunkedManifestHeader.safeParse(header);
    if (!parsed.success || parsed.data.formatVersion !== version) {
      throw new SnapshotCorruptError(
        `manifest of ${checkpointId} is malformed: ${parsed.success ? "its format version is not its envelope's" : parsed.error.message}`,
        sessionId,
        checkpointId,
      );
    }
    const manifest = parsed.data;
    if (manifest.sessionId !== sessionId || manifest.checkpointId !== checkpointId) {
      throw new SnapshotTamperedError(`manifest of ${checkpointId} belongs to another checkpoint`, 'tampered', {
        sessionId,
        checkpointId,
      });
    }
    if (chunkBytes !== manifest.size) {
      throw new SnapshotCorruptError(
        `manifest of ${checkpointId} says ${manifest.size} bytes; its chunks add up to ${chunkBytes}`,
        sessionId,
        checkpointId,
      );
    }
    return manifest;
  }

  /** A chunked manifest (format 2 or 3), or null if it is missing, unreadable or format 1. */
  async loadChunked(sessionId: string, checkpointId: string): Promise<ChunkedManifest | null> {
    const loaded = await this.load(sessionId, checkpointId).catch(() => null);
    return loaded?.kind === 'chunked' ? loaded.manifest : null;
  }

  async parentInfo(
    sessionId: string,
    parentId: string,
  ): Promise<{ manifest: ChunkedManifest | null; manifestDigest: string | null }> {
    const kept = this.newest.get(sessionId);
    if (kept?.checkpointId === parentId) {
      // The same bytes as published: what loading them would give, without the lineage, the key and the opening.
      const stored = await this.layout.backend.read(this.layout.manifestKey(sessionId, parentId), {
        maxBytes: MAX_MANIFEST_BYTES,
      });
      if (stored?.equals(kept.sealed)) return { manifest: kept.manifest, manifestDigest: fileDigest(stored) };
    }
    try {
      const loaded = await this.load(sessionId, parentId);
      if (loaded.kind === 'chunked') return { manifest: loaded.manifest, manifestDigest: loaded.fileDigest };
    } catch {
      // A parent that cannot be read only costs deduplication; the new checkpoint stands on its own.
    }
    return { manifest: null, manifestDigest: await this.fileDigest(sessionId, parentId) };
  }

  /** The SHA-256 of a manifest's file as stored (what a child's hash-chain link names), or null if there is none. */
  async fileDigest(sessionId: string, checkpointId: string): Promise<string | null> {
    const bytes = await this.layout.manifestFile(sessionId, checkpointId);
    return bytes ? fileDigest(bytes) : null;
  }
}

/** A manifest body decoded by `decode`, its failures as the checkpoint's corruption. */
function manifestBody<T>(checkpointId: string, sessionId: string, decode: () => T): T {
  try {
    return decode();
  } catch (err) {
    if (!(err instanceof ManifestBodyError)) throw err;
    throw new SnapshotCorruptError(
      `manifest of ${checkpointId} is malformed: ${err.message}`,
      sessionId,
      checkpointId,
      {
        cause: err,
      },
    );
  }
}

export function fileDigest(bytes: Buffer): string {
  return `sha256:${createHash('sha256').update(bytes).digest('hex')}`;
}

export function toPublic(m: ChunkedHeader): CheckpointManifest {
  return {
    formatVersion: m.formatVersion,
    checkpointId: m.checkpointId,
    sessionId: m.sessionId,
    sequence: m.sequence,
    parentId: m.parentId,
    runtime: m.runtime,
    size: m.size,
    digest: m.digest,
    createdAt: m.createdAt,
    ...(m.label !== undefined ? { label: m.label } : {}),
    trigger: m.trigger,
    encryption: m.encryption.mode,
    ...(m.forkedFrom ? { forkedFrom: m.forkedFrom } : {}),
  };
}

/** What writing a checkpoint id that exists already fails with: checkpoints are immutable. */
export function existsAlready(sessionId: string, checkpointId: string): Error {
  return new Error(`checkpoint ${checkpointId} of session ${sessionId} exists already; checkpoints are immutable`);
}
