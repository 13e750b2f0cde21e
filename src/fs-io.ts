/** File-system helpers shared by the snapshot stores and the runtimes: durable publishing, bounded reads. */
import { randomBytes } from 'node:crypto';
import * as fs from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { isErrnoError } from './errors';

/** Makes the entries of `dir` (a rename, a new file) durable: a rename is only durable once its directory is. */
export async function fsyncDir(dir: string): Promise<void> {
  const handle = await fs.open(dir, 'r');
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

/**
 * Writes every byte of `buffers` with vectored writes, at `position` (or at the file position), going on after a
 * short write (which files rarely do). One call instead of one write per buffer: each write is a thread-pool round
 * trip.
 */
export async function writevAll(handle: fs.FileHandle, buffers: readonly Buffer[], position?: number): Promise<void> {
  const rest = buffers.filter((b) => b.length > 0);
  let at = position;
  while (rest.length > 0) {
    const { bytesWritten } = await handle.writev(rest, at);
    if (bytesWritten === 0) throw new Error('a vectored write made no progress');
    if (at !== undefined) at += bytesWritten;
    let done = bytesWritten;
    while (rest.length > 0 && done >= rest[0]!.length) done -= rest.shift()!.length;
    if (done > 0) rest[0] = rest[0]!.subarray(done);
  }
}

/**
 * `mkdir -p`; returns the first directory it created, if any (as fs.mkdir does). Node's recursive mkdir reports
 * ENOENT where the file system refused with EROFS or ENOSPC; the first missing directory is then made by hand, so
 * that the real reason is what the caller sees.
 */
export async function ensureDir(path: string): Promise<string | undefined> {
  try {
    return await fs.mkdir(path, { recursive: true });
  } catch (err) {
    if (!isErrnoError(err, 'ENOENT')) throw err;
    let missing = path;
    while (dirname(missing) !== missing && !(await exists(dirname(missing)))) missing = dirname(missing);
    await fs.mkdir(missing);
    throw err;
  }
}

export async function exists(path: string): Promise<boolean> {
  return fs.access(path).then(
    () => true,
    () => false,
  );
}

/** What readSmall reads first: a key, a claim or a lineage pointer whole, in one read. */
const FIRST_READ_BYTES = 8 * 1024;

/**
 * The bytes of a small file, or null if it does not exist. A file over `maxBytes` is an error, not read. A file that
 * fits the first read costs an open, a read and a close (the data key is read this way before every checkpoint is
 * published: fs.readFile takes about three times as long for a few hundred bytes).
 */
export async function readSmall(path: string, maxBytes: number): Promise<Buffer | null> {
  let handle: fs.FileHandle;
  try {
    handle = await fs.open(path, 'r');
  } catch (err) {
    if (isErrnoError(err, 'ENOENT')) return null;
    throw err;
  }
  try {
    const first = Buffer.allocUnsafe(Math.min(FIRST_READ_BYTES, maxBytes + 1));
    const { bytesRead } = await handle.read(first, 0, first.length, 0);
    if (bytesRead < first.length) return first.subarray(0, bytesRead);
    const { size } = await handle.stat();
    if (size > maxBytes) throw new Error(`${path} is ${size} bytes, more than the ${maxBytes} it can be`);
    const all = Buffer.allocUnsafe(size);
    first.copy(all, 0, 0, bytesRead);
    let at = bytesRead;
    while (at < size) {
      const { bytesRead: n } = await handle.read(all, at, size - at, at);
      if (n === 0) break;
      at += n;
    }
    return all.subarray(0, at);
  } finally {
    await handle.close();
  }
}

/** What `publish` writes: the bytes whole, or streamed (a file of unknown length, never held in memory). */
export type PublishBody = Buffer | AsyncIterable<Buffer>;

export interface PublishOptions {
  /** Rename over a file already there (the default); false: link, which leaves one already there alone. */
  replace?: boolean;
  /**
   * Called with the temp file's path when a streamed body starts; what it returns is called when the stream ends.
   * A slow write keeps its temp file touched with it, so that a cleaning of leftovers never takes it for a dead one.
   */
  whileStreaming?: (tempPath: string) => () => void;
}

/**
 * Writes `body` to a temp file beside `path` (`.<16 hex>.tmp`, a dot-name no listing shows), fsyncs it, and renames
 * (or, without `replace`, links) it into place, then fsyncs the directory (and the parents of directories it made): a
 * crash leaves the old file or the new one, never part of one. Returns false when `replace` is false and the target
 * exists. Whatever fails, the temp file goes: a full disk must not be left fuller.
 *
 * Each call below is a thread-pool round trip, and a small checkpoint publishes several files: the directory is made
 * only when the temp file cannot be, and the temp file is unlinked only when it is still there.
 */
export async function publish(path: string, body: PublishBody, options: PublishOptions = {}): Promise<boolean> {
  const dir = dirname(path);
  const tmp = join(dir, `.${randomBytes(8).toString('hex')}.tmp`);
  const handle = await createIn(dir, tmp);
  let placed = false;
  try {
    try {
      if (Buffer.isBuffer(body)) {
        await handle.writeFile(body);
      } else {
        const done = options.whileStreaming?.(tmp);
        try {
          for await (const piece of body) await handle.write(piece);
        } finally {
          done?.();
        }
      }
      await handle.sync();
    } finally {
      await handle.close();
    }
    if (options.replace === false) {
      try {
        await fs.link(tmp, path);
      } catch (err) {
        if (isErrnoError(err, 'EEXIST')) return false;
        throw err;
      }
    } else {
      await fs.rename(tmp, path);
      placed = true;
    }
  } finally {
    if (!placed) await unlinkIfPresent(tmp);
  }
  await fsyncDir(dir);
  return true;
}

/** Creates `file` (which must not exist) in `dir`, making `dir` first if it is missing. */
async function createIn(dir: string, file: string): Promise<fs.FileHandle> {
  try {
    return await fs.open(file, 'wx');
  } catch (err) {
    if (!isErrnoError(err, 'ENOENT')) throw err;
  }
  const created = await ensureDir(dir);
  // A directory made here is made durable in its parent first: else a crash could take a published file with it.
  if (created !== undefined) {
    for (let made = dir; ; made = dirname(made)) {
      await fsyncDir(dirname(made));
      if (made === created || dirname(made) === made) break;
    }
  }
  return fs.open(file, 'wx');
}

/** Removes a file; one that is not there is not an error (one call, where `fs.rm` stats it twice first). */
export async function unlinkIfPresent(path: string): Promise<void> {
  try {
    await fs.unlink(path);
  } catch (err) {
    if (!isErrnoError(err, 'ENOENT')) throw err;
  }
}
