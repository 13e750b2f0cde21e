import * as fs from 'node:fs';
import { constants as fsConstants, type BigIntStats } from 'node:fs';
import * as fsp from 'node:fs/promises';
import * as path from 'node:path';
import type { UnchangedRange } from '../../snapshots';
import type { CapturedState } from '../session-runtime';
import { RuntimeBusyError, RuntimeFailedError } from '../session-runtime';
import { encodeTarHeader, tarHeaderDigest, tarPaddingBytes, tarRecordLength, tarTrailer, type TarEntry } from '../tar';
import {
  beforeClock,
  END_OF_ARCHIVE,
  statKey,
  symlinkStaysInside,
  tarEntryOf,
  type CommittedIndex,
  type IndexedRecord,
} from './tree-index';
import { STATS_AHEAD } from './workspace-dir';

/**
 * File reads while capturing: 1 MiB, not the default 64 KiB. Each piece crosses a Readable and the chunker, which
 * both cost per piece (`npm run bench:sessions` prints the capture path alone: "capture → store.write"). Smaller
 * pieces (headers, small files, padding) are gathered up to the same size for the same reason.
 */
const READ_BYTES = 1024 * 1024;
/**
 * Bytes the exact pass of a pre-copy capture copies into memory while the group is frozen, at most: what changed
 * since the draft and the edges of its runs. A state that changed more is read with the group frozen throughout.
 */
const FROZEN_COPY_BYTES = 64 * 1024 * 1024;
/**
 * The edges of a run copied while frozen: the store chunks again from a run's start until its chunking is back in
 * step with the base (a chunk or two: at most 128 KiB each) and about the last chunk before its end.
 */
const RUN_HEAD_BYTES = 512 * 1024;
const RUN_TAIL_BYTES = 256 * 1024;
/** Records in one unchanged run at most (see capturePieces). */
const RUN_MAX_RECORDS = 4096;

/** What a capture that may be stored does besides producing bytes. */
export interface Indexing {
  /** The file system's clock once the group was frozen (null if unknown): see `capturePieces`. */
  readonly clockNs: bigint | null;
  /** Makes the capture's index the instance's base; called by `stored`. */
  commit(index: CommittedIndex): void;
}

/**
 * A capture of `root` as a state source. `thaw` runs when the pieces end or fail, and on `close` (it does nothing
 * the second time). Without `indexing` (plain `capture`) no index is built and the capture cannot be stored.
 */
export function openCapture(
  root: string,
  thaw: () => void,
  base: CommittedIndex | undefined,
  indexing: Indexing | undefined,
): CapturedState {
  const pending = indexing && new Map<string, IndexedRecord>();
  let complete = false;
  async function* pieces(): AsyncGenerator<Uint8Array | UnchangedRange> {
    try {
      yield* capturePieces(root, base?.records, pending, indexing?.clockNs ?? null, undefined);
      complete = true;
    } finally {
      thaw();
    }
  }
  const generator = pieces();
  return {
    base: base?.checkpointId ?? null,
    pieces: generator,
    close: () => {
      thaw();
      // Closes a file left open mid-read; a generator that never started just ends.
      generator.return(undefined).catch(() => undefined);
    },
    stored: (checkpointId) => {
      if (!indexing || !pending || !complete) {
        throw new Error('only a captureState whose pieces were all produced can be stored');
      }
      indexing.commit({ checkpointId, records: pending });
    },
  };
}

/** The group held still for the exact pass of a pre-copy capture, and the file system's clock then. */
export interface Hold {
  readonly thaw: () => void;
  readonly clockNs: bigint | null;
}

/** What a pre-copy capture needs of its runtime. */
export interface PrecopyParts {
  /** The last stored capture's layout, which the draft names its unchanged runs against. */
  readonly base: CommittedIndex | undefined;
  /** The file system's clock now (null if unknown): read before the draft's walk. */
  clock(): Promise<bigint | null>;
  /** Freezes the group and reads the clock; called once, when the exact pass starts. */
  freeze(): Promise<Hold>;
  /** Makes the exact pass's index the instance's base; called by `stored`. */
  commit(index: CommittedIndex): void;
}

/**
 * A capture of `root` told twice: a draft (`precopy`), read while the group runs and named against the last stored
 * capture, then the state itself (`pieces`), read with the group frozen and named against the draft. A consumer that
 * stores the draft first freezes the group only for what changed since it was read: the exact pass walks the
 * frozen tree and reads again every file whose stat key is not the one the draft read it at.
 *
 * The draft is only ever a source of bytes already stored: its index leaves out every file that changed while it was
 * read (its stat key before and after the read differ, it shrank, it went) and every file changed at or after the
 * clock reading before its walk (a change in the same clock tick would not move the key), so a file the exact pass
 * finds at a key the draft holds is, byte for byte, what the draft read.
 */
export function openPrecopyCapture(root: string, parts: PrecopyParts): CapturedState {
  const draft = new Draft();
  const pending = new Map<string, IndexedRecord>();
  let complete = false;
  let closed = false;
  let hold: Hold | undefined;
  async function* precopy(): AsyncGenerator<Uint8Array | UnchangedRange> {
    const clockNs = await parts.clock();
    yield* capturePieces(root, parts.base?.records, draft.index, clockNs, draft);
    draft.complete = true;
  }
  async function* pieces(): AsyncGenerator<Uint8Array | UnchangedRange> {
    try {
      hold = await parts.freeze();
      if (closed) return;
      const live = capturePieces(root, draft.take(), pending, hold.clockNs, undefined, true);
      // Copied while frozen: the walk, every byte the draft does not hold, and the edges of the runs, which are
      // what the store reads of them. Then the group runs again while the copy is chunked and sealed. Past the
      // budget, the rest is read with the group still frozen.
      const copied: Array<Uint8Array | UnchangedRange> = [];
      let bytes = 0;
      let next = await live.next();
      for (; !next.done && bytes <= FROZEN_COPY_BYTES; next = await live.next()) {
        const piece = next.value;
        bytes += piece instanceof UnchangedRun ? await piece.copyEdges() : piece.length;
        copied.push(piece);
      }
      if (next.done) hold.thaw();
      yield* copied;
      if (!next.done) {
        yield next.value;
        yield* live;
      }
      complete = true;
    } finally {
      hold?.thaw();
    }
  }
  const drafted = precopy();
  const generator = pieces();
  return {
    base: parts.base?.checkpointId ?? null,
    precopy: drafted,
    pieces: generator,
    close: () => {
      closed = true;
      hold?.thaw();
      // Closes a file left open mid-read; a generator that never started just ends.
      drafted.return(undefined).catch(() => undefined);
      generator.return(undefined).catch(() => undefined);
    },
    stored: (checkpointId) => {
      if (!complete) throw new Error('only a captureState whose pieces were all produced can be stored');
      parts.commit({ checkpointId, records: pending });
    },
  };
}

/**
 * What the draft of a pre-copy capture read, record by record: `index` as `capturePieces` built it, less what `take`
 * drops (the records found changed while read, which may be found so only after their record was indexed).
 */
class Draft {
  readonly index = new Map<string, IndexedRecord>();
  /** The file records of the draft by path; `dirty` once found changed while read. */
  readonly files = new Map<string, CaptureRecord>();
  complete = false;
  private taken = false;

  /** The draft's layout as the exact pass names runs against it: none unless it was read to the end. */
  take(): Map<string, IndexedRecord> | undefined {
    this.taken = true;
    if (!this.complete) return undefined;
    for (const [key, record] of this.files) if (record.dirty) this.index.delete(key);
    return this.index;
  }

  /** Records that `record` was found changed while read; too late once the exact pass has taken the layout. */
  markDirty(record: CaptureRecord): void {
    if (this.taken) throw new RuntimeBusyError(`${record.entry?.name} was read for the draft after the capture froze`);
    record.dirty = true;
  }
}

/** A record of the stream being captured: a tree entry, or the trailer (no entry). */
interface CaptureRecord {
  readonly entry: TarEntry | undefined;
  readonly headerLength: number;
  readonly file: FileContent | undefined;
  /** Of a draft: its bytes are not surely the file's at its stat key. */
  dirty?: boolean;
}

/** Where a file record's content comes from, and the stat key the file must keep while it is read. */
interface FileContent {
  readonly absPath: string;
  readonly statKey: string;
}

/**
 * The capture's stream: the tar records of the tree under `root` in walk order, then the trailer. A record is
 * named as unchanged when `base` holds the same path with the same header digest and, for a file, the same stat
 * key; consecutive unchanged records whose base offsets follow on from each other make one range.
 *
 * Each record goes into `pending` at its offset in this stream, except a file whose ctime is not before
 * `clockNs`. Time stamps are only as fine as the file system's clock: a write after the thaw, in the same tick as
 * one before the freeze, would leave the stat key as it is with other content. A file last changed before the
 * clock reading gets a later ctime from any change to come, so its key cannot come back with other content.
 */
async function* capturePieces(
  root: string,
  base: ReadonlyMap<string, IndexedRecord> | undefined,
  pending: Map<string, IndexedRecord> | undefined,
  clockNs: bigint | null,
  draft: Draft | undefined,
  sync = false,
): AsyncGenerator<Uint8Array | UnchangedRange> {
  const batch = new PieceBatcher();
  let offset = 0;
  let run: UnchangedRun | undefined;

  async function* add(
    key: string,
    header: Buffer,
    record: CaptureRecord,
    indexable: boolean,
  ): AsyncGenerator<Uint8Array | UnchangedRange> {
    const size = record.entry?.size ?? 0;
    const length = tarRecordLength(header.length, size);
    const headerDigest = base || pending ? tarHeaderDigest(header) : '';
    const statKey = record.file?.statKey;
    const known = base?.get(key);
    if (known && known.length === length && known.headerDigest === headerDigest && known.statKey === statKey) {
      // A run is also closed at RUN_MAX_RECORDS, so that a large unchanged tree reaches the store (and its progress)
      // as it is walked, not all at the end, and the records a run keeps stay few. The store re-reads about one chunk
      // where a run ends.
      if (!run || run.baseOffset + run.length !== known.offset || run.count >= RUN_MAX_RECORDS) {
        yield* batch.flush();
        if (run) yield run;
        run = new UnchangedRun(known.offset, draft, sync);
      }
      run.add(record);
    } else {
      if (run) yield run;
      run = undefined;
      yield* batch.add(header);
      if (record.file) yield* readContent(record, 0, size, batch, false, draft, sync);
      yield* batch.add(Buffer.alloc(tarPaddingBytes(size)));
    }
    if (pending && indexable && !record.dirty) pending.set(key, { offset, length, headerDigest, statKey });
    offset += length;
  }

  const walk = sync ? walkTreeSync(root, '') : walkTree(root, '', draft !== undefined);
  for await (const { entry, absPath, stats } of walk) {
    const header = encodeTarHeader(entry);
    if (entry.type === 'file') {
      const record: CaptureRecord = { entry, headerLength: header.length, file: { absPath, statKey: statKey(stats) } };
      draft?.files.set(entry.name, record);
      yield* add(entry.name, header, record, beforeClock(stats.ctimeNs, clockNs));
    } else {
      yield* add(entry.name, header, { entry, headerLength: header.length, file: undefined }, true);
    }
  }
  const trailer = tarTrailer();
  yield* add(END_OF_ARCHIVE, trailer, { entry: undefined, headerLength: trailer.length, file: undefined }, true);
  yield* batch.flush();
  if (run) yield run;
}

/**
 * A run of records that are, byte for byte, a run of the base capture's stream. `read` regenerates any part of it
 * from the tree: headers (encoded again: the encoder is deterministic), file contents, padding.
 */
class UnchangedRun implements UnchangedRange {
  length = 0;
  /** Each record's start within the run, ascending. */
  private readonly starts: number[] = [];
  private readonly records: CaptureRecord[] = [];

  constructor(
    readonly baseOffset: number,
    private readonly draft: Draft | undefined,
    private readonly sync: boolean,
  ) {}

  /** Parts of the run read ahead (its edges), each at its offset in the run. */
  private readonly copies: Array<{ start: number; bytes: Buffer }> = [];

  get count(): number {
    return this.records.length;
  }

  /**
   * Reads the run's edges now (see RUN_HEAD_BYTES), so that later reads of them need not meet the tree: the group
   * may run again by then. Returns the bytes copied. A later read elsewhere reads the tree, and fails if a file
   * changed (its stat key is checked before and after).
   */
  async copyEdges(): Promise<number> {
    const read = async (start: number, end: number): Promise<void> => {
      const parts: Uint8Array[] = [];
      for await (const part of this.read(start, end)) parts.push(part);
      this.copies.push({ start, bytes: Buffer.concat(parts) });
    };
    if (this.length <= RUN_HEAD_BYTES + RUN_TAIL_BYTES) {
      await read(0, this.length);
    } else {
      await read(0, RUN_HEAD_BYTES);
      await read(this.length - RUN_TAIL_BYTES, this.length);
    }
    return Math.min(this.length, RUN_HEAD_BYTES + RUN_TAIL_BYTES);
  }

  add(record: CaptureRecord): void {
    const size = record.entry?.size ?? 0;
    this.starts.push(this.length);
    this.records.push(record);
    this.length += tarRecordLength(record.headerLength, size);
  }

  async *read(start: number, end: number): AsyncGenerator<Uint8Array> {
    const valid = Number.isSafeInteger(start) && Number.isSafeInteger(end) && start >= 0 && end <= this.length;
    if (!valid || start > end) throw new RangeError(`cannot read [${start}, ${end}) of a run of ${this.length} bytes`);
    const copy = this.copies.find((c) => c.start <= start && end <= c.start + c.bytes.length);
    if (copy) {
      if (end > start) yield copy.bytes.subarray(start - copy.start, end - copy.start);
      return;
    }
    const batch = new PieceBatcher();
    for (let i = lastAtOrBefore(this.starts, start); i < this.records.length && this.starts[i]! < end; i++) {
      const record = this.records[i]!;
      const recordStart = this.starts[i]!;
      const size = record.entry?.size ?? 0;
      const contentStart = recordStart + record.headerLength;
      const paddingStart = contentStart + size;
      // The part of this record to read: [from, to).
      const from = Math.max(start, recordStart);
      const to = Math.min(end, paddingStart + tarPaddingBytes(size));
      if (from < contentStart) {
        const header = record.entry ? encodeTarHeader(record.entry) : tarTrailer();
        yield* batch.add(header.subarray(from - recordStart, Math.min(to, contentStart) - recordStart));
      }
      if (record.file && from < paddingStart && to > contentStart) {
        const contentFrom = Math.max(from, contentStart) - contentStart;
        const contentTo = Math.min(to, paddingStart) - contentStart;
        yield* readContent(record, contentFrom, contentTo, batch, true, this.draft, this.sync);
      }
      if (to > paddingStart) yield* batch.add(Buffer.alloc(to - Math.max(from, paddingStart)));
    }
    yield* batch.flush();
  }
}

/** The index of the last element of the ascending `values` that is at most `value` (`values[0]` is 0). */
function lastAtOrBefore(values: readonly number[], value: number): number {
  let low = 0;
  let high = values.length - 1;
  while (low < high) {
    const middle = Math.ceil((low + high) / 2);
    if (values[middle]! <= value) low = middle;
    else high = middle - 1;
  }
  return low;
}

/**
 * Bytes `[start, end)` of a file record's content, through `batch`, in pieces of at most READ_BYTES. A file that
 * is shorter than that fails the capture rather than producing a corrupt archive. With `checkKey` (reading an
 * unchanged run, which claims the base's bytes) a change since the walk fails it too, before or during the read.
 * A draft's reads never fail for a change: see readDraftContent.
 */
async function* readContent(
  record: CaptureRecord,
  start: number,
  end: number,
  batch: PieceBatcher,
  checkKey: boolean,
  draft: Draft | undefined,
  sync: boolean,
): AsyncGenerator<Uint8Array> {
  const { entry, file } = record;
  if (!entry || !file) throw new Error('a record without a file has no content');
  if (draft) {
    yield* readDraftContent(record, file, start, end, batch, draft);
    return;
  }
  if (sync) {
    yield* readContentSync(entry, file, start, end, batch, checkKey);
    return;
  }
  // O_NOFOLLOW: the walk saw a regular file; whatever replaced it with a symlink is not read through.
  const handle = await fsp.open(file.absPath, fsConstants.O_RDONLY | fsConstants.O_NOFOLLOW);
  try {
    const changed = async (): Promise<boolean> => statKey(await handle.stat({ bigint: true })) !== file.statKey;
    if (checkKey && (await changed())) throw new RuntimeBusyError(`${entry.name} changed during capture`);
    for (let position = start; position < end;) {
      const buffer = Buffer.allocUnsafe(Math.min(READ_BYTES, end - position));
      for (let filled = 0; filled < buffer.length;) {
        const { bytesRead } = await handle.read(buffer, filled, buffer.length - filled, position + filled);
        if (bytesRead === 0) throw new RuntimeBusyError(`${entry.name} changed size during capture`);
        filled += bytesRead;
      }
      position += buffer.length;
      yield* batch.add(buffer);
    }
    // A run may be read after the group was thawed (whoever reads its edges late): a write during the read moves
    // the key, and bytes read across it must not pass for the base's.
    if (checkKey && (await changed())) throw new RuntimeBusyError(`${entry.name} changed during capture`);
  } finally {
    await handle.close();
  }
}

/**
 * `readContent` with synchronous calls: the exact pass of a pre-copy capture, while the group is frozen. The thread
 * pool that asynchronous file calls wait for may be busy with the store's pack writes and fsyncs, and every
 * millisecond spent waiting there is a millisecond frozen; the page cache answers these reads directly.
 */
function* readContentSync(
  entry: TarEntry,
  file: FileContent,
  start: number,
  end: number,
  batch: PieceBatcher,
  checkKey: boolean,
): Generator<Uint8Array> {
  const fd = fs.openSync(file.absPath, fsConstants.O_RDONLY | fsConstants.O_NOFOLLOW);
  try {
    const changed = (): boolean => statKey(fs.fstatSync(fd, { bigint: true })) !== file.statKey;
    if (checkKey && changed()) throw new RuntimeBusyError(`${entry.name} changed during capture`);
    for (let position = start; position < end;) {
      const buffer = Buffer.allocUnsafe(Math.min(READ_BYTES, end - position));
      for (let filled = 0; filled < buffer.length;) {
        const bytesRead = fs.readSync(fd, buffer, filled, buffer.length - filled, position + filled);
        if (bytesRead === 0) throw new RuntimeBusyError(`${entry.name} changed size during capture`);
        filled += bytesRead;
      }
      position += buffer.length;
      yield* batch.add(buffer);
    }
    if (checkKey && changed()) throw new RuntimeBusyError(`${entry.name} changed during capture`);
  } finally {
    fs.closeSync(fd);
  }
}

/**
 * `readContent` for a draft, read while the group runs: always exactly `end - start` bytes, so that the draft's
 * records stay where its walk put them. The record is marked dirty (the rest of its bytes zeros) unless the file is
 * at the walk's stat key both before and after the read and as long as the walk said.
 */
async function* readDraftContent(
  record: CaptureRecord,
  file: FileContent,
  start: number,
  end: number,
  batch: PieceBatcher,
  draft: Draft,
): AsyncGenerator<Uint8Array> {
  const handle = await fsp.open(file.absPath, fsConstants.O_RDONLY | fsConstants.O_NOFOLLOW).catch(() => undefined);
  try {
    const atKey = async (): Promise<boolean> => statKey(await handle!.stat({ bigint: true })) === file.statKey;
    let position = start;
    let clean = handle !== undefined && (await atKey());
    while (clean && position < end) {
      const buffer = Buffer.allocUnsafe(Math.min(READ_BYTES, end - position));
      let filled = 0;
      while (filled < buffer.length) {
        const { bytesRead } = await handle!.read(buffer, filled, buffer.length - filled, position + filled);
        if (bytesRead === 0) break;
        filled += bytesRead;
      }
      if (filled < buffer.length) {
        clean = false;
        buffer.fill(0, filled);
      }
      position += buffer.length;
      yield* batch.add(buffer);
    }
    if (clean) clean = await atKey();
    if (!clean) draft.markDirty(record);
    for (; position < end; position += READ_BYTES) yield* batch.add(Buffer.alloc(Math.min(READ_BYTES, end - position)));
  } finally {
    await handle?.close();
  }
}

/**
 * Gathers small pieces into pieces of about READ_BYTES; a piece that large passes through uncopied. Order is kept:
 * `flush` before anything else is yielded alongside.
 */
class PieceBatcher {
  private pieces: Uint8Array[] = [];
  private bytes = 0;

  *add(piece: Uint8Array): Generator<Uint8Array> {
    if (piece.length === 0) return;
    if (piece.length >= READ_BYTES) {
      yield* this.flush();
      yield piece;
      return;
    }
    this.pieces.push(piece);
    this.bytes += piece.length;
    if (this.bytes >= READ_BYTES) yield* this.flush();
  }

  *flush(): Generator<Uint8Array> {
    if (this.bytes === 0) return;
    const pieces = this.pieces;
    const bytes = this.bytes;
    this.pieces = [];
    this.bytes = 0;
    yield pieces.length === 1 ? pieces[0]! : Buffer.concat(pieces, bytes);
  }
}

/** A tree entry as the walk meets it. */
interface WalkedEntry {
  readonly entry: TarEntry;
  readonly absPath: string;
  readonly stats: BigIntStats;
}

/** `walkTree` with synchronous calls, for the exact pass of a pre-copy capture (see readContentSync). */
function* walkTreeSync(root: string, relDir: string): Generator<WalkedEntry> {
  for (const name of fs.readdirSync(path.join(root, relDir)).sort()) {
    const relPath = relDir === '' ? name : `${relDir}/${name}`;
    const absPath = path.join(root, relPath);
    const stats = fs.lstatSync(absPath, { bigint: true });
    const target = stats.isSymbolicLink() ? fs.readlinkSync(absPath) : undefined;
    if (target !== undefined && !symlinkStaysInside(relPath, target)) {
      throw new RuntimeFailedError(
        `symlink ${relPath} points outside the workspace (${target}); it cannot be restored`,
      );
    }
    const entry = tarEntryOf(relPath, stats, target);
    if (!entry) continue;
    yield { entry, absPath, stats };
    if (entry.type === 'directory') yield* walkTreeSync(root, relPath);
  }
}

/**
 * The tree under `root`: directories, regular files and symlinks, in sorted order so the same tree always gives
 * the same bytes. Sockets, fifos and devices hold no state a restore could bring back and are left out.
 *
 * `tolerant` (a draft's walk, while the group runs) leaves out what goes or changes kind under it, and symlinks that
 * lead outside, rather than failing: the exact pass judges the tree as it is once frozen.
 */
async function* walkTree(root: string, relDir: string, tolerant: boolean): AsyncGenerator<WalkedEntry> {
  let names: string[];
  try {
    names = (await fsp.readdir(path.join(root, relDir))).sort();
  } catch (error) {
    if (tolerant && relDir !== '') return;
    throw error;
  }
  // Several lstat calls in flight, not one at a time: the walk is most of what an unchanged capture costs.
  const ahead: Array<Promise<BigIntStats>> = [];
  const statAhead = (index: number): void => {
    const name = names[index];
    if (name === undefined) return;
    const stats = fsp.lstat(path.join(root, relDir, name), { bigint: true });
    stats.catch(() => undefined); // awaited below, unless the walk fails first: never an unhandled rejection
    ahead.push(stats);
  };
  for (let i = 0; i < STATS_AHEAD; i++) statAhead(i);
  for (let i = 0; i < names.length; i++) {
    statAhead(i + STATS_AHEAD);
    const name = names[i]!;
    const relPath = relDir === '' ? name : `${relDir}/${name}`;
    const absPath = path.join(root, relPath);
    let stats: BigIntStats;
    let target: string | undefined;
    try {
      stats = await ahead.shift()!;
      if (stats.isSymbolicLink()) target = await fsp.readlink(absPath);
    } catch (error) {
      if (tolerant) continue;
      throw error;
    }
    if (target !== undefined && !symlinkStaysInside(relPath, target)) {
      if (tolerant) continue;
      throw new RuntimeFailedError(
        `symlink ${relPath} points outside the workspace (${target}); it cannot be restored`,
      );
    }
    const entry = tarEntryOf(relPath, stats, target);
    if (!entry) continue;
    yield { entry, absPath, stats };
    if (entry.type === 'directory') yield* walkTree(root, relPath, tolerant);
  }
}
