import type { Readable } from 'node:stream';
import { join } from 'node:path';
import { DEFAULT_TENANT } from '../../domain/names';
import { SessionId, TenantId } from '../../domain/schemas';
import { TOUCH_INTERVAL_MS, type AbandonedReport, type CleanAbandonedOptions } from '../abandoned';
import { SnapshotError, SnapshotIncompatibleError, SnapshotNotFoundError, StoreUnavailableError } from '../errors';
import { CHUNKED_FORMAT_VERSION, ENGINE_FORMAT_VERSION, LEGACY_FORMAT_VERSION } from '../format';
import { FsSnapshotStore } from '../fs-snapshot-store';
import { checkNew, NewCheckpointSchema } from '../manifest';
import type { GcReport, SnapshotMaintenance, VerifyResult } from '../snapshot-maintenance';
import type { CheckpointManifest, NewCheckpoint, SnapshotStore, StoreProgress } from '../snapshot-store';
import { CLAIM_FILE, claimSession } from '../session-claim';
import { isStateSource, type StateSource } from '../state-source';
import { asStoreFull } from '../store-full';
import {
  type ReadTimelineOptions,
  type SealerFor,
  type TimelineLog,
  type TimelinePage,
  type TimelineRecord,
} from '../timeline-log';
import { Chunker, DEFAULT_CHUNKER, type ChunkerOptions } from './chunker';
import { sharedChunkPool, type ChunkPool, type PoolContext } from './chunk-pool';
import { CODECS, defaultCodec, type CodecId } from './codec';
import type { Keyring } from './keyring';
import { checkIds, StoreLayout } from './layout';
import type { BlobBackend } from '../blob/backend';
import { FsBlobBackend } from '../blob/fs-backend';
import { PrefixedBlobBackend } from '../blob/prefixed';
import { LineageKeys } from './lineage-keys';
import { StoreMaintenance } from './maintenance';
import type { Location } from './manifest-codec';
import { existsAlready, Manifests, toPublic, type ChunkedHeader, type Loaded } from './manifests';
import { readChunks } from './pack-reads';
import { PackWriter } from './packs';
import type { Pin } from './pins';
import { plannedChunks, reusableChunks, SealPipeline } from './seal-pipeline';
import { timelineSealer } from './timeline-seal';
import { TimelineObjects } from '../timeline-objects';

/**
 * Formats 2 and 3: content-defined chunks, deduplicated, compressed, sealed (AES-256-GCM) and packed; what lives
 * where is in layout.ts.
 *
 * Packs rather than one file per chunk: a checkpoint of a GiB is tens of thousands of chunks (bench/chunker.ts prints
 * the count), and a file each (create, fsync, rename) costs more than the bytes. A pack is fsynced once, then renamed;
 * the manifest is published last, so a crash leaves at worst an unreferenced pack, which garbage collection removes.
 *
 * This class wires the parts: manifests.ts (load, seal, check), seal-pipeline.ts (the write side), pack-reads.ts
 * (the read side), lineage-keys.ts, layout.ts, and maintenance.ts behind SnapshotMaintenance.
 */

type CheckpointAddress = { sessionId: string; checkpointId: string };

const chunkIdOf = ([id]: Location): string => id;

/**
 * Where the stores of tenants other than `default` live: `<root>/_tenants/<tenant>/`, laid out like the root. No
 * session id starts with "_", so the folder is never taken for a session's.
 */
export const TENANTS_DIR = '_tenants';

export interface ChunkedStoreOptions {
  /**
   * Where the store's objects are: a blob backend (blob/backend.ts), or a directory for the file-system backend (the
   * embedded default). One of the two.
   */
  backend?: BlobBackend;
  rootDir?: string;
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

/**
 * A SnapshotStore writing format 3 (or 2 on request) and reading formats 1, 2 and 3, with each session's timeline
 * log (timeline-objects.ts) sealed under its lineage's data key (timeline-seal.ts).
 */
export class ChunkedSnapshotStore implements SnapshotStore, TimelineLog, SnapshotMaintenance {
  /** The directory of the file-system backend the store runs on; null on any other backend. */
  private readonly fsRoot: string | null;
  readonly backend: BlobBackend;
  readonly tenant: string;
  private readonly legacy: LegacyReader;
  private readonly chunker: Chunker;
  private readonly pool: ChunkPool;
  private readonly writeFormat: ChunkedHeader['formatVersion'];
  private readonly layout: StoreLayout;
  private readonly keys: LineageKeys;
  private readonly manifests: Manifests;
  private readonly maintenance: StoreMaintenance;
  private readonly timeline: TimelineLog & { remove(sessionId: string): Promise<void> };
  /** The stores of other tenants, made on first use (a tenant's store points back here: tenants never nest). */
  private readonly tenants = new Map<string, ChunkedSnapshotStore>();
  private parent: ChunkedSnapshotStore | undefined;

  constructor(private readonly options: ChunkedStoreOptions) {
    const backend =
      options.backend ??
      new FsBlobBackend(requireRoot(options.rootDir), {
        ...(options.touchIntervalMs !== undefined ? { touchIntervalMs: options.touchIntervalMs } : {}),
      });
    this.backend = backend;
    this.fsRoot = fsRootOf(backend);
    this.layout = new StoreLayout(backend, this.fsRoot, options.touchIntervalMs ?? TOUCH_INTERVAL_MS);
    this.tenant = options.tenant ?? 'default';
    // Format 1 was only ever written to a local directory.
    this.legacy = this.fsRoot !== null ? new FsSnapshotStore(this.fsRoot) : NO_FORMAT_1;
    this.chunker = new Chunker(options.chunker ?? DEFAULT_CHUNKER);
    this.pool = options.pool ?? sharedChunkPool();
    this.writeFormat = options.formatVersion ?? ENGINE_FORMAT_VERSION;
    this.keys = new LineageKeys(backend, this.tenant, options.keyring);
    this.manifests = new Manifests(this.layout, this.keys, this.tenant, this.legacy);
    const sealerFor: SealerFor = async (sessionId, purpose) => {
      const lineage = await this.layout.lineageOf(sessionId);
      const key = options.keyring ? await this.keys.get(lineage, { create: purpose === 'append' }) : null;
      return timelineSealer({ tenant: this.tenant, lineage, sessionId }, key);
    };
    // One object per entry on every backend, a local directory too (layout 2); the segment files earlier releases
    // appended to (layout 1) are read beside them, never written.
    this.timeline = new TimelineObjects(backend, sealerFor);
    this.maintenance = new StoreMaintenance({
      layout: this.layout,
      manifests: this.manifests,
      keys: this.keys,
      gcGraceMs: options.gcGraceMs ?? 60 * 60_000,
      open: async (loaded, sessionId, checkpointId) => (await this.openLoaded(loaded, sessionId, checkpointId)).stream,
      removeTimeline: (sessionId) => this.timeline.remove(sessionId),
    });
  }

  /**
   * The store of `tenant`: this one for `default`, else one under `<root>/_tenants/<tenant>` with the same keys and
   * settings, which binds that tenant into every object it writes and expects it in every object it reads.
   * @throws TypeError for a name that is not a tenant id.
   */
  forTenant(tenant: string): ChunkedSnapshotStore {
    if (this.parent) return this.parent.forTenant(tenant);
    if (tenant === DEFAULT_TENANT) return this;
    if (!TenantId.safeParse(tenant).success) throw new TypeError(`invalid tenant: ${JSON.stringify(tenant)}`);
    let store = this.tenants.get(tenant);
    if (!store) {
      const backend = new PrefixedBlobBackend(this.backend, `${TENANTS_DIR}/${tenant}`);
      store = new ChunkedSnapshotStore({ ...this.options, rootDir: undefined, backend, tenant });
      store.parent = this;
      this.tenants.set(tenant, store);
    }
    return store;
  }

  /** The tenants other than `default` whose folders this store holds. */
  async tenantsOnDisk(): Promise<string[]> {
    const root = this.parent ?? this;
    const tenants = new Set<string>();
    for await (const { key } of root.backend.list(`${TENANTS_DIR}/`)) {
      const tenant = key.split('/')[1]!;
      if (TenantId.safeParse(tenant).success) tenants.add(tenant);
    }
    return [...tenants];
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
    let pipeline: SealPipeline | null = null;
    let context: PoolContext | null = null;
    try {
      const { sessionId, checkpointId } = checkNew(NewCheckpointSchema, checkpoint);
      const lineage = await this.layout.lineageOf(sessionId);
      const { signal, onProgress } = options;
      signal?.throwIfAborted();
      if (await this.layout.manifestExists(sessionId, checkpointId)) throw existsAlready(sessionId, checkpointId);
      this.pool.warm();
      // The pin and the temp packs are touched while the write runs, however long it stalls (abandoned.ts).
      pin = await this.layout.pin(lineage, sessionId, checkpointId);
      const key = this.options.keyring ? await this.keys.get(lineage, { create: true }) : null;
      packs = new PackWriter(this.backend, { tenant: this.tenant, lineage, key });
      const parent = checkpoint.parentId ? await this.manifests.parentInfo(sessionId, checkpoint.parentId) : null;
      // The checkpoint a source's unchanged runs refer to; without it (gone, unreadable, another key) they are read.
      const base = source?.base
        ? reusableChunks(
            source.base === checkpoint.parentId
              ? parent!.manifest
              : await this.manifests.loadChunked(sessionId, source.base),
            key,
          )
        : null;
      // Chunks the new checkpoint may reference without sealing them again: its parent's and its base's.
      const known = new Map<string, Location>();
      for (const location of parent?.manifest?.chunks ?? []) known.set(chunkIdOf(location), location);
      for (const location of base ?? []) if (!known.has(chunkIdOf(location))) known.set(chunkIdOf(location), location);
      context = this.pool.context({
        tenant: this.tenant,
        lineage,
        formatVersion: CHUNKED_FORMAT_VERSION,
        key,
        known: [...known.keys()],
        ...(this.options.codec !== undefined ? { codec: this.options.codec } : {}),
      });
      const parts = { pool: this.pool, context, packs, known, maxChunkSize: this.chunker.options.maxSize, onProgress };
      let state: Readable | StateSource = data;
      let stateBase = base;
      if (source?.precopy) {
        // The draft's chunks go into this write's packs (and `known`), and the state's runs reuse them: what is
        // sealed after the draft is about what changed since. Draft chunks the state does not keep are dead bytes.
        pipeline = new SealPipeline({ ...parts, base });
        const draft = { base: source.base, pieces: source.precopy, close: () => undefined };
        for await (const planned of plannedChunks(draft, base, this.chunker, signal)) await pipeline.add(planned);
        await pipeline.finish();
        stateBase = pipeline.chunks;
        state = { base: source.base, pieces: source.pieces, close: () => undefined };
      }
      pipeline = new SealPipeline({ ...parts, base: stateBase });
      for await (const planned of plannedChunks(state, stateBase, this.chunker, signal)) await pipeline.add(planned);
      const digest = await pipeline.finish();
      signal?.throwIfAborted();
      await packs.close();
      // Packs this checkpoint shares with older ones are named in its pin, so that a collection on any host keeps
      // them, and must still be there (pins.ts says why checking after naming them is enough).
      await pin.protect(pipeline.referencedPacks);
      await this.layout.requirePacks(lineage, pipeline.referencedPacks, sessionId, checkpointId);
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
        size: pipeline.size,
        digest,
        createdAt: new Date().toISOString(),
        ...(checkpoint.label !== undefined ? { label: checkpoint.label } : {}),
        trigger: checkpoint.trigger,
        encryption: { mode: key ? 'aes-256-gcm' : 'none', dataKeyId: key?.dataKeyId ?? null },
      };
      // The key may have been destroyed or replaced on disk while the chunks were sealed: a manifest published now
      // would describe a checkpoint nobody can restore. (The packs written stay for gc.)
      if (key) await this.keys.confirm(lineage, key, { sessionId, checkpointId });
      await this.manifests.publish(manifest, { chunks: pipeline.chunks }, key);
      return toPublic(manifest);
    } catch (err) {
      release();
      await pipeline?.settle();
      await packs?.abort();
      const { sessionId = '', checkpointId = '' } = checkpoint;
      throw asStoreFull(err, sessionId, checkpointId, `checkpoint ${checkpointId} of session ${sessionId}`);
    } finally {
      if (context) this.pool.release(context);
      await pin?.release();
    }
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
      const lineage = await this.layout.lineageOf(sessionId);
      if (await this.layout.manifestExists(sessionId, checkpointId)) throw existsAlready(sessionId, checkpointId);
      return this.shareChunks(
        { sessionId, checkpointId },
        { sessionId, checkpointId: sourceCheckpointId },
        'branching',
        {
          lineage: () => lineage,
          manifest: async (origin) => {
            const manifest: ChunkedHeader = {
              ...origin,
              formatVersion: this.writeFormat,
              checkpointId,
              sequence: checkpoint.sequence,
              parentId: checkpoint.parentId,
              parentManifestDigest: checkpoint.parentId
                ? await this.manifests.fileDigest(sessionId, checkpoint.parentId)
                : null,
              createdAt: new Date().toISOString(),
              trigger: checkpoint.trigger,
              label: checkpoint.label,
            };
            delete manifest.forkedFrom;
            return manifest;
          },
        },
      );
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
    const taken = () => new Error(`session ${sessionId} exists already in the store; a fork starts a new one`);
    return this.storing(sessionId, checkpointId, async () => {
      const existing = await this.layout.sessionEntries(sessionId);
      if (existing.some((name) => name !== CLAIM_FILE)) throw taken();
      return this.shareChunks({ sessionId, checkpointId }, source, 'forking', {
        lineage: (origin) => origin.lineage,
        manifest: async (origin, originDigest) => {
          if (!(await this.layout.joinLineage(sessionId, origin.lineage))) throw taken();
          return {
            ...origin,
            formatVersion: this.writeFormat,
            checkpointId,
            sessionId,
            sequence: 1,
            parentId: null,
            parentManifestDigest: originDigest,
            createdAt: new Date().toISOString(),
            trigger: target.trigger,
            label: target.label,
            forkedFrom: { sessionId: source.sessionId, checkpointId: source.checkpointId },
          };
        },
      });
    });
  }

  /**
   * What branch and fork share: a new manifest (made by `manifest` from the source's header and the digest of its
   * file) over the chunks of `source`, in `lineage`, pinned while it is written. The source's packs must be there and
   * are touched, so that a concurrent gc keeps them. No chunk is read or written.
   */
  private async shareChunks(
    target: CheckpointAddress,
    source: CheckpointAddress,
    verb: 'branching' | 'forking',
    make: {
      lineage: (origin: ChunkedHeader) => string;
      manifest: (origin: ChunkedHeader, originDigest: string) => Promise<ChunkedHeader>;
    },
  ): Promise<CheckpointManifest> {
    const loaded = await this.manifests.loadTable(source.sessionId, source.checkpointId);
    if (loaded.kind !== 'chunked') {
      throw new SnapshotIncompatibleError(
        `checkpoint ${source.checkpointId} is in format ${LEGACY_FORMAT_VERSION}, which has no chunks to share; ${verb} needs format ${CHUNKED_FORMAT_VERSION} or later`,
        source.sessionId,
        source.checkpointId,
      );
    }
    const origin = loaded.header;
    const lineage = make.lineage(origin);
    const pin = await this.layout.pin(lineage, target.sessionId, target.checkpointId);
    try {
      const key = origin.encryption.mode === 'aes-256-gcm' ? await this.keys.get(lineage) : null;
      await pin.protect(loaded.table.packs);
      await this.layout.requirePacks(origin.lineage, loaded.table.packs, source.sessionId, source.checkpointId);
      const manifest = await make.manifest(origin, loaded.fileDigest);
      if (manifest.label === undefined) delete manifest.label;
      if (key) await this.keys.confirm(lineage, key, target);
      await this.manifests.publish(manifest, { table: loaded.table }, key);
      return toPublic(manifest);
    } finally {
      await pin.release();
    }
  }

  /**
   * Records that `owner` (a workflow's first run id) owns `sessionId`: see SnapshotStore.claim. The claim is
   * `<session>/claim.json`, beside the session's manifests; gc and shred leave it.
   */
  async claim(sessionId: string, owner: string): Promise<void> {
    await claimSession(this.backend, sessionId, owner);
  }

  /** Runs a step that writes to the store; a file system without room makes it a StoreFullError. */
  private async storing<T>(sessionId: string, checkpointId: string, run: () => Promise<T>): Promise<T> {
    try {
      return await run();
    } catch (err) {
      throw asStoreFull(err, sessionId, checkpointId, `checkpoint ${checkpointId} of session ${sessionId}`);
    }
  }

  async readManifest(sessionId: string, checkpointId: string): Promise<CheckpointManifest> {
    const loaded = await this.manifests.load(sessionId, checkpointId);
    return loaded.kind === 'v1' ? loaded.manifest : toPublic(loaded.manifest);
  }

  async open(
    sessionId: string,
    checkpointId: string,
    options: StoreProgress = {},
  ): Promise<{ manifest: CheckpointManifest; stream: Readable }> {
    return this.openLoaded(await this.manifests.load(sessionId, checkpointId), sessionId, checkpointId, options);
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
    const { lineage } = manifest;
    const key = manifest.encryption.mode === 'aes-256-gcm' ? await this.keys.get(lineage) : null;
    const packIds = manifest.chunks.map(([, , packId]) => packId);
    await this.layout.requirePacks(lineage, packIds, sessionId, checkpointId);
    const stream = readChunks(
      manifest.chunks,
      {
        backend: this.backend,
        binding: { tenant: this.tenant, lineage, key },
        readFor: { sessionId, checkpointId },
        pool: this.pool,
      },
      options,
    );
    return { manifest: toPublic(manifest), stream };
  }

  async verify(sessionId: string, checkpointId: string): Promise<CheckpointManifest> {
    const { manifest, stream } = await this.open(sessionId, checkpointId);
    // Every chunk is authenticated as it is read; reading to the end is the verification.
    for await (const piece of stream) void piece;
    return manifest;
  }

  async list(sessionId: string): Promise<CheckpointManifest[]> {
    if (!SessionId.safeParse(sessionId).success) return [];
    const ids = await this.layout.chunkedManifestIds(sessionId);
    // A manifest that is gone (deleted since the listing), damaged or sealed under a missing key is left out: the list
    // shows what can be read. A store that does not answer fails the list: a short list would pass for the truth.
    const manifests = await Promise.all(
      ids.map((id) =>
        this.readManifest(sessionId, id).catch((err: unknown) => {
          if (err instanceof SnapshotError && !(err instanceof StoreUnavailableError)) return null;
          throw err;
        }),
      ),
    );
    const v2 = manifests.filter((m): m is CheckpointManifest => m !== null);
    const v1 = await this.legacy.list(sessionId);
    return [...v1, ...v2].sort((a, b) => a.sequence - b.sequence);
  }

  async delete(sessionId: string, checkpointId: string): Promise<void> {
    checkIds(sessionId, checkpointId);
    await this.backend.delete(this.layout.manifestKey(sessionId, checkpointId));
    await this.legacy.delete(sessionId, checkpointId);
  }

  // ---- TimelineLog (timeline-log.ts; documented on the interface) ----------------------------------------------

  appendTimeline(sessionId: string, entries: readonly TimelineRecord[]): Promise<void> {
    return this.timeline.appendTimeline(sessionId, entries);
  }

  readTimeline(sessionId: string, options?: ReadTimelineOptions): Promise<TimelinePage> {
    return this.timeline.readTimeline(sessionId, options);
  }

  /** The directory of the file-system backend the store runs on. */
  get root(): string {
    if (this.fsRoot === null) throw new TypeError(`the store is on ${this.backend.location}, not a local directory`);
    return this.fsRoot;
  }

  // ---- SnapshotMaintenance (maintenance.ts; documented on the interface) ----------------------------------------

  verifyLineage(sessionId: string): Promise<VerifyResult[]> {
    return this.maintenance.verifyLineage(sessionId);
  }

  cleanAbandoned(options: CleanAbandonedOptions = {}): Promise<AbandonedReport> {
    return this.maintenance.cleanAbandoned(options);
  }

  gc(options: { dryRun?: boolean; now?: number } = {}): Promise<GcReport> {
    return this.maintenance.gc(options);
  }

  rekey(): Promise<{ rewrapped: number; unchanged: number }> {
    return this.maintenance.rekey();
  }

  shred(sessionId: string): Promise<string> {
    return this.maintenance.shred(sessionId);
  }
}

function requireRoot(rootDir: string | undefined): string {
  if (rootDir === undefined) throw new TypeError('a chunked store needs a backend or a rootDir');
  return rootDir;
}

/**
 * The directory a file-system backend (or a view of one under a prefix) keeps its objects in: packs, pins, leftovers
 * and the timeline are still files there.
 */
function fsRootOf(backend: BlobBackend): string | null {
  if (backend instanceof FsBlobBackend) return backend.root;
  if (backend instanceof PrefixedBlobBackend) {
    const inner = fsRootOf(backend.inner);
    return inner === null ? null : join(inner, backend.prefixPath);
  }
  return null;
}

/** What reads format 1, on a backend that never held it: nothing is there. */
type LegacyReader = Pick<FsSnapshotStore, 'readManifest' | 'open' | 'list' | 'delete'>;
const NO_FORMAT_1: LegacyReader = {
  readManifest: async (sessionId, checkpointId) => {
    throw new SnapshotNotFoundError(`no checkpoint ${checkpointId} of session ${sessionId}`, sessionId, checkpointId);
  },
  open: async (sessionId, checkpointId) => {
    throw new SnapshotNotFoundError(`no checkpoint ${checkpointId} of session ${sessionId}`, sessionId, checkpointId);
  },
  list: async () => [],
  delete: async () => undefined,
};
