import { createHash, randomBytes } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import * as fs from 'node:fs/promises';
import { basename, dirname, join, resolve } from 'node:path';
import {
  addAbortSignal,
  pipeline as pipelineCallback,
  Transform,
  type Readable,
  type TransformCallback,
} from 'node:stream';
import { finished, pipeline } from 'node:stream/promises';
import { z } from 'zod';
import { CheckpointId, SessionId } from '../domain/schemas';
import { isErrnoError } from '../errors';
import { ensureDir, fsyncDir } from '../fs-io';
import {
  abandonedAge,
  keepTouched,
  removeAbandonedTemps,
  TOUCH_INTERVAL_MS,
  type AbandonedReport,
  type CleanAbandonedOptions,
} from './abandoned';
import { SnapshotCorruptError, SnapshotError, SnapshotIncompatibleError, SnapshotNotFoundError } from './errors';
import { LEGACY_FORMAT_VERSION } from './format';
import { checkNew, CheckpointManifestSchema, NewCheckpointSchema } from './manifest';
import type { CheckpointManifest, NewCheckpoint, SnapshotStore, StoreProgress } from './snapshot-store';
import { FsBlobBackend } from './blob/fs-backend';
import { claimSession } from './session-claim';
import { isStateSource, sourceStream, type StateSource } from './state-source';
import { asStoreFull } from './store-full';
import { TimelineObjects } from './timeline-objects';
import {
  plainTimelineSealer,
  type ReadTimelineOptions,
  type TimelineLog,
  type TimelinePage,
  type TimelineRecord,
} from './timeline-log';

const DATA_SUFFIX = '.data';
/** Where the timeline's writes leave temp files when they die (see engine/layout.ts TEMP_DIRS). */
const TIMELINE_TEMP_DIRS = ['timeline', 'timeline-entries/*'];
const MANIFEST_SUFFIX = '.manifest.json';
/** Manifests are a few hundred bytes; anything far bigger is not one of ours and is not read into memory. */
const MAX_MANIFEST_BYTES = 64 * 1024;

const CheckpointAddress = z.object({ sessionId: SessionId, checkpointId: CheckpointId });

/** Read before the full schema, so a manifest from a newer writer is reported as incompatible, not corrupt. */
const ManifestHeader = z.object({ formatVersion: z.number() });

/**
 * A SnapshotStore on a local (or network-mounted POSIX) file system:
 * `<root>/<sessionId>/<checkpointId>.data` holds the state stream, `<checkpointId>.manifest.json` describes it.
 *
 * A checkpoint exists exactly when its manifest does. Both files are published by fsync + rename + directory
 * fsync, data first and manifest last, so a crash at any point leaves either a complete checkpoint or
 * nothing a reader can see (at worst an orphaned data file or temp file, which readers never look at;
 * cleanAbandoned removes the temp file).
 * Ids are validated against the domain schemas before they touch a path, so they cannot escape the root.
 * Each session's timeline log (timeline-objects.ts, layout 2) is under `<root>/<sessionId>/`, its records in plaintext.
 */
export class FsSnapshotStore implements SnapshotStore, TimelineLog {
  private readonly root: string;
  private readonly touchIntervalMs: number;
  private readonly timeline: TimelineObjects;

  /**
   * `touchIntervalMs`: how often a write touches its temp file (TOUCH_INTERVAL_MS by default), so that
   * cleanAbandoned never takes a stalled live write for a dead one.
   */
  constructor(rootDir: string, options: { touchIntervalMs?: number } = {}) {
    this.root = resolve(rootDir);
    this.touchIntervalMs = options.touchIntervalMs ?? TOUCH_INTERVAL_MS;
    this.timeline = new TimelineObjects(new FsBlobBackend(this.root), async (sessionId) =>
      plainTimelineSealer(sessionId),
    );
  }

  async write(
    checkpoint: NewCheckpoint,
    source: Readable | StateSource,
    options: StoreProgress = {},
  ): Promise<CheckpointManifest> {
    // Format 1 is one data object: every byte is written, unchanged runs included.
    const data = isStateSource(source) ? sourceStream(source) : source;
    try {
      return await this.writeStream(checkpoint, data, options);
    } catch (err) {
      // Released whatever failed (a no-op once the pipeline has destroyed it); a source at once, not on 'close'.
      data.destroy();
      if (isStateSource(source)) source.close();
      const { sessionId, checkpointId } = checkpoint;
      throw asStoreFull(err, sessionId, checkpointId, checkpointName(sessionId, checkpointId));
    }
  }

  private async writeStream(
    checkpoint: NewCheckpoint,
    data: Readable,
    options: StoreProgress,
  ): Promise<CheckpointManifest> {
    const parsed = checkNew(NewCheckpointSchema, checkpoint);
    const { sessionId, checkpointId } = parsed;
    const { signal, onProgress } = options;
    signal?.throwIfAborted();
    const paths = this.paths(sessionId, checkpointId);
    await this.ensureSessionDir(paths.dir);
    // Checked before streaming so an immutable checkpoint fails fast, and again just before each rename so a
    // published checkpoint is not replaced. Two writers racing on one id can still interleave between check
    // and rename; checkpoint ids are meant to have a single writer.
    const assertAbsent = () => this.assertNoManifest(paths.manifest, sessionId, checkpointId);
    await assertAbsent();

    const meter = new MeteringTransform(onProgress);
    await publishFile(
      paths.data,
      // `flush: true` (Node >= 20.10) fsyncs before the stream closes, and pipeline waits for the close.
      async (temp) => {
        // Touched while the data streams in, however long the source stalls: cleanAbandoned spares it.
        const stop = keepTouched(() => [temp], this.touchIntervalMs);
        try {
          await pipeline(data, meter, createWriteStream(temp, { flags: 'wx', flush: true }), { signal });
        } finally {
          stop();
        }
      },
      async () => {
        signal?.throwIfAborted();
        await assertAbsent();
      },
    );

    const manifest: CheckpointManifest = {
      formatVersion: LEGACY_FORMAT_VERSION,
      ...parsed,
      size: meter.bytes,
      digest: meter.digest(),
      createdAt: new Date().toISOString(),
    };
    // The manifest goes last: it is what makes the checkpoint visible, so it must only ever point at data that
    // is already durable. If publishing it fails, the data file stays behind as an invisible orphan; it is not
    // removed, because a failure after the rename (directory fsync) would leave a visible manifest without data.
    await publishFile(
      paths.manifest,
      (temp) => fs.writeFile(temp, `${JSON.stringify(manifest, null, 2)}\n`, { flag: 'wx', flush: true }),
      assertAbsent,
    );
    return manifest;
  }

  async readManifest(sessionId: string, checkpointId: string): Promise<CheckpointManifest> {
    const paths = this.readPaths(sessionId, checkpointId);
    let handle: fs.FileHandle;
    try {
      handle = await fs.open(paths.manifest, 'r');
    } catch (error) {
      if (isErrnoError(error, 'ENOENT')) {
        throw new SnapshotNotFoundError(
          `${checkpointName(sessionId, checkpointId)} does not exist`,
          sessionId,
          checkpointId,
        );
      }
      throw error;
    }
    try {
      const { size } = await handle.stat();
      if (size > MAX_MANIFEST_BYTES) {
        throw corruptError(sessionId, checkpointId, `its manifest is ${size} bytes, more than a manifest can be`);
      }
      return parseManifest(await handle.readFile('utf8'), sessionId, checkpointId);
    } finally {
      await handle.close();
    }
  }

  async open(
    sessionId: string,
    checkpointId: string,
    options: StoreProgress = {},
  ): Promise<{ manifest: CheckpointManifest; stream: Readable }> {
    options.signal?.throwIfAborted();
    const manifest = await this.readManifest(sessionId, checkpointId);
    let handle: fs.FileHandle;
    try {
      handle = await fs.open(this.paths(sessionId, checkpointId).data, 'r');
    } catch (error) {
      if (isErrnoError(error, 'ENOENT')) {
        const message = `${checkpointName(sessionId, checkpointId)} has a manifest but its data object is missing`;
        throw new SnapshotNotFoundError(message, sessionId, checkpointId, { cause: error });
      }
      throw error;
    }
    const verifier = new VerifyingTransform(manifest, options.onProgress);
    // The pipeline forwards read errors to `verifier` and closes the file when the consumer destroys `verifier`;
    // every error surfaces on `verifier`, so the callback has nothing left to do.
    pipelineCallback(handle.createReadStream(), verifier, () => {});
    if (options.signal) addAbortSignal(options.signal, verifier);
    return { manifest, stream: verifier };
  }

  async verify(sessionId: string, checkpointId: string): Promise<CheckpointManifest> {
    const { manifest, stream } = await this.open(sessionId, checkpointId);
    await finished(stream.resume());
    return manifest;
  }

  async list(sessionId: string): Promise<CheckpointManifest[]> {
    if (!SessionId.safeParse(sessionId).success) return [];
    let names: string[];
    try {
      names = await fs.readdir(join(this.root, sessionId));
    } catch (error) {
      if (isErrnoError(error, 'ENOENT')) return [];
      throw error;
    }
    const manifests: CheckpointManifest[] = [];
    // Temp files end in `.tmp-<random>`; a stray name that merely ends like a manifest (`.x.manifest.json`)
    // fails id validation in readManifest and is skipped like any unreadable manifest.
    for (const name of names) {
      if (!name.endsWith(MANIFEST_SUFFIX)) continue;
      try {
        manifests.push(await this.readManifest(sessionId, name.slice(0, -MANIFEST_SUFFIX.length)));
      } catch (error) {
        if (!(error instanceof SnapshotError)) throw error;
      }
    }
    return manifests.sort((a, b) => a.sequence - b.sequence || a.checkpointId.localeCompare(b.checkpointId));
  }

  async delete(sessionId: string, checkpointId: string): Promise<void> {
    const address = CheckpointAddress.safeParse({ sessionId, checkpointId });
    if (!address.success) {
      throw new TypeError(`invalid checkpoint address: ${z.prettifyError(address.error)}`, { cause: address.error });
    }
    const paths = this.paths(sessionId, checkpointId);
    // Manifest first: the checkpoint disappears for readers in one step, and a crash in between leaves only an
    // invisible data orphan, never a manifest pointing at missing data.
    await fs.rm(paths.manifest, { force: true });
    await fs.rm(paths.data, { force: true });
    try {
      await fs.rmdir(paths.dir);
    } catch (error) {
      if (!isErrnoError(error, 'ENOENT', 'ENOTEMPTY', 'EEXIST')) throw error;
    }
  }

  /** Records that `owner` owns `sessionId` (`<session>/claim.json`): see SnapshotStore.claim. */
  async claim(sessionId: string, owner: string): Promise<void> {
    await claimSession(new FsBlobBackend(this.root), sessionId, owner);
  }

  appendTimeline(sessionId: string, entries: readonly TimelineRecord[]): Promise<void> {
    return this.timeline.appendTimeline(sessionId, entries);
  }

  readTimeline(sessionId: string, options?: ReadTimelineOptions): Promise<TimelinePage> {
    return this.timeline.readTimeline(sessionId, options);
  }

  /**
   * Removes the temp files writers that died mid-write left in the session directories (`.<name>.tmp-<random>`, and
   * a claim's `.<random>.tmp`), once untouched for `olderThanMs` (ABANDONED_AFTER_MS by default). A live write touches its temp
   * file every `touchIntervalMs`. Never touches a manifest, a data file in place or a claim; this store has no pins.
   */
  async cleanAbandoned(options: CleanAbandonedOptions = {}): Promise<AbandonedReport> {
    const { before } = abandonedAge(options);
    const temps = await removeAbandonedTemps(this.root, before, {
      subdirs: TIMELINE_TEMP_DIRS,
      dryRun: options.dryRun ?? false,
    });
    return { tempFiles: temps.files, pins: 0, bytes: temps.bytes };
  }

  /** Paths for ids that have already been validated. */
  private paths(sessionId: string, checkpointId: string) {
    const dir = join(this.root, sessionId);
    return { dir, data: join(dir, checkpointId + DATA_SUFFIX), manifest: join(dir, checkpointId + MANIFEST_SUFFIX) };
  }

  /** Paths for a read: an id that fails validation cannot name a stored checkpoint, so it is simply not found. */
  private readPaths(sessionId: string, checkpointId: string) {
    if (!CheckpointAddress.safeParse({ sessionId, checkpointId }).success) {
      const message = `checkpoint ${JSON.stringify(checkpointId)} of session ${JSON.stringify(sessionId)} does not exist (invalid id)`;
      throw new SnapshotNotFoundError(message, sessionId, checkpointId);
    }
    return this.paths(sessionId, checkpointId);
  }

  private async ensureSessionDir(dir: string): Promise<void> {
    const created = await ensureDir(dir);
    // A new directory's entry lives in its parent: fsync the parent, or a crash could lose the whole session dir.
    if (created !== undefined) await fsyncDir(dirname(dir));
  }

  private async assertNoManifest(manifestPath: string, sessionId: string, checkpointId: string): Promise<void> {
    try {
      await fs.access(manifestPath);
    } catch (error) {
      if (isErrnoError(error, 'ENOENT')) return;
      throw error;
    }
    throw new Error(`${checkpointName(sessionId, checkpointId)} exists already; checkpoints are immutable`);
  }
}

/**
 * Publishes `path` atomically: `fill` writes (and fsyncs) a fresh temp file beside it, `beforeRename` makes its
 * last checks, then the temp file is renamed over `path` and the directory is fsynced. On any failure before the
 * rename the temp file is removed and nothing appears at `path`.
 */
async function publishFile(
  path: string,
  fill: (tempPath: string) => Promise<unknown>,
  beforeRename: () => Promise<void>,
): Promise<void> {
  const dir = dirname(path);
  const temp = join(dir, `.${basename(path)}.tmp-${randomBytes(8).toString('hex')}`);
  try {
    // `fill` must fsync the file before it resolves: renaming first could publish a name whose bytes a crash loses.
    await fill(temp);
    await beforeRename();
    await fs.rename(temp, path);
  } catch (error) {
    await fs.rm(temp, { force: true });
    throw error;
  }
  // The rename is only durable once the directory is.
  await fsyncDir(dir);
}

function parseManifest(text: string, sessionId: string, checkpointId: string): CheckpointManifest {
  const corrupt = (problem: string, cause?: unknown) => corruptError(sessionId, checkpointId, problem, cause);
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (error) {
    throw corrupt('its manifest is not valid JSON', error);
  }
  const header = ManifestHeader.safeParse(json);
  if (header.success && header.data.formatVersion !== LEGACY_FORMAT_VERSION) {
    const message = `checkpoint format version ${header.data.formatVersion} is not supported by this reader (supports ${LEGACY_FORMAT_VERSION})`;
    throw new SnapshotIncompatibleError(message, sessionId, checkpointId);
  }
  const parsed = CheckpointManifestSchema.safeParse(json);
  if (!parsed.success) throw corrupt(`its manifest is invalid: ${z.prettifyError(parsed.error)}`, parsed.error);
  const manifest = parsed.data;
  // A manifest copied or renamed from elsewhere would hand out another checkpoint's state under this id.
  if (manifest.sessionId !== sessionId || manifest.checkpointId !== checkpointId) {
    throw corrupt(`its manifest describes checkpoint ${manifest.checkpointId} of session ${manifest.sessionId}`);
  }
  return manifest;
}

/** Passes bytes through unchanged while counting and hashing them. */
class MeteringTransform extends Transform {
  bytes = 0;
  private readonly hash = createHash('sha256');

  constructor(private readonly onProgress?: (bytesDone: number) => void) {
    super();
  }

  override _transform(chunk: Buffer, _encoding: BufferEncoding, callback: TransformCallback): void {
    this.bytes += chunk.length;
    this.hash.update(chunk);
    // A throwing progress callback must fail the stream, not escape as an uncaught exception.
    try {
      this.onProgress?.(this.bytes);
    } catch (error) {
      callback(error as Error);
      return;
    }
    callback(null, chunk);
  }

  /** `sha256:<hex>` of everything that has passed; call once, after the stream has finished. */
  digest(): string {
    return `sha256:${this.hash.digest('hex')}`;
  }
}

/**
 * Checks the bytes against a manifest as they pass. A mismatch fails the stream with SnapshotCorruptError
 * before 'end' (from flush), so a consumer that waits for 'end' never accepts bad state.
 */
class VerifyingTransform extends MeteringTransform {
  constructor(
    private readonly manifest: CheckpointManifest,
    onProgress?: (bytesDone: number) => void,
  ) {
    super(onProgress);
  }

  override _transform(chunk: Buffer, encoding: BufferEncoding, callback: TransformCallback): void {
    if (this.bytes + chunk.length > this.manifest.size) {
      callback(this.corrupt(`its data is longer than the ${this.manifest.size} bytes its manifest records`));
      return;
    }
    super._transform(chunk, encoding, callback);
  }

  override _flush(callback: TransformCallback): void {
    const { size, digest } = this.manifest;
    if (this.bytes !== size) {
      callback(this.corrupt(`its data is ${this.bytes} bytes, its manifest records ${size}`));
      return;
    }
    const actual = this.digest();
    if (actual !== digest) {
      callback(this.corrupt(`its data has digest ${actual}, its manifest records ${digest}`));
      return;
    }
    callback();
  }

  private corrupt(problem: string): SnapshotCorruptError {
    return corruptError(this.manifest.sessionId, this.manifest.checkpointId, problem);
  }
}

function checkpointName(sessionId: string, checkpointId: string): string {
  return `checkpoint ${checkpointId} of session ${sessionId}`;
}

function corruptError(sessionId: string, checkpointId: string, problem: string, cause?: unknown): SnapshotCorruptError {
  const message = `${checkpointName(sessionId, checkpointId)} is corrupt: ${problem}`;
  return new SnapshotCorruptError(message, sessionId, checkpointId, { cause });
}
