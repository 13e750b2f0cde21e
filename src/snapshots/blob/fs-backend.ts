/**
 * The blob backend on a local directory: an object is a file at its key's path. Writes go to a temp file beside the
 * target, are fsynced, then renamed (`put`) or hard-linked (`create`, which fails on an existing name) into place, and
 * the directory is fsynced: a crash leaves the old object or the new one, never part of one. Temp files are dot-names,
 * which no key can be (`checkBlobKey`), so a listing never shows one.
 *
 * For one host, or hosts sharing a POSIX file system that keeps link and rename atomic; many hosts share an object
 * store instead.
 */
import { createReadStream } from 'node:fs';
import * as fs from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { Readable } from 'node:stream';
import { pathToFileURL } from 'node:url';
import { isErrnoError } from '../../errors';
import { publish, unlinkIfPresent } from '../../fs-io';
import { keepTouched, TOUCH_INTERVAL_MS } from '../abandoned';
import {
  checkBlobKey,
  checkBlobPrefix,
  type BlobBackend,
  type BlobBody,
  type BlobInfo,
  type BlobRange,
  type BlobRangeReader,
} from './backend';

/** How many files `list` stats at once. */
const LIST_STATS_AT_ONCE = 64;

/** What `read` of a whole object reads before it asks the object's size. */
const FIRST_READ_BYTES = 16 * 1024;

/** The size of each read a stream makes. */
const STREAM_READ_BYTES = 1024 * 1024;

export class FsBlobBackend implements BlobBackend {
  readonly root: string;
  readonly location: string;

  /**
   * `touchIntervalMs`: how often a streamed write touches its temp file, so that a store's cleaning of leftovers
   * (abandoned.ts), here or on another host sharing the directory, never takes a slow live write for a dead one.
   */
  constructor(
    root: string,
    private readonly options: { touchIntervalMs?: number } = {},
  ) {
    this.root = resolve(root);
    this.location = pathToFileURL(this.root).href;
  }

  private path(key: string): string {
    return join(this.root, checkBlobKey(key));
  }

  async create(key: string, body: BlobBody): Promise<boolean> {
    return this.write(this.path(key), body, false);
  }

  async put(key: string, body: BlobBody): Promise<void> {
    await this.write(this.path(key), body, true);
  }

  /** One write path for the directory stores: fs-io's `publish`, its temp file kept touched while it streams. */
  private write(path: string, body: BlobBody, replace: boolean): Promise<boolean> {
    const every = this.options.touchIntervalMs ?? TOUCH_INTERVAL_MS;
    return publish(path, body, { replace, whileStreaming: (tmp) => keepTouched(() => [tmp], every) });
  }

  async read(key: string, options: { range?: BlobRange; maxBytes?: number } = {}): Promise<Buffer | null> {
    const handle = await openIfPresent(this.path(key));
    if (!handle) return null;
    try {
      const { range, maxBytes } = options;
      let first: Buffer | null = null;
      if (!range) {
        // Most objects read whole are small (a key, a manifest, a pin): one read tells their size without a stat.
        first = Buffer.allocUnsafe(Math.min(FIRST_READ_BYTES, (maxBytes ?? Infinity) + 1));
        const { bytesRead } = await handle.read(first, 0, first.length, 0);
        // A copy of its size: callers keep some of these (a held key), and the first read's buffer is larger.
        if (bytesRead < first.length) return Buffer.from(first.subarray(0, bytesRead));
      }
      const { size } = await handle.stat();
      const offset = range?.offset ?? 0;
      const length = Math.max(0, Math.min(range?.length ?? size, size - offset));
      if (maxBytes !== undefined && length > maxBytes) {
        throw new Error(`object ${key} is ${length} bytes, more than the ${maxBytes} it can be`);
      }
      const bytes = Buffer.allocUnsafe(length);
      let at = first ? first.copy(bytes, 0, 0, Math.min(first.length, length)) : 0;
      while (at < length) {
        const { bytesRead } = await handle.read(bytes, at, length - at, offset + at);
        if (bytesRead === 0) break;
        at += bytesRead;
      }
      return bytes.subarray(0, at);
    } finally {
      await handle.close();
    }
  }

  async stream(key: string, options: { range?: BlobRange } = {}): Promise<Readable | null> {
    const handle = await openIfPresent(this.path(key));
    if (!handle) return null;
    const { range } = options;
    if (range?.length === 0) {
      await handle.close();
      return Readable.from([]);
    }
    return createReadStream('', {
      fd: handle,
      // Reads of a MiB, as `read` makes them: a restore streams its packs, and 64 KiB reads slowed it (bench/README.md, S3).
      highWaterMark: STREAM_READ_BYTES,
      ...(range ? { start: range.offset, end: range.offset + range.length - 1 } : {}),
    });
  }

  async openRanges(key: string): Promise<BlobRangeReader | null> {
    const handle = await openIfPresent(this.path(key));
    if (!handle) return null;
    return {
      readInto: async (into, at, length, offset) => {
        let filled = 0;
        while (filled < length) {
          const { bytesRead } = await handle.read(into, at + filled, length - filled, offset + filled);
          if (bytesRead === 0) break;
          filled += bytesRead;
        }
        return filled;
      },
      close: () => handle.close(),
    };
  }

  async stat(key: string): Promise<BlobInfo | null> {
    try {
      const stats = await fs.stat(this.path(key));
      return stats.isFile() ? { key, size: stats.size, modifiedAt: stats.mtime } : null;
    } catch (err) {
      if (absent(err)) return null;
      throw err;
    }
  }

  async *list(prefix: string): AsyncIterable<BlobInfo> {
    const keys = await this.sortedKeys(prefix);
    // Stats side by side, a batch at a time: one by one they were most of a 1,000-entry timeline page.
    for (let at = 0; at < keys.length; at += LIST_STATS_AT_ONCE) {
      const infos = await Promise.all(keys.slice(at, at + LIST_STATS_AT_ONCE).map((key) => this.stat(key)));
      for (const info of infos) if (info) yield info; // null: deleted since the walk
    }
  }

  async *listKeys(prefix: string): AsyncIterable<string> {
    yield* await this.sortedKeys(prefix);
  }

  private async sortedKeys(prefix: string): Promise<string[]> {
    checkBlobPrefix(prefix);
    const slash = prefix.lastIndexOf('/');
    const base = slash < 0 ? '' : prefix.slice(0, slash + 1);
    const keys: string[] = [];
    await this.collect(base, prefix, keys);
    // A key's order is its bytes' order, as S3 lists them (not the order a directory walk meets them).
    return keys.sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
  }

  /** The keys under directory `dir` (a key prefix ending in `/`, or '') that start with `prefix`. */
  private async collect(dir: string, prefix: string, into: string[]): Promise<void> {
    let entries;
    try {
      entries = await fs.readdir(join(this.root, dir), { withFileTypes: true });
    } catch (err) {
      if (absent(err)) return;
      throw err;
    }
    for (const entry of entries) {
      if (entry.name.startsWith('.')) continue; // temp files, and names no key can have
      const key = `${dir}${entry.name}`;
      if (entry.isDirectory()) {
        const sub = `${key}/`;
        if (sub.startsWith(prefix) || prefix.startsWith(sub)) await this.collect(sub, prefix, into);
      } else if (entry.isFile() && key.startsWith(prefix)) {
        into.push(key);
      }
    }
  }

  async delete(key: string): Promise<void> {
    await unlinkIfPresent(this.path(key));
  }

  /** The file system stamps mtimes with this host's clock. */
  async now(): Promise<Date> {
    return new Date();
  }

  async close(): Promise<void> {}
}

async function openIfPresent(path: string): Promise<fs.FileHandle | null> {
  try {
    return await fs.open(path, 'r');
  } catch (err) {
    if (absent(err)) return null;
    throw err;
  }
}

function absent(err: unknown): boolean {
  return isErrnoError(err, 'ENOENT') || isErrnoError(err, 'ENOTDIR');
}
