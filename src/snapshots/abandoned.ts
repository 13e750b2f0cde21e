/**
 * What a writer that died mid-write (kill -9, an OOM kill, a lost host) leaves in a store: temp files — a pack being
 * written, a format-1 data file, a manifest, key, claim or lineage pointer being published — and, in the chunked
 * store, its pin (engine/pins.ts). Nothing reads them, nothing else removes them, and a pin keeps gc from freeing
 * packs.
 *
 * They are told from a live writer's by age: a live writer touches its pin and the temp files it streams into every
 * TOUCH_INTERVAL_MS (`keepTouched`), so a file untouched for ABANDONED_AFTER_MS belongs to no running writer — on this
 * host or on any other sharing the store.
 */
import * as fs from 'node:fs/promises';
import { join } from 'node:path';
import { SessionId } from '../domain/schemas';
import { isErrnoError } from '../errors';

/** How long a temp file or pin must go untouched before it counts as abandoned. */
export const ABANDONED_AFTER_MS = 60 * 60_000;
/** How often a live writer touches its pin and temp files: many times within ABANDONED_AFTER_MS. */
export const TOUCH_INTERVAL_MS = 5 * 60_000;

export interface CleanAbandonedOptions {
  /** Age, by mtime, past which a temp file or pin is removed; ABANDONED_AFTER_MS by default. */
  olderThanMs?: number;
  /** The time ages are measured from (milliseconds since the epoch); now by default. */
  now?: number;
  /** Count what would be removed, and remove nothing. */
  dryRun?: boolean;
}

/** What a cleaning removed (or, in a dry run, would remove). */
export interface AbandonedReport {
  /** Temp files, and on an object store the multipart uploads of writes cut short. */
  tempFiles: number;
  pins: number;
  bytes: number;
}

/**
 * Temp names the stores make, and nothing else: `.<random>.tmp` (fs-io.ts `publish`), `.<packId>.tmp` (packs.ts) and
 * `.<name>.tmp-<16 hex>` (the format-1 store). A manifest, a pack in place, a key or a claim never matches.
 */
const TEMP_NAME = /^\..+\.tmp(-[0-9a-f]{16})?$/;

export function isTempName(name: string): boolean {
  return TEMP_NAME.test(name);
}

/**
 * The mtime before which a file is abandoned (`before`), and the time it is measured from, for options given by a
 * caller (checked: a typo must not wipe a store).
 */
export function abandonedAge(options: CleanAbandonedOptions): { before: number; now: number } {
  const olderThanMs = options.olderThanMs ?? ABANDONED_AFTER_MS;
  const now = options.now ?? Date.now();
  if (!Number.isFinite(olderThanMs) || olderThanMs < 0 || !Number.isFinite(now)) {
    throw new TypeError(`olderThanMs must be a non-negative number of milliseconds and now a time, not ${olderThanMs}`);
  }
  return { before: now - olderThanMs, now };
}

/**
 * Touches `paths()` every `intervalMs` until the returned function is called, so that a write that stalls (a slow
 * source, a long fsync) is not taken for an abandoned one. A path that is gone (renamed, removed) is skipped.
 */
export function keepTouched(paths: () => Iterable<string>, intervalMs: number = TOUCH_INTERVAL_MS): () => void {
  const timer = setInterval(() => {
    const now = new Date();
    for (const path of paths()) void fs.utimes(path, now, now).catch(() => undefined);
  }, intervalMs);
  // A write in progress keeps the process alive by itself; the timer must not keep it alive once the write is done.
  timer.unref();
  return () => clearInterval(timer);
}

/** The session directories of a store: the names a session id can have (anything else is not the store's). */
export async function sessionDirs(root: string): Promise<string[]> {
  const entries = await fs.readdir(root, { withFileTypes: true }).catch(() => []);
  return entries.filter((d) => d.isDirectory() && SessionId.safeParse(d.name).success).map((d) => d.name);
}

/**
 * Removes the temp files (isTempName) of every session directory of `root`, and of its folders `subdirs`, whose mtime
 * is before `before`. Returns how many and their bytes. A subdir `x/*` stands for every folder in `x` (a timeline's
 * entries are in a folder per segment).
 */
export async function removeAbandonedTemps(
  root: string,
  before: number,
  { subdirs, dryRun = false }: { subdirs: readonly string[]; dryRun?: boolean },
): Promise<{ files: number; bytes: number }> {
  const found = { files: 0, bytes: 0 };
  for (const session of await sessionDirs(root)) {
    const dirs = [join(root, session)];
    for (const sub of subdirs) {
      if (!sub.endsWith('/*')) {
        dirs.push(join(root, session, sub));
        continue;
      }
      const parent = join(root, session, sub.slice(0, -2));
      const children = await fs.readdir(parent, { withFileTypes: true }).catch(() => []);
      for (const child of children) if (child.isDirectory()) dirs.push(join(parent, child.name));
    }
    for (const dir of dirs) {
      const names = await fs.readdir(dir).catch(() => [] as string[]);
      for (const name of names) {
        if (!isTempName(name)) continue;
        const bytes = await removeIfBefore(join(dir, name), before, dryRun);
        if (bytes === null) continue;
        found.files++;
        found.bytes += bytes;
      }
    }
  }
  return found;
}

/**
 * Removes the regular file at `path` if its mtime is before `before`; returns its size, or null if it was kept (or is
 * gone, or is not a regular file).
 */
export async function removeIfBefore(path: string, before: number, dryRun: boolean): Promise<number | null> {
  const st = await fs.lstat(path).catch(() => null);
  if (!st?.isFile() || st.mtimeMs >= before) return null;
  if (dryRun) return st.size;
  try {
    await fs.rm(path);
  } catch (err) {
    // Removed meanwhile (a second cleaner, or the writer's own cleanup): not ours to count.
    if (isErrnoError(err, 'ENOENT')) return null;
    throw err;
  }
  return st.size;
}
