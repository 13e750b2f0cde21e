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
      yield* capturePieces(root, base?.records, pending, indexing?.clockNs ?? null);
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

/** A record of the stream being captured: a tree entry, or the trailer (no entry). */
interface CaptureRecord {
  readonly entry: TarEntry | undefined;
  readonly headerLength: number;
  readonly file: FileContent | undefined;
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
        run = new UnchangedRun(known.offset);
      }
      run.add(record);
    } else {
      if (run) yield run;
      run = undefined;
      yield* batch.add(header);
      if (record.file) yield* readContent(record, 0, size, batch, false);
      yield* batch.add(Buffer.alloc(tarPaddingBytes(size)));
    }
    if (pending && indexable) pending.set(key, { offset, length, headerDigest, statKey });
    offset += length;
  }

  for await (const { entry, absPath, stats } of walkTree(root)) {
    const header = encodeTarHeader(entry);
    if (entry.type === 'file') {
      const file = { absPath, statKey: statKey(stats) };
      const indexable = beforeClock(stats.ctimeNs, clockNs);
      yield* add(entry.name, header, { entry, headerLength: header.length, file }, indexable);
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

  constructor(readonly baseOffset: number) {}

  get count(): number {
    return this.records.length;
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
        yield* readContent(record, contentFrom, Math.min(to, paddingStart) - contentStart, batch, true);
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
 * unchanged run, which claims the base's bytes) any change since the walk fails it too.
 */
async function* readContent(
  record: CaptureRecord,
  start: number,
  end: number,
  batch: PieceBatcher,
  checkKey: boolean,
): AsyncGenerator<Uint8Array> {
  const { entry, file } = record;
  if (!entry || !file) throw new Error('a record without a file has no content');
  // O_NOFOLLOW: the walk saw a regular file; whatever replaced it with a symlink is not read through.
  const handle = await fsp.open(file.absPath, fsConstants.O_RDONLY | fsConstants.O_NOFOLLOW);
  try {
    if (checkKey && statKey(await handle.stat({ bigint: true })) !== file.statKey) {
      throw new RuntimeBusyError(`${entry.name} changed during capture`);
    }
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
  } finally {
    await handle.close();
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

/**
 * The tree under `root`: directories, regular files and symlinks, in sorted order so the same tree always gives
 * the same bytes. Sockets, fifos and devices hold no state a restore could bring back and are left out.
 */
async function* walkTree(root: string, relDir = ''): AsyncGenerator<WalkedEntry> {
  const names = (await fsp.readdir(path.join(root, relDir))).sort();
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
    const stats = await ahead.shift()!;
    let target: string | undefined;
    if (stats.isSymbolicLink()) {
      target = await fsp.readlink(absPath);
      if (!symlinkStaysInside(relPath, target)) {
        throw new RuntimeFailedError(
          `symlink ${relPath} points outside the workspace (${target}); it cannot be restored`,
        );
      }
    }
    const entry = tarEntryOf(relPath, stats, target);
    if (!entry) continue;
    yield { entry, absPath, stats };
    if (entry.type === 'directory') yield* walkTree(root, relPath);
  }
}
