/*
 * What capture and restore agree on: the index of a stored capture (or of a restored checkpoint) that the next
 * capture names unchanged records against, and the rules both judge a tree by. One definition of each, so that a
 * restored tree is indexed exactly as a capture of it would be.
 */

import { randomUUID } from 'node:crypto';
import * as fs from 'node:fs';
import type { BigIntStats } from 'node:fs';
import * as fsp from 'node:fs/promises';
import * as path from 'node:path';
import type { TarEntry } from '../tar';

/**
 * One record of a stored capture (or of a restored checkpoint): where it lies in that stream, and what a record of a
 * later capture must match to be the same bytes.
 */
export interface IndexedRecord {
  readonly offset: number;
  /** Headers, content and padding. */
  readonly length: number;
  /** sha256 of the header bytes (pax and ustar): name, type, mode, mtime, size, link target. */
  readonly headerDigest: string;
  /** Regular files: their {@link statKey} when the content was read (or written, by restore). */
  readonly statKey?: string;
}

/** The layout of a capture by path ({@link END_OF_ARCHIVE} for the trailer), and the checkpoint it was stored as. */
export interface CommittedIndex {
  readonly checkpointId: string;
  readonly records: ReadonlyMap<string, IndexedRecord>;
}

/** The index key of the archive's trailer: no entry has an empty path. */
export const END_OF_ARCHIVE = '';

/**
 * Whether a symlink at `linkPath` (relative to the workspace) pointing at `target` resolves inside the
 * workspace, judged lexically. Capture and restore apply the same rule, so every capture can be restored.
 */
export function symlinkStaysInside(linkPath: string, target: string): boolean {
  if (path.posix.isAbsolute(target)) return false;
  const resolved = path.posix.normalize(path.posix.join(path.posix.dirname(linkPath), target));
  return resolved !== '..' && !resolved.startsWith('../');
}

/**
 * Whether a file changed at `ctimeNs` may be named unchanged later: only if the change came before the fs-clock
 * reading taken after the capture (a write in the same clock tick would leave the stat key as it was). Capture and
 * restore index files by this one rule.
 */
export function beforeClock(ctimeNs: bigint, clockNs: bigint | null): boolean {
  return clockNs !== null && ctimeNs < clockNs;
}

/**
 * The entry a capture writes for the path `name` with these stats (and, for a symlink, its target), or undefined for
 * a path a capture leaves out. Restore judges its index by the same function, so the two cannot drift apart.
 */
export function tarEntryOf(name: string, stats: BigIntStats, linkname: string | undefined): TarEntry | undefined {
  const common = { name, mode: Number(stats.mode & 0o7777n), mtime: floorSeconds(stats.mtimeNs) };
  if (stats.isDirectory()) return { ...common, type: 'directory', size: 0 };
  if (stats.isFile()) return { ...common, type: 'file', size: Number(stats.size) };
  if (stats.isSymbolicLink() && linkname !== undefined) return { ...common, type: 'symlink', size: 0, linkname };
  return undefined;
}

/** Seconds since the epoch, rounded down: what tar-stream wrote for a Date (`Math.floor(ms / 1000)`). */
function floorSeconds(ns: bigint): number {
  const seconds = ns / 1_000_000_000n; // rounds towards zero
  return Number(ns < 0n && seconds * 1_000_000_000n !== ns ? seconds - 1n : seconds);
}

/**
 * What says a file's content is as it was: any write changes its size, mtime or ctime, and a file put in its place
 * has another inode. ctime catches a rewrite whose mtime was set back.
 */
export function statKey(stats: BigIntStats): string {
  return `${stats.size}:${stats.mtimeNs}:${stats.ctimeNs}:${stats.ino}:${stats.dev}`;
}

/**
 * The file system's current time as it stamps changes: the ctime of a file created in `dir` (beside the
 * workspace, on the same file system, so a server's clock is the one read), or null if none can be created.
 * Creating files there is harmless: names starting with '.' are never instance ids.
 */
export async function fileSystemNow(dir: string): Promise<bigint | null> {
  const file = path.join(dir, `.clock-${randomUUID()}`);
  try {
    const handle = await fsp.open(file, 'wx');
    try {
      return (await handle.stat({ bigint: true })).ctimeNs;
    } finally {
      await handle.close();
      await fsp.rm(file, { force: true });
    }
  } catch {
    return null;
  }
}

/** `fileSystemNow` with synchronous calls: read while a group is frozen (see capture.ts, readContentSync). */
export function fileSystemNowSync(dir: string): bigint | null {
  const file = path.join(dir, `.clock-${randomUUID()}`);
  try {
    const fd = fs.openSync(file, 'wx');
    try {
      return fs.fstatSync(fd, { bigint: true }).ctimeNs;
    } finally {
      fs.closeSync(fd);
      fs.rmSync(file, { force: true });
    }
  } catch {
    return null;
  }
}
