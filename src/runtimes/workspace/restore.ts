import { constants as fsConstants, type BigIntStats } from 'node:fs';
import * as fsp from 'node:fs/promises';
import * as path from 'node:path';
import type { Readable } from 'node:stream';
import { setTimeout as delay } from 'node:timers/promises';
import { writevAll } from '../../fs-io';
import { ERROR_CODES } from '../../domain/error-codes';
import { DurableSessionsError } from '../../errors';
import {
  encodeTarHeader,
  readTarStream,
  tarHeaderDigest,
  tarRecordLength,
  tarTrailer,
  type TarEntry,
  type TarHeader,
  type TarLayout,
  type TarLayoutReader,
  type TarReadEntry,
} from '../tar';
import {
  beforeClock,
  END_OF_ARCHIVE,
  fileSystemNow,
  statKey,
  symlinkStaysInside,
  tarEntryOf,
  type CommittedIndex,
  type IndexedRecord,
} from './tree-index';
import { STATS_AHEAD } from './workspace-dir';

/**
 * Thrown by `restore` when the state archive holds an entry that could land outside the workspace (an absolute
 * path, "..", a symlink pointing out) or one a workspace cannot hold (hard links, devices, fifos).
 */
export class ArchiveRejectedError extends DurableSessionsError {
  /** The archive itself is malformed or hostile: no retry can make it restorable. */
  readonly code = ERROR_CODES.SnapshotCorrupt;
  constructor(
    message: string,
    readonly entryName: string,
  ) {
    super(message);
  }
}

/** Bytes gathered before a file write while restoring (see writeEntry). */
const WRITE_BYTES = 1024 * 1024;
/**
 * Files written at once while restoring, and the content bytes they may hold: a file of at most WRITE_BYTES is in
 * memory once its entry is read, so its open, write, mode, times and close (each a trip through the thread pool) need
 * not hold up the entries after it. A tree of many small files is written several files at a time, as tar -x cannot.
 */
const FILES_IN_FLIGHT = 16;
const BYTES_IN_FLIGHT = 8 * 1024 * 1024;
/** How long restore waits at most for the file system's clock to move past the last restored file's ctime. */
const CLOCK_WAIT_MS = 100;

/**
 * Extracts a tar stream produced by `capture` into the empty directory `root`, and resolves with the paths written,
 * in archive order. Resolves only after `state` has ended and every file is written; if `state` fails, rejects with
 * its error object unchanged (it says why, e.g. a digest mismatch), and only once no write is in flight any more.
 * `layout`, if given, is shown every byte the extractor is.
 */
export async function extractArchive(state: Readable, root: string, layout?: TarLayoutReader): Promise<RestoredPath[]> {
  const writes = new FileWrites();
  try {
    return await readTarStream(state, (entries) => extractEntries(entries, root, writes), layout);
  } finally {
    // A failed restore removes the directory next: nothing may still be writing into it then.
    await writes.idle();
  }
}

/**
 * Writes each entry under `root`. Path traversal is defeated in two steps: names that are absolute or contain
 * ".." are rejected, and symlinks are created only after every file and directory, so no write can ever go
 * through a link the archive planted (e.g. `link -> /etc` followed by `link/passwd`).
 */
async function extractEntries(
  entries: AsyncIterable<TarReadEntry>,
  root: string,
  writes: FileWrites,
): Promise<RestoredPath[]> {
  const restored: RestoredPath[] = [];
  const symlinks: Array<{ file: string; target: string; mtime: Date }> = [];
  const directories: Array<{ dir: string; mode: number; mtime: Date }> = [];
  // Directories known to exist: a file's parent is made once, not once per file.
  const made = new Set<string>([root]);
  const parentOf = async (file: string): Promise<void> => {
    const dir = path.dirname(file);
    if (made.has(dir)) return;
    await fsp.mkdir(dir, { recursive: true });
    made.add(dir);
  };
  for await (const entry of entries) {
    const { header } = entry;
    const segments = entrySegments(header.name);
    const file = path.join(root, ...segments);
    switch (header.type) {
      case 'file':
      case 'contiguous-file':
        if (segments.length === 0) throw new ArchiveRejectedError('file entry without a name', header.name);
        if ((header.size ?? 0) <= WRITE_BYTES) {
          // Read whole here, written beside the entries that follow.
          const content = await readEntry(entry);
          await writes.add(file, content.bytes, async () => {
            await parentOf(file);
            await writeFile(file, content.buffers, header);
          });
        } else {
          await writes.after(file);
          await parentOf(file);
          await writeEntry(entry, file);
        }
        restored.push({ name: segments.join('/') });
        break;
      case 'directory':
        // Owner-writable until every entry is in; the archived mode and mtime are applied at the end.
        entry.resume();
        await writes.after(file);
        await fsp.mkdir(file, { recursive: true, mode: 0o700 });
        made.add(file);
        if (segments.length > 0) directories.push({ dir: file, mode: header.mode & 0o777, mtime: header.mtime });
        restored.push({ name: segments.join('/') });
        break;
      case 'symlink': {
        // tar-stream reports an empty link name as null, whatever its types say.
        const target = header.linkname ?? '';
        if (segments.length === 0 || target === '' || !symlinkStaysInside(segments.join('/'), target)) {
          throw new ArchiveRejectedError(`symlink ${header.name} points outside the workspace`, header.name);
        }
        entry.resume();
        symlinks.push({ file, target, mtime: header.mtime });
        restored.push({ name: segments.join('/'), linkname: target });
        break;
      }
      default:
        throw new ArchiveRejectedError(`entry ${header.name} has unsupported type ${header.type}`, header.name);
    }
  }
  // Every file is in before a symlink exists or a directory is sealed.
  await writes.settled();
  for (const { file, target, mtime } of symlinks) {
    await fsp.mkdir(path.dirname(file), { recursive: true });
    await fsp.symlink(target, file);
    await fsp.lutimes(file, mtime, mtime);
  }
  // Deepest first, so a read-only directory is sealed, and its mtime set, only after its contents.
  for (const { dir, mode, mtime } of directories.reverse()) {
    await fsp.chmod(dir, mode);
    await fsp.utimes(dir, mtime, mtime);
  }
  return restored;
}

/**
 * The file writes of one extraction that run beside it, at most FILES_IN_FLIGHT and BYTES_IN_FLIGHT at once. The
 * first that fails fails the extraction: `add` and `settled` throw its error.
 */
class FileWrites {
  private readonly inFlight = new Map<Promise<void>, number>();
  /** The write in flight for each path: a second entry of the same name waits for the first (the last one wins). */
  private readonly byPath = new Map<string, Promise<void>>();
  private bytes = 0;
  private failure: { error: unknown } | undefined;

  /** Starts `write` of `file` (holding `bytes`) once there is room, after any write of the same path. */
  async add(file: string, bytes: number, write: () => Promise<void>): Promise<void> {
    while (this.inFlight.size >= FILES_IN_FLIGHT || (this.inFlight.size > 0 && this.bytes + bytes > BYTES_IN_FLIGHT)) {
      await Promise.race(this.inFlight.keys());
    }
    this.check();
    const before = this.byPath.get(file);
    const running: Promise<void> = (before ? before.then(write) : write())
      .catch((error: unknown) => {
        this.failure ??= { error };
      })
      .finally(() => {
        this.inFlight.delete(running);
        this.bytes -= bytes;
        if (this.byPath.get(file) === running) this.byPath.delete(file);
      });
    this.inFlight.set(running, bytes);
    this.byPath.set(file, running);
    this.bytes += bytes;
  }

  /** Waits for the write in flight of `path`, if any. */
  async after(path: string): Promise<void> {
    await this.byPath.get(path);
    this.check();
  }

  /** Waits until no write is in flight; throws the first failure. */
  async settled(): Promise<void> {
    await this.idle();
    this.check();
  }

  /** Waits until no write is in flight. */
  async idle(): Promise<void> {
    while (this.inFlight.size > 0) await Promise.all(this.inFlight.keys());
  }

  private check(): void {
    if (this.failure) throw this.failure.error;
  }
}

/** The whole content of a (small) entry, as the reader cut it. */
async function readEntry(entry: AsyncIterable<unknown>): Promise<{ buffers: Buffer[]; bytes: number }> {
  const buffers: Buffer[] = [];
  let bytes = 0;
  for await (const chunk of entry) {
    buffers.push(chunk as Buffer);
    bytes += (chunk as Buffer).length;
  }
  return { buffers, bytes };
}

/** The path segments of an archive entry name; `[]` is the workspace itself. */
function entrySegments(name: string): string[] {
  if (name.startsWith('/')) throw new ArchiveRejectedError(`entry ${name} has an absolute path`, name);
  const segments = name.split('/').filter((s) => s !== '' && s !== '.');
  if (segments.includes('..')) throw new ArchiveRejectedError(`entry ${name} contains ".."`, name);
  return segments;
}

// O_NOFOLLOW: defence in depth; no symlink exists yet while files are written.
const CREATE_FLAGS = fsConstants.O_WRONLY | fsConstants.O_CREAT | fsConstants.O_TRUNC | fsConstants.O_NOFOLLOW;

/** Writes a file whose content is in hand, with its mode and times. */
async function writeFile(file: string, content: readonly Buffer[], header: TarHeader): Promise<void> {
  const handle = await fsp.open(file, CREATE_FLAGS, 0o600);
  try {
    await writevAll(handle, content);
    await finishFile(handle, header);
  } finally {
    await handle.close();
  }
}

/** Streams a large entry into `file`: one write in flight while the next MiB is gathered. */
async function writeEntry(entry: AsyncIterable<unknown> & { header: TarHeader }, file: string): Promise<void> {
  const handle = await fsp.open(file, CREATE_FLAGS, 0o600);
  let writing: Promise<void> = Promise.resolve();
  try {
    // Pieces arrive as the archive reader cut them, far smaller than a write should be: gathered up to WRITE_BYTES.
    let pending: Buffer[] = [];
    let pendingBytes = 0;
    const flush = async (): Promise<void> => {
      const batch = pending;
      pending = [];
      pendingBytes = 0;
      await writing;
      writing = writevAll(handle, batch);
      writing.catch(() => undefined); // awaited by the next flush or below
    };
    for await (const chunk of entry) {
      const data = chunk as Buffer;
      pending.push(data);
      pendingBytes += data.length;
      if (pendingBytes >= WRITE_BYTES) await flush();
    }
    await flush();
    await writing;
    await finishFile(handle, entry.header);
  } finally {
    // Never closed under a write still in flight.
    await writing.catch(() => undefined);
    await handle.close();
  }
}

async function finishFile(handle: fsp.FileHandle, header: TarHeader): Promise<void> {
  await handle.chmod(header.mode & 0o777);
  await handle.utimes(header.mtime, header.mtime);
}

/** A path restore wrote, as a capture names it ('' for the workspace itself, which a capture never writes). */
export interface RestoredPath {
  readonly name: string;
  /** A symlink's target, as created. */
  readonly linkname?: string;
}

/**
 * The committed index of the tree restore extracted into `root` from checkpoint `checkpointId`, whose stream had
 * `layout` (undefined: not one a capture writes), or undefined when it cannot be exact. Each entry record must hold,
 * byte for byte, the header a capture of the restored path would encode now, in the same order; then the records lie
 * where a capture of the unchanged tree puts them, and the content of each file is the bytes the stream held there.
 * One record that does not (a stream from another encoder, a header field this encoder never writes) drops the whole
 * index: the next capture then reads everything.
 *
 * Directories and symlinks are indexed by their header bytes; a file also by its stat key, under `capturePieces`'
 * clock rule: the clock is read once every file is written and before the command runs, and a file whose ctime is
 * not before that reading is left out.
 */
export async function indexRestoredTree(
  root: string,
  checkpointId: string,
  layout: TarLayout | undefined,
  restored: readonly RestoredPath[],
): Promise<CommittedIndex | undefined> {
  if (!layout || layout.records.length !== restored.length) return undefined;
  const stats = await lstatAll(root, restored);
  const indexed: Array<{ name: string; record: IndexedRecord; ctimeNs: bigint | undefined }> = [];
  const names = new Set<string>();
  // Two names for one file (a case-insensitive file system, say) would leave one name's record with the other's bytes.
  const files = new Set<string>();
  let offset = 0;
  for (const [i, { name, linkname }] of restored.entries()) {
    const laid = layout.records[i]!;
    const stat = stats[i];
    const entry = name !== '' && stat ? tarEntryOf(name, stat, linkname) : undefined;
    if (!entry || !stat || names.has(name) || laid.offset !== offset || laid.size !== entry.size) return undefined;
    const header = encodedOrNull(entry);
    if (header?.length !== laid.headerLength || tarHeaderDigest(header) !== laid.headerDigest) return undefined;
    names.add(name);
    const isFile = entry.type === 'file';
    if (isFile) {
      const inode = `${stat.dev}:${stat.ino}`;
      if (files.has(inode)) return undefined;
      files.add(inode);
    }
    const length = tarRecordLength(laid.headerLength, laid.size);
    const record = { offset, length, headerDigest: laid.headerDigest, statKey: isFile ? statKey(stat) : undefined };
    indexed.push({ name, record, ctimeNs: isFile ? stat.ctimeNs : undefined });
    offset += length;
  }
  if (layout.trailerOffset !== offset) return undefined;

  const ctimes = indexed.flatMap(({ ctimeNs }) => (ctimeNs === undefined ? [] : [ctimeNs]));
  const latestNs = ctimes.reduce((latest, ctime) => (ctime > latest ? ctime : latest), -1n);
  const clockNs = ctimes.length === 0 ? null : await clockAfter(path.dirname(root), latestNs);
  const records = new Map<string, IndexedRecord>();
  for (const { name, record, ctimeNs } of indexed) {
    if (ctimeNs === undefined || beforeClock(ctimeNs, clockNs)) records.set(name, record);
  }
  const trailer = tarTrailer();
  records.set(END_OF_ARCHIVE, { offset, length: trailer.length, headerDigest: tarHeaderDigest(trailer) });
  return { checkpointId, records };
}

/** The lstat of each restored path, several in flight; undefined for one that cannot be read. */
async function lstatAll(root: string, paths: readonly RestoredPath[]): Promise<Array<BigIntStats | undefined>> {
  const stats = new Array<BigIntStats | undefined>(paths.length);
  let next = 0;
  const worker = async (): Promise<void> => {
    for (let i = next++; i < paths.length; i = next++) {
      const file = path.join(root, ...paths[i]!.name.split('/'));
      stats[i] = await fsp.lstat(file, { bigint: true }).catch(() => undefined);
    }
  };
  await Promise.all(Array.from({ length: Math.min(STATS_AHEAD, paths.length) }, worker));
  return stats;
}

/** `encodeTarHeader(entry)`, or null for an entry it refuses (which no capture writes either). */
function encodedOrNull(entry: TarEntry): Buffer | null {
  try {
    return encodeTarHeader(entry);
  } catch (error) {
    if (error instanceof RangeError) return null;
    throw error;
  }
}

/**
 * The file system's clock (see `fileSystemNow`) once it has moved past `latestNs`, or the last reading when it has not
 * within CLOCK_WAIT_MS. Usually a tick or two: restored files are then all before the reading, so all indexable.
 */
async function clockAfter(dir: string, latestNs: bigint): Promise<bigint | null> {
  const deadline = Date.now() + CLOCK_WAIT_MS;
  for (;;) {
    const now = await fileSystemNow(dir);
    if (now === null || now > latestNs || Date.now() >= deadline) return now;
    await delay(1);
  }
}
