/**
 * Packs: objects `<lineage>/packs/<packId>.pack` of the store's blob backend, sealed chunks back to back, each streamed
 * into the backend as it is written (created under a new random id: a pack is never replaced) and visible whole or
 * not at all.
 *
 * Packs written since pack headers have ids ending in `-h` and begin with a header: a sealed object of kind `pack`
 * whose object id is the pack id, bound like any object to the tenant and lineage (and, encrypted, to the data key).
 * The manifest that names a pack is authenticated, so a reader knows from the id alone that the pack must begin with
 * its own header, and checks it before it uses a chunk of the pack. That is how a swapped pack is told from a
 * damaged one:
 *
 * - a pack whose header names another pack, lineage or tenant, or fails authentication, is another pack put in this
 *   one's place (a pack of another session, or another pack of the same lineage): SnapshotTampered, even when it is
 *   too short to hold the offsets the manifest needs;
 * - a pack whose header is its own but which ends before a chunk does is this pack cut short: SnapshotCorrupt
 *   (`truncated`), as is a pack too short to hold its header;
 * - a pack that is not there is SnapshotNotFound (the store checks before reading).
 *
 * Memory: a pack streams through. The writer holds the batches the seal pipeline has in flight (MAX_INFLIGHT) and
 * no more; the reader holds the ranges of the batches it reads ahead.
 *
 * Packs without a header (ids without `-h`, written before headers) are read as before: each chunk authenticates
 * itself, so a swapped one never yields wrong bytes, but one cut short or swapped may read as corrupt rather than
 * tampered. Offsets count from the start of the file, so readers that predate headers read headed packs unchanged.
 */
import { randomBytes } from 'node:crypto';
import type { BlobBackend, BlobRangeReader } from '../blob/backend';
import type { ChunkKey, OpenEntry } from './chunk-work';
import { SnapshotNotFoundError, SnapshotTamperedError } from '../errors';
import { openObject, sealedObjectLength, sealObject, sealPlaintextObject } from './crypto';
import { packKey } from './layout';
import type { Location } from './manifest-codec';
import { PackWindows } from './pack-windows';

/** A pack is closed and a new one started beyond this size, so one checkpoint of gigabytes is several files. */
export const PACK_TARGET_BYTES = 64 * 1024 * 1024;

/**
 * Bytes per batch of chunks, both ways: plaintext per seal batch (seal-pipeline.ts), sealed bytes per read batch
 * (pack-reads.ts). Large enough that thread messages cost little.
 */
export const BATCH_BYTES = 1024 * 1024;
/** The version of a pack header's (empty) body. */
const PACK_HEADER_VERSION = 1;
const HEADED = '-h';
/** The first read of a pack header; a header names four ids, far less than this. */
const HEADER_READ_BYTES = 4096;
/** What a reader reads to look at the first object of a pack that claims a header but holds something else. */
const MAX_FIRST_OBJECT_BYTES = 1024 * 1024;
const EMPTY_BODY = Buffer.alloc(0);

/** What every pack of a lineage is bound to: the tenant, the lineage, and its data key (or plaintext). */
export interface PackBinding {
  tenant: string;
  lineage: string;
  key: ChunkKey | null;
}

/** Whom a read is for, so that a refused pack names the checkpoint that needed it. */
export interface PackReadFor {
  sessionId: string;
  checkpointId: string;
}

/**
 * One pack being streamed into the backend: the objects appended to it, handed to the backend's upload in order. A
 * batch counts as written once the upload has asked for what follows it (a backend is done with a piece of a streamed
 * body when it asks for the next, or has copied it).
 */
class PackUpload {
  readonly done: Promise<void>;
  size = 0;
  private readonly queue: { objects: Buffer[]; written: () => void; failed: (err: unknown) => void }[] = [];
  private wake: (() => void) | null = null;
  private ended = false;
  private failure: { error: unknown } | null = null;

  constructor(
    readonly id: string,
    backend: BlobBackend,
    key: string,
  ) {
    this.done = backend.create(key, this.body()).then(
      (created) => {
        // A random id of 8 bytes after a timestamp: taken only if something else wrote it.
        if (!created) throw new Error(`pack ${id} exists already`);
      },
      (err: unknown) => {
        // The backend may fail before it reads the body at all: what is queued fails with it.
        this.fail(err);
        throw err;
      },
    );
    this.done.catch(() => undefined); // awaited by the writer's close or abort
  }

  /** Appends `objects`; settles once the backend has taken them. */
  append(objects: Buffer[]): Promise<void> {
    if (this.ended) {
      // Rejected, not thrown: after a failed upload the writer reports the upload's own error (PackWriter.write),
      // such as a full disk's, not this one.
      const closed = Promise.reject(new Error(`pack ${this.id} is closed`));
      closed.catch(() => undefined);
      return closed;
    }
    for (const object of objects) this.size += object.length;
    const written = new Promise<void>((resolve, reject) => {
      this.queue.push({ objects, written: resolve, failed: reject });
    });
    written.catch(() => undefined); // awaited by the caller or by the writer's window
    this.poke();
    return written;
  }

  /** No more objects: the upload completes with what it has. */
  end(): void {
    this.ended = true;
    this.poke();
  }

  /** Fails the upload (the backend keeps nothing of it) and every append not written yet. */
  fail(error: unknown): void {
    this.failure ??= { error };
    this.ended = true;
    for (const item of this.queue.splice(0)) item.failed(error);
    this.poke();
  }

  private poke(): void {
    const wake = this.wake;
    this.wake = null;
    wake?.();
  }

  private async *body(): AsyncGenerator<Buffer> {
    let item: PackUpload['queue'][number] | undefined;
    try {
      for (;;) {
        if (this.failure) throw this.failure.error;
        item = this.queue.shift();
        if (!item) {
          if (this.ended) return;
          await new Promise<void>((resolve) => (this.wake = resolve));
          continue;
        }
        for (const object of item.objects) if (object.length > 0) yield object;
        item.written();
        item = undefined;
      }
    } finally {
      // The upload stopped early (it failed): neither the batch it was taking nor any queued will be written.
      const stopped = new Error(`the upload of pack ${this.id} stopped`);
      item?.failed(stopped);
      this.fail(stopped);
    }
  }
}

/**
 * Appends sealed chunks to packs, each streamed into the backend and closed when full or at the end. Several batches
 * are in flight at once while the caller goes on chunking and sealing (bounded, so memory stays flat).
 */
export class PackWriter {
  private current: PackUpload | null = null;
  /** Appends in flight, across packs (bounded by MAX_INFLIGHT). */
  private inflight: Promise<unknown>[] = [];
  /** Full packs whose uploads are completing: one while the next is written (see append). */
  private sealing: PackUpload[] = [];
  private static readonly MAX_INFLIGHT = 8;

  constructor(
    private readonly backend: BlobBackend,
    private readonly binding: PackBinding,
  ) {}

  /**
   * Appends `objects` back to back; returns the pack, the offset of the first, and the write (settled once the
   * backend has taken the bytes: `objects` may be reused then).
   */
  async append(objects: Buffer[]): Promise<[string, number, Promise<void>]> {
    if (!this.current || this.current.size >= PACK_TARGET_BYTES) {
      // A full pack completes in the background while the next one is written (a file's fsync, an object store's
      // last part); one at a time. close() waits for all of them.
      this.startSeal();
      while (this.sealing.length > 1) await this.sealing.shift()!.done;
      const id = `${Date.now().toString(36)}-${randomBytes(8).toString('hex')}${HEADED}`;
      this.current = new PackUpload(id, this.backend, packKey(this.binding.lineage, id));
      // The header is the pack's first object; its failure reaches the caller like any write's (see write).
      void this.write(this.current, [packHeader(id, this.binding)]);
    }
    const pack = this.current;
    const offset = pack.size;
    const write = this.write(pack, objects);
    // A sliding window: wait for the oldest write only, so that writing overlaps with chunking and sealing.
    while (this.inflight.length >= PackWriter.MAX_INFLIGHT) await this.inflight.shift();
    return [pack.id, offset, write];
  }

  async close(): Promise<void> {
    this.startSeal();
    // Every pack settles before a failure is reported, so that abort() never runs beside a pack still completing.
    const failed = (await Promise.allSettled(this.sealing.map((p) => p.done))).find((r) => r.status === 'rejected');
    this.sealing = [];
    if (failed) throw failed.reason;
  }

  async abort(): Promise<void> {
    const uploads = [...this.sealing, ...(this.current ? [this.current] : [])];
    this.current = null;
    this.sealing = [];
    const aborted = new Error('the checkpoint write was abandoned');
    // A pack still streaming is dropped by the backend; one complete already is unreferenced, for gc.
    for (const upload of uploads) upload.fail(aborted);
    await Promise.allSettled([...this.inflight, ...uploads.map((u) => u.done)]);
    this.inflight = [];
  }

  private write(pack: PackUpload, objects: Buffer[]): Promise<void> {
    const write = pack.append(objects);
    // A write fails when its pack's upload does: the upload's own error is the one to report.
    const settled = write.then(
      () => undefined,
      async (err: unknown) => {
        await pack.done;
        throw err;
      },
    );
    settled.catch(() => undefined); // awaited by append's caller or the window
    this.inflight.push(settled);
    return settled;
  }

  /** Ends the current pack's upload; it completes in the background. */
  private startSeal(): void {
    const pack = this.current;
    if (!pack) return;
    this.current = null;
    pack.end();
    this.sealing.push(pack);
  }
}

/**
 * Reads a restore's sealed chunks from their packs, in manifest order: in place, each batch's runs of adjacent chunks
 * read straight into its buffer, where the backend opens objects for ranged reads (a local directory); through
 * PackWindows elsewhere (an object store, where every request costs). A headed pack is checked the first time it is
 * read.
 */
export class PackReader {
  private readonly checked = new Map<string, Promise<void>>();
  private readonly windows: PackWindows | null;
  /** Packs open for ranged reads, by id (backends with `openRanges`). */
  private readonly ranges = new Map<string, Promise<BlobRangeReader>>();
  /**
   * Chunks still to be read from each pack: a pack's handle closes after its last one, so a restore spread over
   * thousands of packs (a long line of incremental checkpoints) holds only those it is still reading.
   */
  private readonly unread = new Map<string, number>();
  constructor(
    private readonly backend: BlobBackend,
    private readonly binding: PackBinding,
    private readonly readFor: PackReadFor,
    /** Every chunk the reader will be asked for, in the order it will be. */
    chunks: readonly Location[],
    /** Read buffers are at least this large, so that one serves the next batch too. */
    private readonly bufferBytes: number,
  ) {
    // Batches read in place, several at a time (pack-reads.ts reads ahead): a stream of windows passes every MiB
    // through a buffer of its own and a turn of the event loop, which a worker's busy loop makes wait (bench/README.md,
    // "Resume against tar -x").
    if (backend.openRanges)
      for (const [, , packId] of chunks) this.unread.set(packId, (this.unread.get(packId) ?? 0) + 1);
    this.windows = backend.openRanges
      ? null
      : new PackWindows(
          backend,
          (packId) => packKey(binding.lineage, packId),
          chunks,
          (packId) => this.missing(packId),
        );
  }

  /**
   * Reads the sealed objects of `batch`, the next chunks in order, into one buffer (`into`, if it is large enough).
   * An object cut short by the end of its pack is handed on short, so that opening it reports it as truncated.
   */
  async readBatch(batch: readonly Location[], into?: Buffer): Promise<{ sealed: Buffer; entries: OpenEntry[] }> {
    const total = batch.reduce((n, [, , , , sealedLength]) => n + sealedLength, 0);
    // With headroom, so that the buffer can be reused for the next batch, which may be a chunk larger.
    const sealed =
      into && into.length >= total
        ? into.subarray(0, total)
        : Buffer.allocUnsafeSlow(Math.max(total, this.bufferBytes)).subarray(0, total);
    const entries: OpenEntry[] = [];
    const checks = new Set<Promise<void>>();
    let at = 0;
    for (const [id, size, packId, , length] of batch) {
      entries.push({ id, size, at, length });
      at += length;
      checks.add(this.check(packId));
    }
    const read = this.windows
      ? this.windows.take(
          entries.map((e) => e.length),
          { into: sealed, at: entries.map((e) => e.at) },
        )
      : this.readInPlace(batch, sealed, entries);
    const [got] = await Promise.all([read, ...checks]);
    got.forEach((n, i) => (entries[i]!.length = n));
    return { sealed, entries };
  }

  async close(): Promise<void> {
    this.checked.clear();
    const ranges = [...this.ranges.values()];
    this.ranges.clear();
    await Promise.allSettled([this.windows?.close(), ...ranges.map(async (reader) => (await reader).close())]);
  }

  /** Each run of `batch`'s chunks adjacent in one pack, read in one call to its place; how many bytes of each came. */
  private async readInPlace(
    batch: readonly Location[],
    into: Buffer,
    entries: readonly OpenEntry[],
  ): Promise<number[]> {
    const got = entries.map((e) => e.length);
    const reads: Promise<void>[] = [];
    for (let i = 0; i < batch.length;) {
      const [, , packId, offset] = batch[i]!;
      let runLength = 0;
      let j = i;
      for (; j < batch.length; j++) {
        const [, , nextPackId, nextOffset, sealedLength] = batch[j]!;
        if (nextPackId !== packId || nextOffset !== offset + runLength) break;
        runLength += sealedLength;
      }
      const [first, end] = [i, j];
      const start = entries[first]!.at;
      reads.push(
        this.rangeReader(packId).then(async (reader) => {
          const n = await reader.readInto(into, start, runLength, offset);
          // A pack that ends early hands its objects on short, so that opening them reports them truncated.
          for (let k = first; k < end && n < runLength; k++) {
            got[k] = Math.max(0, Math.min(got[k]!, start + n - entries[k]!.at));
          }
          await this.readFrom(packId, end - first, reader);
        }),
      );
      i = j;
    }
    await Promise.all(reads);
    return got;
  }

  /** `count` more of the pack's chunks are read: after its last, its handle closes. */
  private async readFrom(packId: string, count: number, reader: BlobRangeReader): Promise<void> {
    const left = (this.unread.get(packId) ?? 0) - count;
    if (left > 0) {
      this.unread.set(packId, left);
      return;
    }
    this.unread.delete(packId);
    this.ranges.delete(packId);
    await reader.close();
  }

  private rangeReader(packId: string): Promise<BlobRangeReader> {
    let reader = this.ranges.get(packId);
    if (!reader) {
      reader = this.backend.openRanges!(packKey(this.binding.lineage, packId)).then((opened) => {
        if (!opened) throw this.missing(packId);
        return opened;
      });
      reader.catch(() => undefined); // awaited by readInPlace
      this.ranges.set(packId, reader);
    }
    return reader;
  }

  private missing(packId: string): Error {
    return new SnapshotNotFoundError(
      `checkpoint ${this.readFor.checkpointId} of session ${this.readFor.sessionId} is missing pack ${packId}`,
      this.readFor.sessionId,
      this.readFor.checkpointId,
    );
  }

  private async readPack(packId: string, offset: number, length: number): Promise<Buffer> {
    const bytes = await this.backend.read(packKey(this.binding.lineage, packId), { range: { offset, length } });
    if (bytes === null) throw this.missing(packId);
    return bytes;
  }

  private check(packId: string): Promise<void> {
    let checked = this.checked.get(packId);
    if (!checked) {
      checked = packId.endsWith(HEADED) ? this.checkHeaded(packId) : Promise.resolve();
      checked.catch(() => undefined); // awaited by readBatch
      this.checked.set(packId, checked);
    }
    return checked;
  }

  private async checkHeaded(packId: string): Promise<void> {
    checkHeader(await this.readFirstObject(packId), packId, this.binding, this.readFor);
  }

  /** The object at the start of a pack, whole if the pack holds it, as much as there is otherwise. */
  private async readFirstObject(packId: string): Promise<Buffer> {
    const head = await this.readPack(packId, 0, HEADER_READ_BYTES);
    const length = sealedObjectLength(head);
    // Exactly the object when the prefix can say how long it is, and all there is of a pack shorter than the read.
    if (length === null || length <= head.length || head.length < HEADER_READ_BYTES) {
      return head.subarray(0, Math.min(length ?? head.length, head.length));
    }
    // Larger than any header: another kind of object (a chunk of a pack without a header) where the header should
    // be. Read whole, so that opening it names what it is rather than calling it cut short.
    return this.readPack(packId, 0, Math.min(length, MAX_FIRST_OBJECT_BYTES));
  }
}

function packHeader(packId: string, binding: PackBinding): Buffer {
  const header = {
    kind: 'pack' as const,
    tenant: binding.tenant,
    lineage: binding.lineage,
    objectId: packId,
    formatVersion: PACK_HEADER_VERSION,
    codec: 0,
  };
  const { key } = binding;
  return key
    ? sealObject(EMPTY_BODY, key.key, { ...header, dataKeyId: key.dataKeyId })
    : sealPlaintextObject(EMPTY_BODY, header);
}

/** Throws unless `sealed` is the header of pack `packId` of this tenant and lineage, under this key or plaintext. */
function checkHeader(sealed: Buffer, packId: string, binding: PackBinding, readFor: PackReadFor): void {
  const { key } = binding;
  try {
    openObject(sealed, () => key!.key, {
      kind: 'pack',
      tenant: binding.tenant,
      lineage: binding.lineage,
      objectId: packId,
      formatVersion: PACK_HEADER_VERSION,
      encrypted: key !== null,
      ...(key ? { dataKeyId: key.dataKeyId } : {}),
    });
  } catch (err) {
    if (!(err instanceof SnapshotTamperedError)) throw err;
    const what =
      err.reason === 'truncated'
        ? 'is shorter than its own header: cut short'
        : err.reason === 'tampered' || err.reason === 'wrong-key'
          ? 'is not this pack (its header does not authenticate as it)'
          : 'does not begin with its header';
    throw new SnapshotTamperedError(
      `pack ${packId} needed by checkpoint ${readFor.checkpointId} ${what}: ${err.message}`,
      err.reason,
      { ...readFor, objectId: packId },
      { cause: err },
    );
  }
}
