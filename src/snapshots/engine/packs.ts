/**
 * Pack files: `<lineage>/packs/<packId>.pack`, sealed chunks back to back, written once and renamed into place.
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
 * Packs without a header (ids without `-h`, written before headers) are read as before: each chunk authenticates
 * itself, so a swapped one never yields wrong bytes, but one cut short or swapped may read as corrupt rather than
 * tampered. Offsets count from the start of the file, so readers that predate headers read headed packs unchanged.
 */
import { randomBytes } from 'node:crypto';
import * as fs from 'node:fs/promises';
import { join } from 'node:path';
import { ensureDir, fsyncDir, writevAll } from '../../fs-io';
import type { ChunkKey, OpenEntry } from './chunk-work';
import { SnapshotTamperedError } from '../errors';
import { openObject, sealedObjectLength, sealObject, sealPlaintextObject } from './crypto';
import type { Location } from './manifest-codec';

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
 * Appends sealed chunks to pack files; each pack is fsynced and renamed into place when full or closed. Writes are
 * positional, so several are in flight at once while the caller goes on chunking and sealing (bounded, so memory
 * stays flat).
 */
export class PackWriter {
  private current: { id: string; tmp: string; handle: fs.FileHandle; size: number; writes: Promise<unknown>[] } | null =
    null;
  /** Writes in flight, across packs (bounded by MAX_INFLIGHT). */
  private inflight: Promise<unknown>[] = [];
  /** Full packs being synced and renamed: one while the next is written (see append). */
  private sealing: Promise<void>[] = [];
  /** Temp files not renamed yet: the current pack's and those being synced. */
  private readonly temps: string[] = [];
  private wrote = false;
  private static readonly MAX_INFLIGHT = 8;

  constructor(
    private readonly dir: string,
    private readonly binding: PackBinding,
  ) {}

  /**
   * Appends `objects` back to back (one vectored write); returns the pack, the offset of the first, and the write
   * (settled once the bytes are written: `objects` may be reused then).
   */
  async append(objects: Buffer[]): Promise<[string, number, Promise<void>]> {
    if (!this.current || this.current.size >= PACK_TARGET_BYTES) {
      // A full pack is synced and renamed in the background while the next one is written (an fsync of a pack takes
      // as long as writing a good part of it); one at a time. close() waits for all of them.
      this.startSeal();
      while (this.sealing.length > 1) await this.sealing.shift();
      await ensureDir(this.dir);
      const id = `${Date.now().toString(36)}-${randomBytes(8).toString('hex')}${HEADED}`;
      const tmp = join(this.dir, `.${id}.tmp`);
      this.temps.push(tmp);
      this.current = { id, tmp, handle: await fs.open(tmp, 'wx'), size: 0, writes: [] };
      // The header is the pack's first object; its failure reaches the caller like any write's (see write).
      void this.write(this.current, [packHeader(id, this.binding)]);
    }
    const pack = this.current;
    const offset = pack.size;
    const write = this.write(pack, objects);
    // A sliding window: wait for the oldest write only, so that writing overlaps with chunking and sealing.
    while (this.inflight.length >= PackWriter.MAX_INFLIGHT) await this.inflight.shift();
    return [pack.id, offset, write.then(() => undefined)];
  }

  /** The temp files being written or synced, which the writer keeps touched (abandoned.ts). */
  tempPaths(): readonly string[] {
    return this.temps;
  }

  async close(): Promise<void> {
    this.startSeal();
    // Every pack settles before a failure is reported, so that abort() never runs beside a pack still being synced.
    const failed = (await Promise.allSettled(this.sealing)).find((r) => r.status === 'rejected');
    this.sealing = [];
    if (failed) throw failed.reason;
    if (this.wrote) await fsyncDir(this.dir);
  }

  async abort(): Promise<void> {
    await Promise.allSettled([...this.inflight, ...this.sealing]);
    this.inflight = [];
    this.sealing = [];
    await this.current?.handle.close().catch(() => undefined);
    this.current = null;
    await Promise.all(this.temps.map((t) => fs.rm(t, { force: true })));
    // Renamed packs of a failed write are unreferenced: garbage collection removes them after the grace period.
  }

  private write(pack: NonNullable<PackWriter['current']>, objects: Buffer[]): Promise<void> {
    const offset = pack.size;
    for (const object of objects) pack.size += object.length;
    const write = writevAll(pack.handle, objects, offset);
    write.catch(() => undefined); // awaited by append or when the pack is sealed; must not count as unhandled meanwhile
    this.inflight.push(write);
    pack.writes.push(write);
    return write;
  }

  /** Syncs, closes and renames the current pack once its writes are done. */
  private startSeal(): void {
    const pack = this.current;
    if (!pack) return;
    this.current = null;
    const sealed = (async () => {
      try {
        await Promise.all(pack.writes);
        await pack.handle.sync();
      } finally {
        await pack.handle.close().catch(() => undefined);
      }
      await fs.rename(pack.tmp, join(this.dir, `${pack.id}.pack`));
      this.temps.splice(this.temps.indexOf(pack.tmp), 1);
      this.wrote = true;
    })();
    sealed.catch(() => undefined); // awaited by append, close or abort
    this.sealing.push(sealed);
  }
}

/** Reads sealed chunks from packs, keeping one handle per pack open; a headed pack is checked when it is opened. */
export class PackReader {
  private readonly handles = new Map<string, Promise<fs.FileHandle>>();
  constructor(
    private readonly dir: string,
    private readonly binding: PackBinding,
    private readonly readFor: PackReadFor,
    /** Read buffers are at least this large, so that one serves the next batch too. */
    private readonly bufferBytes: number,
  ) {}

  /**
   * Reads the sealed objects of `batch` into one buffer (`into`, if it is large enough), with one read per run of
   * objects adjacent in a pack. An object cut short by the end of its pack is handed on short, so that opening it
   * reports it as truncated.
   */
  async readBatch(batch: readonly Location[], into?: Buffer): Promise<{ sealed: Buffer; entries: OpenEntry[] }> {
    const total = batch.reduce((n, [, , , , sealedLength]) => n + sealedLength, 0);
    // With headroom, so that the buffer can be reused for the next batch, which may be a chunk larger.
    const sealed =
      into && into.length >= total
        ? into.subarray(0, total)
        : Buffer.allocUnsafeSlow(Math.max(total, this.bufferBytes)).subarray(0, total);
    const entries: OpenEntry[] = [];
    const reads: Promise<void>[] = [];
    let at = 0;
    for (let i = 0; i < batch.length;) {
      const [, , packId, offset] = batch[i]!;
      let runLength = 0;
      let j = i;
      for (; j < batch.length; j++) {
        const [, , nextPackId, nextOffset, sealedLength] = batch[j]!;
        if (nextPackId !== packId || nextOffset !== offset + runLength) break;
        runLength += sealedLength;
      }
      const run = batch.slice(i, j).map(([id, size, , , length]) => ({ id, size, length }));
      const start = at;
      const runEntries = run.map((r) => {
        const entry = { id: r.id, size: r.size, at, length: r.length };
        at += r.length;
        return entry;
      });
      entries.push(...runEntries);
      reads.push(
        this.handle(packId).then(async (handle) => {
          const { bytesRead } = await handle.read(sealed, start, runLength, offset);
          if (bytesRead < runLength) {
            for (const e of runEntries) e.length = Math.max(0, Math.min(e.length, start + bytesRead - e.at));
          }
        }),
      );
      i = j;
    }
    await Promise.all(reads);
    return { sealed, entries };
  }

  async close(): Promise<void> {
    const handles = [...this.handles.values()].map((h) => h.catch(() => null));
    this.handles.clear();
    await Promise.all(handles.map(async (h) => (await h)?.close().catch(() => undefined)));
  }

  private handle(packId: string): Promise<fs.FileHandle> {
    let handle = this.handles.get(packId);
    if (!handle) {
      handle = this.openChecked(packId);
      handle.catch(() => undefined); // awaited by readBatch
      this.handles.set(packId, handle);
    }
    return handle;
  }

  private async openChecked(packId: string): Promise<fs.FileHandle> {
    const handle = await fs.open(join(this.dir, `${packId}.pack`), 'r');
    if (!packId.endsWith(HEADED)) return handle;
    try {
      checkHeader(await readFirstObject(handle), packId, this.binding, this.readFor);
      return handle;
    } catch (err) {
      await handle.close().catch(() => undefined);
      throw err;
    }
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

/** The object at the start of a pack, whole if the file holds it, as much as there is otherwise. */
async function readFirstObject(handle: fs.FileHandle): Promise<Buffer> {
  const head = Buffer.alloc(HEADER_READ_BYTES);
  const { bytesRead } = await handle.read(head, 0, head.length, 0);
  const length = sealedObjectLength(head.subarray(0, bytesRead));
  // Exactly the object when the prefix can say how long it is, and all there is of a file shorter than the read.
  if (length === null || length <= bytesRead || bytesRead < head.length) {
    return head.subarray(0, Math.min(length ?? bytesRead, bytesRead));
  }
  // Larger than any header: another kind of object (a chunk of a pack without a header) where the header should be.
  // Read whole, so that opening it names what it is rather than calling it cut short.
  const whole = Buffer.alloc(Math.min(length, MAX_FIRST_OBJECT_BYTES));
  const { bytesRead: read } = await handle.read(whole, 0, whole.length, 0);
  return whole.subarray(0, read);
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
