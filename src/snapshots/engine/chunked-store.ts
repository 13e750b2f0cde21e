import { createHash } from 'node:crypto';
import * as fs from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { Readable } from 'node:stream';
import { z } from 'zod';
import { CheckpointId, SessionId } from '../../domain/schemas';
import {
  abandonedAge,
  ABANDONED_AFTER_MS,
  isTempName,
  removeAbandonedTemps,
  sessionDirs,
  TOUCH_INTERVAL_MS,
  type AbandonedReport,
  type CleanAbandonedOptions,
} from '../abandoned';
import {
  KeyUnavailableError,
  SnapshotCorruptError,
  SnapshotError,
  SnapshotIncompatibleError,
  SnapshotNotFoundError,
  SnapshotTamperedError,
  verificationStatusOf,
} from '../errors';
import { ensureDir, exists, publish, readSmall } from '../../fs-io';
import {
  CHUNKED_FORMAT_VERSION,
  ENGINE_FORMAT_VERSION,
  LEGACY_FORMAT_VERSION,
  READABLE_FORMAT_VERSIONS,
  TABLE_FORMAT_VERSION,
} from '../format';
import { FsSnapshotStore } from '../fs-snapshot-store';
import { checkNew, CheckpointManifestSchema, NewCheckpointSchema } from '../manifest';
import type { GcReport, SnapshotMaintenance, VerifyResult } from '../snapshot-maintenance';
import type { CheckpointManifest, NewCheckpoint, SnapshotStore, StoreProgress } from '../snapshot-store';
import { CLAIM_FILE, claimSession } from '../session-claim';
import { isStateSource, sourceBytes, type StateSource } from '../state-source';
import { asStoreFull } from '../store-full';
import { Chunker, DEFAULT_CHUNKER, type ChunkerOptions } from './chunker';
import { sharedChunkPool, type ChunkPool, type PoolContext } from './chunk-pool';
import { EMPTY, type ChunkKey, type OpenFailure, type SealBatchResult, type SealedEntry } from './chunk-work';
import { CODECS, defaultCodec, type CodecId } from './codec';
import { planChunks, type PlannedChunk } from './incremental';
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
import { claimedFormatVersion, isEncryptedObject, openObject, sealObject, sealPlaintextObject } from './crypto';
import type { Keyring } from './keyring';
import { LineageKeys } from './lineage-keys';
import { PackReader, PackWriter } from './packs';
import { createPin, livePinStarts, removeAbandonedPins, type Pin } from './pins';

/**
 * Formats 2 and 3: content-defined chunks, deduplicated, compressed, sealed (AES-256-GCM) and packed.
 *
 *   <root>/<lineage>/keys/data-key.json          the lineage's data key, wrapped by a master key (lineage-keys.ts)
 *   <root>/<lineage>/packs/<packId>.pack          a header, then sealed chunks (packs.ts); immutable once renamed
 *   <root>/<lineage>/pins/<session>.<checkpoint>  present while a writer runs: garbage collection keeps its packs
 *   <root>/<sessionId>/<checkpointId>.manifest    the sealed manifest: chunk list, parent's manifest digest
 *   <root>/<sessionId>/claim.json                 who owns the session id (session-claim.ts); never removed
 *
 * Packs rather than one file per chunk: a checkpoint of 1 GiB is tens of thousands of chunks (bench/chunker.ts), and a file
 * each (create, fsync, rename) costs more than the bytes. A pack is fsynced once, then renamed; the manifest is published last, so a
 * crash leaves at worst an unreferenced pack, which garbage collection removes.
 */
const CHUNKED_FORMAT_VERSIONS = READABLE_FORMAT_VERSIONS.filter((v) => v >= CHUNKED_FORMAT_VERSION);

const MANIFEST_SUFFIX = '.manifest';
const LEGACY_MANIFEST_SUFFIX = '.manifest.json';
const LINEAGE_FILE = 'lineage.json';
/** Plaintext per seal batch and sealed bytes per read batch: large enough that thread messages cost little. */
const BATCH_BYTES = 1024 * 1024;
/** Plaintext bytes of reused chunks after which a batch of them is closed (progress is reported per batch). */
const REUSED_BATCH_BYTES = 64 * 1024 * 1024;
/** Read batches in flight ahead of a restore's consumer. */
const READ_AHEAD_BATCHES = 4;
const MAX_MANIFEST_BYTES = 64 * 1024 * 1024;
/** Folders of a lineage's directory where writers make temp files (a session's own directory has them too). */
const TEMP_DIRS = ['packs', 'keys'];

/** Thrown when a lineage cannot be swept (gc skips it and says why). */
class LineageSkipped extends Error {}

/** A chunked manifest without its chunk list (decoded and checked by manifest-codec.ts). */
const ChunkedManifestHeader = CheckpointManifestSchema.extend({
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

/** `<session>/lineage.json` of a fork: the lineage whose key and packs the session uses. */
const LineageFile = z.object({ lineage: SessionId });
type ChunkedHeader = z.infer<typeof ChunkedManifestHeader>;
/** A chunked checkpoint's manifest (format 2 or 3) as held in memory. */
type ChunkedManifest = ChunkedHeader & { chunks: Location[] };

export interface ChunkedStoreOptions {
  rootDir: string;
  /** Bound into every object's additional data: objects of one tenant never verify for another. */
  tenant?: string;
  /** Master keys. `null` stores plaintext (integrity-checked, not tamper-proof): only when asked for explicitly. */
  keyring: Keyring | null;
  chunker?: ChunkerOptions;
  /** How long an unreferenced pack must be old before garbage collection removes it. */
  gcGraceMs?: number;
  /**
   * How often a writer touches its pin and temp files (TOUCH_INTERVAL_MS by default), so that cleanAbandoned, here
   * or on another worker sharing the store, never takes them for a dead writer's. Keep it far below the cleaning age.
   */
  touchIntervalMs?: number;
  /** Threads that id, compress, seal and open chunks; the process-wide shared pool by default. */
  pool?: ChunkPool;
  /**
   * The manifest format to write: 3 (default), or 2 for a store shared with readers of format 2 only (§8.1 of the
   * design). Both are read either way.
   */
  formatVersion?: 2 | 3;
  /** The codec new chunks are compressed with; this machine's default (zstd if installed, else Brotli) when absent. */
  codec?: CodecId;
}

/** A manifest as read: format 1, or a chunked one with the SHA-256 of its file (what a child's hash-chain link names). */
type Loaded =
  { kind: 'v1'; manifest: CheckpointManifest } | { kind: 'chunked'; manifest: ChunkedManifest; fileDigest: string };

/** A SnapshotStore writing format 3 (or 2 on request) and reading formats 1, 2 and 3. */
export class ChunkedSnapshotStore implements SnapshotStore, SnapshotMaintenance {
  readonly root: string;
  readonly tenant: string;
  private readonly legacy: FsSnapshotStore;
  private readonly chunker: Chunker;
  private readonly gcGraceMs: number;
  private readonly touchIntervalMs: number;
  private readonly pool: ChunkPool;
  private readonly writeFormat: ChunkedManifest['formatVersion'];
  private readonly keys: LineageKeys;
  /** Sessions known to be forks, and their lineage. */
  private readonly lineages = new Map<string, string>();

  constructor(private readonly options: ChunkedStoreOptions) {
    this.root = resolve(options.rootDir);
    this.tenant = options.tenant ?? 'default';
    this.legacy = new FsSnapshotStore(this.root);
    this.chunker = new Chunker(options.chunker ?? DEFAULT_CHUNKER);
    this.gcGraceMs = options.gcGraceMs ?? 60 * 60_000;
    this.touchIntervalMs = options.touchIntervalMs ?? TOUCH_INTERVAL_MS;
    this.pool = options.pool ?? sharedChunkPool();
    this.writeFormat = options.formatVersion ?? ENGINE_FORMAT_VERSION;
    this.keys = new LineageKeys(this.root, this.tenant, options.keyring);
  }

  /** What `status` reports about protection at rest. */
  describeEncryption(): { mode: 'aes-256-gcm' | 'none'; primaryKeyId: string | null } {
    const keyring = this.options.keyring;
    return keyring ? { mode: 'aes-256-gcm', primaryKeyId: keyring.primaryKeyId } : { mode: 'none', primaryKeyId: null };
  }

  /** The codec new chunks are compressed with (what the worker says at start). */
  describeCodec(): 'zstd' | 'brotli' {
    return (this.options.codec ?? defaultCodec()) === CODECS.zstd ? 'zstd' : 'brotli';
  }

  async write(
    checkpoint: NewCheckpoint,
    data: Readable | StateSource,
    options: StoreProgress = {},
  ): Promise<CheckpointManifest> {
    const source = isStateSource(data) ? data : null;
    // Whatever fails, the source is released (a workspace capture thaws its process group).
    const release = (): void => {
      if (source) source.close();
      else (data as Readable).destroy();
    };
    let pin: Pin | null = null;
    let packs: PackWriter | null = null;
    const inflight: Promise<SealBatchResult>[] = [];
    let context: PoolContext | null = null;
    try {
      const { sessionId, checkpointId } = checkNew(NewCheckpointSchema, checkpoint);
      const lineage = await this.lineageOf(sessionId);
      const { signal, onProgress } = options;
      signal?.throwIfAborted();
      if (await this.manifestExists(sessionId, checkpointId)) {
        throw new Error(`checkpoint ${checkpointId} of session ${sessionId} exists already; checkpoints are immutable`);
      }
      this.pool.warm();
      // The pin and the temp packs are touched while the write runs, however long it stalls (abandoned.ts).
      pin = await this.pin(lineage, sessionId, checkpointId, () => packs?.tempPaths() ?? []);
      const key = this.options.keyring ? await this.keys.get(lineage, { create: true }) : null;
      packs = new PackWriter(join(this.lineageDir(lineage), 'packs'), { tenant: this.tenant, lineage, key });
      const packWriter = packs;
      const parent = checkpoint.parentId ? await this.parentInfo(sessionId, checkpoint.parentId) : null;
      // The checkpoint a source's unchanged runs refer to; without it (gone, unreadable, another key) they are read.
      const base = source?.base
        ? this.reusableChunks(
            source.base === checkpoint.parentId ? parent!.manifest : await this.loadChunked(sessionId, source.base),
            key,
          )
        : null;
      const known = new Map<string, Location>(parent?.manifest?.chunks.map((l) => [l[0], l]) ?? []);
      for (const l of base ?? []) if (!known.has(l[0])) known.set(l[0], l);
      context = this.pool.context({
        tenant: this.tenant,
        lineage,
        formatVersion: CHUNKED_FORMAT_VERSION,
        key,
        known: [...known.keys()],
        ...(this.options.codec !== undefined ? { codec: this.options.codec } : {}),
      });
      const pool = this.pool;
      const sealing = context;
      const referencedPacks = new Set<string>();
      const chunks: Location[] = [];
      const listDigest = createHash('sha256');
      let size = 0;
      // Chunks are copied into batches of about BATCH_BYTES; each batch is id'd, compressed and sealed on a pool
      // thread while this one goes on reading and chunking. Results are taken in order, so the manifest is too.
      // Batch buffers are reused: a batch's input comes back with its result, and its output once it is written.
      const inputs: Buffer[] = [];
      const outputs: Buffer[] = [];
      const consume = async (result: SealBatchResult): Promise<void> => {
        let packId = '';
        let at = 0;
        if (result.sealed.length > 0) {
          const { sealed } = result;
          let written: Promise<void>;
          [packId, at, written] = await packWriter.append([sealed]);
          void written.then(
            () => outputs.length < pool.window && outputs.push(Buffer.from(sealed.buffer, 0, sealed.buffer.byteLength)),
            () => undefined, // the write's failure reaches the caller through the pack writer
          );
        } else if (result.sealed.buffer.byteLength > 0 && outputs.length < pool.window) {
          // A spare the batch did not need (every chunk stored already) comes back unused.
          outputs.push(Buffer.from(result.sealed.buffer, 0, result.sealed.buffer.byteLength));
        }
        for (const entry of result.entries) {
          let location = known.get(entry.id);
          if ('known' in entry) {
            if (!location) throw new Error(`chunk ${entry.id} was reported as stored but is not`);
            referencedPacks.add(location[2]);
          } else if (!location) {
            // (A chunk sealed twice in one write — by two threads, or by a thread and this one — keeps its first copy;
            // the second is dead bytes.)
            location = [entry.id, entry.size, packId, at + entry.at, entry.length];
            known.set(entry.id, location);
          }
          chunks.push(location);
          listDigest.update(entry.id, 'hex');
          size += entry.size;
        }
        onProgress?.(size);
      };
      // A batch: new chunks copied into `buffer` (cut at `sizes`), and base chunks taken as they are, all in order
      // (`order`: a new chunk's index in `sizes`, or a reused entry). Reused chunks do not cut batches, so a state
      // with many small changes still seals about BATCH_BYTES at a time.
      const capacity = BATCH_BYTES + this.chunker.options.maxSize;
      let buffer: Buffer | null = null;
      let used = 0;
      let sizes: number[] = [];
      let order: (number | SealedEntry)[] = [];
      let covered = 0;
      const dispatch = (): void => {
        if (order.length === 0) return;
        const batchOrder = order;
        // On a pool thread, or here while the threads are busy (ChunkPool.seal).
        const sealed =
          sizes.length === 0
            ? Promise.resolve<SealBatchResult & { data: Buffer | null }>({ sealed: EMPTY, entries: [], data: null })
            : pool.seal(sealing, buffer!, sizes, outputs.pop() ?? null);
        const merged = sealed.then((result) => {
          if (result.data && inputs.length < pool.window) inputs.push(result.data);
          return {
            sealed: result.sealed,
            entries: batchOrder.map((item) => (typeof item === 'number' ? result.entries[item]! : item)),
          };
        });
        merged.catch(() => undefined); // awaited in order below; a failure must not count as unhandled meanwhile
        inflight.push(merged);
        buffer = null;
        used = 0;
        sizes = [];
        order = [];
        covered = 0;
      };
      for await (const planned of this.plan(data, base, signal)) {
        if ('reuse' in planned) {
          const [id, chunkSize] = base![planned.reuse]!;
          order.push({ id, size: chunkSize, known: true });
          covered += chunkSize;
        } else {
          buffer ??= inputs.pop() ?? Buffer.allocUnsafeSlow(capacity);
          used += planned.chunk.copy(buffer, used);
          order.push(sizes.length);
          sizes.push(planned.chunk.length);
        }
        // Reused chunks cost no sealing: a batch of them closes only every REUSED_BATCH_BYTES, for progress.
        if (used >= BATCH_BYTES || covered >= REUSED_BATCH_BYTES) {
          dispatch();
          while (inflight.length >= pool.window) await consume(await inflight.shift()!);
        }
      }
      dispatch();
      while (inflight.length > 0) await consume(await inflight.shift()!);
      signal?.throwIfAborted();
      await packWriter.close();
      // Packs this checkpoint shares with older ones must still be there, and are touched so that a concurrent
      // garbage collection keeps them (it spares packs touched after the oldest writer's pin).
      await this.requirePacks(lineage, referencedPacks, sessionId, checkpointId, { touch: true });
      const manifest: ChunkedHeader = {
        formatVersion: this.writeFormat,
        checkpointId,
        sessionId,
        lineage,
        tenant: this.tenant,
        sequence: checkpoint.sequence,
        parentId: checkpoint.parentId,
        parentManifestDigest: parent?.manifestDigest ?? null,
        runtime: checkpoint.runtime,
        size,
        digest: `sha256:${listDigest.digest('hex')}`,
        createdAt: new Date().toISOString(),
        ...(checkpoint.label !== undefined ? { label: checkpoint.label } : {}),
        trigger: checkpoint.trigger,
        encryption: { mode: key ? 'aes-256-gcm' : 'none', dataKeyId: key?.dataKeyId ?? null },
      };
      // The key may have been destroyed or replaced on disk while the chunks were sealed: a manifest published now
      // would describe a checkpoint nobody can restore. (The packs written stay for gc.)
      if (key) await this.keys.confirm(lineage, key, { sessionId, checkpointId });
      await this.publishManifest(manifest, { chunks }, key);
      return toPublic(manifest);
    } catch (err) {
      release();
      await Promise.allSettled(inflight);
      await packs?.abort();
      const { sessionId = '', checkpointId = '' } = checkpoint;
      throw asStoreFull(err, sessionId, checkpointId, `checkpoint ${checkpointId} of session ${sessionId}`);
    } finally {
      if (context) this.pool.release(context);
      await pin?.release();
    }
  }

  private async manifestExists(sessionId: string, checkpointId: string): Promise<boolean> {
    return (
      (await exists(this.manifestPath(sessionId, checkpointId))) ||
      (await exists(this.legacyManifestPath(sessionId, checkpointId)))
    );
  }

  /**
   * A new checkpoint of the same session whose state is that of `sourceCheckpointId`: a rewind point, written as a
   * manifest over the source's chunks. No chunk is read or written, so the cost does not depend on the state's
   * size beyond its chunk list. The runtime is the source's. Format-1 sources have no chunks to share: refused.
   */
  async branch(sourceCheckpointId: string, checkpoint: Omit<NewCheckpoint, 'runtime'>): Promise<CheckpointManifest> {
    const { sessionId, checkpointId } = checkNew(NewCheckpointSchema.omit({ runtime: true }), checkpoint);
    checkIds(sessionId, sourceCheckpointId);
    return this.storing(sessionId, checkpointId, async () => {
      const lineage = await this.lineageOf(sessionId);
      if (await this.manifestExists(sessionId, checkpointId)) {
        throw new Error(`checkpoint ${checkpointId} of session ${sessionId} exists already; checkpoints are immutable`);
      }
      const source = await this.loadTable(sessionId, sourceCheckpointId);
      if (source.kind !== 'chunked') {
        throw new SnapshotIncompatibleError(
          `checkpoint ${sourceCheckpointId} is in format ${LEGACY_FORMAT_VERSION}, which has no chunks to share; branching needs format ${CHUNKED_FORMAT_VERSION} or later`,
          sessionId,
          sourceCheckpointId,
        );
      }
      const pin = await this.pin(lineage, sessionId, checkpointId);
      try {
        const key = source.header.encryption.mode === 'aes-256-gcm' ? await this.keys.get(lineage) : null;
        await this.requirePacks(source.header.lineage, source.table.packs, sessionId, sourceCheckpointId, {
          touch: true,
        });
        const parentManifestDigest = checkpoint.parentId
          ? await this.manifestFileDigest(sessionId, checkpoint.parentId)
          : null;
        const manifest: ChunkedHeader = {
          ...source.header,
          formatVersion: this.writeFormat,
          checkpointId,
          sequence: checkpoint.sequence,
          parentId: checkpoint.parentId,
          parentManifestDigest,
          createdAt: new Date().toISOString(),
          trigger: checkpoint.trigger,
          label: checkpoint.label,
        };
        if (manifest.label === undefined) delete manifest.label;
        delete manifest.forkedFrom;
        if (key) await this.keys.confirm(lineage, key, { sessionId, checkpointId });
        await this.publishManifest(manifest, { table: source.table }, key);
        return toPublic(manifest);
      } finally {
        await pin.release();
      }
    });
  }

  /**
   * A new session whose first checkpoint is `source`'s state: it joins the source's lineage (same data key, same
   * packs), so no chunk is read or written and its later checkpoints deduplicate against the lineage. The target
   * session must not exist in the store (a claim on it, and nothing else, is allowed: the claimer forks into it).
   * Its `lineage.json` names the lineage; the manifest commits to the source's manifest (`parentManifestDigest`,
   * `forkedFrom`). Sessions of one lineage share their fate under `shred`.
   */
  async fork(
    source: { sessionId: string; checkpointId: string },
    target: { sessionId: string; checkpointId: string; label?: string; trigger: NewCheckpoint['trigger'] },
  ): Promise<CheckpointManifest> {
    checkIds(source.sessionId, source.checkpointId);
    const { sessionId, checkpointId } = checkNew(
      NewCheckpointSchema.pick({ sessionId: true, checkpointId: true, label: true, trigger: true }),
      target,
    );
    if (sessionId === source.sessionId) throw new Error(`a fork needs a new session, not ${sessionId} itself`);
    return this.storing(sessionId, checkpointId, async () => {
      const existing = await fs.readdir(join(this.root, sessionId)).catch(() => [] as string[]);
      if (existing.some((name) => name !== CLAIM_FILE)) {
        throw new Error(`session ${sessionId} exists already in the store; a fork starts a new one`);
      }
      const loaded = await this.loadTable(source.sessionId, source.checkpointId);
      if (loaded.kind !== 'chunked') {
        throw new SnapshotIncompatibleError(
          `checkpoint ${source.checkpointId} is in format ${LEGACY_FORMAT_VERSION}, which has no chunks to share; forking needs format ${CHUNKED_FORMAT_VERSION} or later`,
          source.sessionId,
          source.checkpointId,
        );
      }
      const origin = loaded.header;
      const lineage = origin.lineage;
      const pin = await this.pin(lineage, sessionId, checkpointId);
      try {
        const key = origin.encryption.mode === 'aes-256-gcm' ? await this.keys.get(lineage) : null;
        await this.requirePacks(lineage, loaded.table.packs, source.sessionId, source.checkpointId, { touch: true });
        const parentManifestDigest = loaded.fileDigest;
        await ensureDir(join(this.root, sessionId));
        const joined = await publish(
          join(this.root, sessionId, LINEAGE_FILE),
          Buffer.from(JSON.stringify({ lineage })),
          { replace: false },
        );
        if (!joined) throw new Error(`session ${sessionId} exists already in the store; a fork starts a new one`);
        this.lineages.set(sessionId, lineage);
        const manifest: ChunkedHeader = {
          ...origin,
          formatVersion: this.writeFormat,
          checkpointId,
          sessionId,
          sequence: 1,
          parentId: null,
          parentManifestDigest,
          createdAt: new Date().toISOString(),
          trigger: target.trigger,
          label: target.label,
          forkedFrom: { sessionId: source.sessionId, checkpointId: source.checkpointId },
        };
        if (manifest.label === undefined) delete manifest.label;
        if (key) await this.keys.confirm(lineage, key, { sessionId, checkpointId });
        await this.publishManifest(manifest, { table: loaded.table }, key);
        return toPublic(manifest);
      } finally {
        await pin.release();
      }
    });
  }

  /**
   * Records that `owner` (a workflow's first run id) owns `sessionId`: see SnapshotStore.claim. The claim is
   * `<session>/claim.json`, beside the session's manifests; gc and shred leave it.
   */
  async claim(sessionId: string, owner: string): Promise<void> {
    await claimSession(this.root, sessionId, owner);
  }

  /** Runs a step that writes to the store; a file system without room makes it a StoreFullError. */
  private async storing<T>(sessionId: string, checkpointId: string, run: () => Promise<T>): Promise<T> {
    try {
      return await run();
    } catch (err) {
      throw asStoreFull(err, sessionId, checkpointId, `checkpoint ${checkpointId} of session ${sessionId}`);
    }
  }

  /**
   * The chunks of a state: base chunks over a source's unchanged runs when its base is usable (see planChunks),
   * otherwise every byte read and chunked.
   */
  private async *plan(
    data: Readable | StateSource,
    base: Location[] | null,
    signal: AbortSignal | undefined,
  ): AsyncGenerator<PlannedChunk> {
    if (isStateSource(data) && base) {
      for await (const planned of planChunks(data.pieces, { sizes: base.map((l) => l[1]) }, this.chunker)) {
        signal?.throwIfAborted();
        yield planned;
      }
      return;
    }
    const bytes = isStateSource(data) ? sourceBytes(data) : data;
    for await (const chunk of this.chunker.chunks(abortable(bytes, signal))) yield { chunk };
  }

  /** A chunked manifest (format 2 or 3), or null if it is missing, unreadable or format 1. */
  private async loadChunked(sessionId: string, checkpointId: string): Promise<ChunkedManifest | null> {
    const loaded = await this.loadManifest(sessionId, checkpointId).catch(() => null);
    return loaded?.kind === 'chunked' ? loaded.manifest : null;
  }

  /**
   * The chunk list of a base checkpoint for reuse by a new one, or null if it cannot serve: missing or unreadable,
   * format 1 (no chunks), or sealed in another mode or under another data key than the new checkpoint (a manifest's
   * chunks share one). Reading every byte instead is slower, never wrong.
   */
  private reusableChunks(base: ChunkedManifest | null, key: ChunkKey | null): Location[] | null {
    if (!base) return null;
    const { mode, dataKeyId } = base.encryption;
    const sameKey = key ? mode === 'aes-256-gcm' && dataKeyId === key.dataKeyId : mode === 'none';
    return sameKey ? base.chunks : null;
  }

  async readManifest(sessionId: string, checkpointId: string): Promise<CheckpointManifest> {
    const loaded = await this.loadManifest(sessionId, checkpointId);
    return loaded.kind === 'v1' ? loaded.manifest : toPublic(loaded.manifest);
  }

  async open(
    sessionId: string,
    checkpointId: string,
    options: StoreProgress = {},
  ): Promise<{ manifest: CheckpointManifest; stream: Readable }> {
    return this.openLoaded(await this.loadManifest(sessionId, checkpointId), sessionId, checkpointId, options);
  }

  /** `open` of a manifest already loaded (verifyLineage has it in hand). */
  private async openLoaded(
    loaded: Loaded,
    sessionId: string,
    checkpointId: string,
    options: StoreProgress = {},
  ): Promise<{ manifest: CheckpointManifest; stream: Readable }> {
    if (loaded.kind === 'v1') return this.legacy.open(sessionId, checkpointId, options);
    const { manifest } = loaded;
    const key = manifest.encryption.mode === 'aes-256-gcm' ? await this.keys.get(manifest.lineage) : null;
    const packsDir = join(this.lineageDir(manifest.lineage), 'packs');
    await this.requirePacks(
      manifest.lineage,
      manifest.chunks.map((c) => c[2]),
      sessionId,
      checkpointId,
      { touch: false },
    );
    const reader = new PackReader(
      packsDir,
      { tenant: this.tenant, lineage: manifest.lineage, key },
      { sessionId, checkpointId },
      BATCH_BYTES * 1.5,
    );
    const pool = this.pool;
    const context = {
      tenant: this.tenant,
      lineage: manifest.lineage,
      formatVersion: CHUNKED_FORMAT_VERSION,
      key,
      dataKeyId: key?.dataKeyId ?? null,
    };
    // Batches of consecutive chunks are read (one read per run of adjacent objects) a few batches ahead of the
    // consumer and opened — authenticated, decrypted, decompressed — on a pool thread or here (see below);
    // plaintext is yielded in manifest order.
    // Encrypted chunks open into new buffers, so a batch's read buffer is free again once it is opened: reused,
    // instead of leaving a MiB of garbage per batch. (Plaintext chunks are views of it: never reused.)
    const spare: Buffer[] = [];
    const readAndOpen = async (batch: Location[]): Promise<Buffer[]> => {
      const { sealed, entries } = await reader.readBatch(batch, spare.pop());
      // Opened (authenticated, decrypted, decompressed) on a pool thread, or here while the threads are busy
      // (ChunkPool.open): whichever side has time takes the next batch.
      const { result: opened, sealed: back } = await pool.open(context, sealed, entries, { move: true });
      if (!opened.ok) throw openFailureError(opened.failure, sessionId, checkpointId);
      if (key && back.byteOffset === 0) spare.push(Buffer.from(back.buffer, 0, back.buffer.byteLength));
      return opened.chunks;
    };
    async function* chunks(): AsyncGenerator<Buffer> {
      const inflight: Promise<Buffer[]>[] = [];
      let done = 0;
      const batches = readBatches(manifest.chunks);
      try {
        for (;;) {
          options.signal?.throwIfAborted();
          const next = batches.next();
          if (!next.done) {
            const opened = readAndOpen(next.value);
            opened.catch(() => undefined); // awaited in order below
            inflight.push(opened);
            if (inflight.length < READ_AHEAD_BATCHES) continue;
          }
          const ready = inflight.shift();
          if (!ready) break;
          for (const plain of await ready) {
            done += plain.length;
            options.onProgress?.(done);
            yield plain;
          }
        }
      } finally {
        await Promise.allSettled(inflight);
        await reader.close();
      }
    }
    return { manifest: toPublic(manifest), stream: Readable.from(chunks(), { objectMode: false }) };
  }

  async verify(sessionId: string, checkpointId: string): Promise<CheckpointManifest> {
    const { manifest, stream } = await this.open(sessionId, checkpointId);
    // Every chunk is authenticated as it is read; reading to the end is the verification.
    for await (const piece of stream) void piece;
    return manifest;
  }

  async list(sessionId: string): Promise<CheckpointManifest[]> {
    if (!SessionId.safeParse(sessionId).success) return [];
    const names = await fs.readdir(join(this.root, sessionId)).catch(() => [] as string[]);
    const ids = names
      .filter((n) => n.endsWith(MANIFEST_SUFFIX) && !n.startsWith('.'))
      .map((n) => n.slice(0, -MANIFEST_SUFFIX.length));
    const manifests = await Promise.all(ids.map((id) => this.readManifest(sessionId, id).catch(() => null)));
    const v2 = manifests.filter((m): m is CheckpointManifest => m !== null);
    const v1 = await this.legacy.list(sessionId);
    return [...v1, ...v2].sort((a, b) => a.sequence - b.sequence);
  }

  async delete(sessionId: string, checkpointId: string): Promise<void> {
    checkIds(sessionId, checkpointId);
    await fs.rm(this.manifestPath(sessionId, checkpointId), { force: true });
    await this.legacy.delete(sessionId, checkpointId);
  }

  /**
   * Walks a session's checkpoints oldest first and checks each manifest, its link to its parent's manifest, and
   * every chunk's authentication tag. Reports one status per checkpoint; changes nothing.
   */
  async verifyLineage(sessionId: string): Promise<VerifyResult[]> {
    checkIds(sessionId, 'x');
    const names = await fs.readdir(join(this.root, sessionId)).catch(() => [] as string[]);
    const ids = new Set<string>();
    for (const n of names) {
      if (n.startsWith('.')) continue;
      if (n.endsWith(LEGACY_MANIFEST_SUFFIX)) ids.add(n.slice(0, -LEGACY_MANIFEST_SUFFIX.length));
      else if (n.endsWith(MANIFEST_SUFFIX)) ids.add(n.slice(0, -MANIFEST_SUFFIX.length));
    }
    const results: VerifyResult[] = [];
    // File digests of the manifests loaded so far: a parent verified before its child is not read again for the
    // child's link (ids sort by sequence as the workflow names them, so parents usually come first).
    const digests = new Map<string, string>();
    for (const checkpointId of [...ids].sort()) {
      let sequence: number | null = null;
      let formatVersion: number | null = null;
      try {
        const loaded = await this.loadManifest(sessionId, checkpointId);
        if (loaded.kind === 'chunked') digests.set(checkpointId, loaded.fileDigest);
        sequence = loaded.manifest.sequence;
        formatVersion = loaded.manifest.formatVersion;
        const link =
          loaded.kind === 'chunked'
            ? (loaded.manifest.forkedFrom ??
              (loaded.manifest.parentId ? { sessionId, checkpointId: loaded.manifest.parentId } : null))
            : null;
        if (loaded.kind === 'chunked' && link && loaded.manifest.parentManifestDigest) {
          const parent =
            (link.sessionId === sessionId ? digests.get(link.checkpointId) : undefined) ??
            (await this.manifestFileDigest(link.sessionId, link.checkpointId));
          if (parent !== null && parent !== loaded.manifest.parentManifestDigest) {
            throw new SnapshotTamperedError(
              `checkpoint ${checkpointId}: its parent ${link.checkpointId} is not the manifest it was written after`,
              'tampered',
              { sessionId, checkpointId },
            );
          }
        }
        // Every chunk is authenticated as it is read; reading to the end is the verification.
        for await (const piece of (await this.openLoaded(loaded, sessionId, checkpointId)).stream) void piece;
        results.push({ checkpointId, sequence, formatVersion, status: 'ok' });
      } catch (err) {
        // What is not a snapshot error is not the checkpoint's (a failing disk, a codec this worker lacks): the
        // verification itself failed, and says so, rather than calling a sound checkpoint corrupt.
        if (!(err instanceof SnapshotError)) throw err;
        results.push({
          checkpointId,
          sequence,
          formatVersion,
          status: verificationStatusOf(err),
          detail: err.message,
        });
      }
    }
    return results.sort(
      (a, b) => (a.sequence ?? 0) - (b.sequence ?? 0) || a.checkpointId.localeCompare(b.checkpointId),
    );
  }

  /**
   * Removes what writers that died mid-write left: temp files (packs being written, manifests, keys, claims and
   * lineage pointers being published, format-1 data) and pins, once untouched for `olderThanMs` (ABANDONED_AFTER_MS by
   * default; a pin of a writer from before pins were touched, UNTOUCHED_PIN_MS). A live writer touches its pin and temp files every
   * `touchIntervalMs`, so only a dead writer's are that old. Never touches a manifest, a pack in place, a key or a
   * claim. Run at worker start and by gc.
   */
  async cleanAbandoned(options: CleanAbandonedOptions = {}): Promise<AbandonedReport> {
    const age = abandonedAge(options);
    const dryRun = options.dryRun ?? false;
    // Format-1 temp files live in the session directories too, under the same names' rule.
    const temps = await removeAbandonedTemps(this.root, age.before, { subdirs: TEMP_DIRS, dryRun });
    const pins = await removeAbandonedPins(this.root, age, dryRun);
    return { tempFiles: temps.files, pins: pins.pins, bytes: temps.bytes + pins.bytes };
  }

  /**
   * Mark and sweep: a pack survives if any manifest of its lineage references it, if it is younger than the grace
   * period, or if it was written or touched after the oldest running writer started (its pin). Safe while
   * checkpoints are being written: a writer pins before its first pack and touches every older pack it reuses.
   * Dead writers' temp files and pins go first (cleanAbandoned), so a stale pin no longer holds packs back.
   */
  async gc(options: { dryRun?: boolean; now?: number } = {}): Promise<GcReport> {
    const dryRun = options.dryRun ?? false;
    const startedAt = options.now ?? Date.now();
    const cleaning = { olderThanMs: ABANDONED_AFTER_MS, now: startedAt };
    const abandoned = await this.cleanAbandoned({ ...cleaning, dryRun });
    const abandonedAt = abandonedAge(cleaning);
    const report: GcReport = {
      dryRun,
      lineages: 0,
      skipped: [],
      packsKept: 0,
      packsRemoved: [],
      bytesRemoved: 0,
      abandoned,
    };
    const sessions = await sessionDirs(this.root);
    // The sessions of each lineage (a lineage is itself and its forks); all their manifests keep its packs.
    const members = new Map<string, string[]>();
    const unplaced: string[] = [];
    for (const session of sessions) {
      const lineage = await this.lineageOf(session).catch(() => null);
      if (lineage === null) unplaced.push(session);
      else members.set(lineage, [...(members.get(lineage) ?? []), session]);
    }
    for (const lineage of sessions) {
      const packsDir = join(this.lineageDir(lineage), 'packs');
      const packNames = await fs.readdir(packsDir).catch(() => [] as string[]);
      if (packNames.length === 0) continue;
      report.lineages++;
      if (unplaced.length > 0) {
        // A session whose lineage is unknown might reference any lineage's packs: sweep nothing.
        report.skipped.push({ lineage, reason: `the lineage of ${unplaced.join(', ')} is unreadable` });
        continue;
      }
      // Abandoned pins are gone (or, in a dry run, counted as gone): only live writers hold packs back.
      const starts = await livePinStarts(this.lineageDir(lineage), abandonedAt);
      const threshold = Math.min(startedAt - this.gcGraceMs, ...starts);
      let live: Set<string>;
      try {
        live = await this.referencedPacks(lineage, members.get(lineage) ?? []);
      } catch (err) {
        if (!(err instanceof LineageSkipped)) throw err;
        report.skipped.push({ lineage, reason: err.message });
        continue;
      }
      for (const name of packNames) {
        const path = join(packsDir, name);
        const st = await fs.stat(path).catch(() => null);
        if (!st) continue;
        // Counted (and, unless a dry run, removed) by cleanAbandoned above.
        if (isTempName(name) && st.mtimeMs < abandonedAt.before) continue;
        const packId = name.replace(/\.pack$/, '').replace(/^\.(.*)\.tmp$/, '$1');
        // Temp files of writers that crashed go like unreferenced packs, once they are older than the threshold.
        if (live.has(packId) || st.mtimeMs >= threshold || !(name.endsWith('.pack') || name.endsWith('.tmp'))) {
          report.packsKept++;
          continue;
        }
        report.packsRemoved.push({ lineage, packId, bytes: st.size });
        report.bytesRemoved += st.size;
        if (!dryRun) await fs.rm(path, { force: true });
      }
    }
    return report;
  }

  /** Re-wraps every lineage's data key under the primary master key. Chunks are not rewritten. */
  async rekey(): Promise<{ rewrapped: number; unchanged: number }> {
    this.keys.requireKeyring();
    let rewrapped = 0;
    let unchanged = 0;
    for (const lineage of await this.keys.lineages()) {
      if (await this.keys.rewrap(lineage)) rewrapped++;
      else unchanged++;
    }
    return { rewrapped, unchanged };
  }

  /**
   * Destroys the data key of the session's lineage: every checkpoint of the session, and of every other session of
   * its lineage (its origin and forks), is unreadable from then on. Returns the lineage. The session's claim stays:
   * its id remains used.
   */
  async shred(sessionId: string): Promise<string> {
    checkIds(sessionId, 'x');
    const lineage = await this.lineageOf(sessionId);
    await this.keys.destroy(lineage);
    return lineage;
  }

  // ---- internals ---------------------------------------------------------------------------------------------

  /**
   * Seals a manifest (under the lineage's key, or plaintext) and publishes it: the checkpoint exists from here on.
   * The chunks come as a list, or as a table read from another manifest (copied as it is in format 3).
   */
  private async publishManifest(
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
    // Linked, not renamed, into place: of two writers of one id the second fails instead of replacing the first
    // (a runtime told the second had stored its capture would then describe a checkpoint that is not on disk).
    const published = await publish(this.manifestPath(manifest.sessionId, manifest.checkpointId), sealed, {
      replace: false,
    });
    if (!published) {
      throw new Error(
        `checkpoint ${manifest.checkpointId} of session ${manifest.sessionId} exists already; checkpoints are immutable`,
      );
    }
  }

  private async loadManifest(sessionId: string, checkpointId: string): Promise<Loaded> {
    const read = await this.readManifestBody(sessionId, checkpointId);
    if (read.kind === 'v1') return read;
    const { version, body, fileDigest } = read;
    const { header, chunks, size } = manifestBody(checkpointId, sessionId, () => {
      if (version < TABLE_FORMAT_VERSION) {
        const json = decodeJsonBody(body);
        return { ...json, size: json.chunks.reduce((n, c) => n + c[1], 0) };
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
  private async loadTable(
    sessionId: string,
    checkpointId: string,
  ): Promise<{ kind: 'v1' } | { kind: 'chunked'; header: ChunkedHeader; table: ChunkTable; fileDigest: string }> {
    const read = await this.readManifestBody(sessionId, checkpointId);
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
  private async readManifestBody(
    sessionId: string,
    checkpointId: string,
  ): Promise<
    { kind: 'v1'; manifest: CheckpointManifest } | { kind: 'sealed'; version: number; body: Buffer; fileDigest: string }
  > {
    if (!SessionId.safeParse(sessionId).success || !CheckpointId.safeParse(checkpointId).success) {
      throw new SnapshotNotFoundError(`no checkpoint ${checkpointId} of session ${sessionId}`, sessionId, checkpointId);
    }
    const path = this.manifestPath(sessionId, checkpointId);
    const sealed = await readSmall(path, MAX_MANIFEST_BYTES);
    if (sealed === null) return { kind: 'v1', manifest: await this.legacy.readManifest(sessionId, checkpointId) };
    const lineage = await this.lineageOf(sessionId);
    const peek = isEncryptedObject(sealed);
    const key = peek && this.options.keyring ? await this.keys.get(lineage) : null;
    if (peek && !this.options.keyring) {
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

  private async parentInfo(
    sessionId: string,
    parentId: string,
  ): Promise<{ manifest: ChunkedManifest | null; manifestDigest: string | null }> {
    try {
      const loaded = await this.loadManifest(sessionId, parentId);
      if (loaded.kind === 'chunked') return { manifest: loaded.manifest, manifestDigest: loaded.fileDigest };
    } catch {
      // A parent that cannot be read only costs deduplication; the new checkpoint stands on its own.
    }
    return { manifest: null, manifestDigest: await this.manifestFileDigest(sessionId, parentId) };
  }

  private async manifestFileDigest(sessionId: string, checkpointId: string): Promise<string | null> {
    const bytes =
      (await readSmall(this.manifestPath(sessionId, checkpointId), MAX_MANIFEST_BYTES)) ??
      (await readSmall(this.legacyManifestPath(sessionId, checkpointId), MAX_MANIFEST_BYTES));
    return bytes ? fileDigest(bytes) : null;
  }

  private async referencedPacks(lineage: string, sessions: readonly string[]): Promise<Set<string>> {
    const live = new Set<string>();
    for (const session of sessions) {
      const names = await fs.readdir(join(this.root, session)).catch(() => [] as string[]);
      for (const name of names) {
        if (!name.endsWith(MANIFEST_SUFFIX) || name.startsWith('.')) continue;
        const checkpointId = name.slice(0, -MANIFEST_SUFFIX.length);
        try {
          const loaded = await this.loadManifest(session, checkpointId);
          if (loaded.kind === 'chunked') for (const c of loaded.manifest.chunks) live.add(c[2]);
        } catch (err) {
          // A manifest that cannot be read might still reference packs: never sweep what it may need.
          const where = session === lineage ? '' : ` of fork ${session}`;
          throw new LineageSkipped(`manifest ${checkpointId}${where} is unreadable (${messageOf(err)})`);
        }
      }
    }
    return live;
  }

  /** The lineage of a session: its own id, or for a fork the one its `lineage.json` names. */
  private async lineageOf(sessionId: string): Promise<string> {
    const known = this.lineages.get(sessionId);
    if (known) return known;
    const raw = await readSmall(join(this.root, sessionId, LINEAGE_FILE), MAX_MANIFEST_BYTES);
    if (raw === null) return sessionId;
    let parsed: { lineage: string };
    try {
      parsed = LineageFile.parse(JSON.parse(raw.toString('utf8')));
    } catch (err) {
      throw new SnapshotCorruptError(`${LINEAGE_FILE} of session ${sessionId} is malformed`, sessionId, '', {
        cause: err,
      });
    }
    // Written once, never changed: a forged one fails every manifest of the session (their header names the lineage).
    this.lineages.set(sessionId, parsed.lineage);
    return parsed.lineage;
  }

  /** Marks a checkpoint as being written into a lineage, for gc (pins.ts); touched, with `alsoTouch`, until released. */
  private pin(
    lineage: string,
    sessionId: string,
    checkpointId: string,
    alsoTouch?: () => Iterable<string>,
  ): Promise<Pin> {
    return createPin(this.lineageDir(lineage), sessionId, checkpointId, {
      touchIntervalMs: this.touchIntervalMs,
      ...(alsoTouch ? { alsoTouch } : {}),
    });
  }

  /**
   * Every pack named must exist (else SnapshotNotFound). With `touch` (a new manifest over existing chunks: a write's
   * reused packs, a rewind's or a fork's source), each is touched too, so that a concurrent gc keeps it.
   */
  private async requirePacks(
    lineage: string,
    packIds: Iterable<string>,
    sessionId: string,
    checkpointId: string,
    { touch }: { touch: boolean },
  ): Promise<void> {
    const packsDir = join(this.lineageDir(lineage), 'packs');
    for (const packId of new Set(packIds)) {
      const path = join(packsDir, `${packId}.pack`);
      const now = new Date();
      const present = touch
        ? await fs.utimes(path, now, now).then(
            () => true,
            () => false,
          )
        : await exists(path);
      if (!present) {
        throw new SnapshotNotFoundError(
          `checkpoint ${checkpointId} of session ${sessionId} is missing pack ${packId}`,
          sessionId,
          checkpointId,
        );
      }
    }
  }

  private lineageDir(lineage: string): string {
    return join(this.root, lineage);
  }

  private manifestPath(sessionId: string, checkpointId: string): string {
    return join(this.root, sessionId, `${checkpointId}${MANIFEST_SUFFIX}`);
  }

  private legacyManifestPath(sessionId: string, checkpointId: string): string {
    return join(this.root, sessionId, `${checkpointId}${LEGACY_MANIFEST_SUFFIX}`);
  }
}

/**
 * The chunks of a manifest in order, in batches of about BATCH_BYTES of sealed or of plain bytes, whichever is more:
 * a MiB of text compressed 14:1 opens to 14 MiB, and a few such batches in flight would cost as many.
 */
function* readBatches(chunks: readonly Location[]): Generator<Location[]> {
  let batch: Location[] = [];
  let bytes = 0;
  for (const location of chunks) {
    batch.push(location);
    bytes += Math.max(location[1], location[4]);
    if (bytes >= BATCH_BYTES) {
      yield batch;
      batch = [];
      bytes = 0;
    }
  }
  if (batch.length > 0) yield batch;
}

/** A chunk refused by a pool thread, as the typed error of the checkpoint it belongs to. */
function openFailureError(failure: OpenFailure, sessionId: string, checkpointId: string): Error {
  const where = `chunk ${failure.id} of checkpoint ${checkpointId}`;
  switch (failure.kind) {
    case 'sealed':
      return new SnapshotTamperedError(failure.message, failure.reason, {
        sessionId,
        checkpointId,
        objectId: failure.id,
      });
    case 'decode':
      return new SnapshotCorruptError(`${where} does not decode: ${failure.message}`, sessionId, checkpointId);
    case 'unavailable':
      // Not the checkpoint's fault: a retryable error, so that a restore is not failed over to an older checkpoint
      // (or the session failed) because this worker lacks what another one wrote with.
      return new Error(`this worker cannot decode ${where}: ${failure.message}`);
    case 'id-mismatch':
      return new SnapshotCorruptError(`${where} does not match its id`, sessionId, checkpointId);
    case 'other':
      return new Error(`${where} could not be opened: ${failure.message}`);
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

function fileDigest(bytes: Buffer): string {
  return `sha256:${createHash('sha256').update(bytes).digest('hex')}`;
}

function toPublic(m: ChunkedHeader): CheckpointManifest {
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
  };
}

function checkIds(sessionId: string, checkpointId: string): { sessionId: string; checkpointId: string } {
  if (!SessionId.safeParse(sessionId).success || !CheckpointId.safeParse(checkpointId).success) {
    throw new TypeError(
      `invalid session or checkpoint id: ${JSON.stringify(sessionId)} / ${JSON.stringify(checkpointId)}`,
    );
  }
  return { sessionId, checkpointId };
}

/** The pieces of `source`, stopping with the signal's reason once it aborts. */
async function* abortable(source: AsyncIterable<unknown>, signal?: AbortSignal): AsyncGenerator<Uint8Array> {
  for await (const piece of source) {
    signal?.throwIfAborted();
    yield piece as Uint8Array;
  }
}

function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
