import { randomUUID } from 'node:crypto';
import { linkSync, mkdirSync, readFileSync, renameSync, unlinkSync, writeFileSync } from 'node:fs';
import * as path from 'node:path';
import { z } from 'zod';
import { strictObject } from '../../domain/strict';
import { DurableSessionsError, isErrnoError } from '../../errors';
import { identityOf, isRunning } from './process-table';

/**
 * Thrown when a workspace runtime is made on a state directory whose lock a live runtime holds: two runtimes on one
 * root would kill each other's processes and remove each other's workspaces as left behind.
 */
export class WorkspaceRootLockedError extends DurableSessionsError {
  readonly code = 'WorkspaceRootLocked';
  constructor(
    readonly lockPath: string,
    /** The process holding the lock. */
    readonly pid: number,
  ) {
    const holder = pid === process.pid ? `this process (${pid})` : `process ${pid}`;
    super(`${lockPath} is held by ${holder}: another workspace runtime uses this root, and two must not share one`);
  }
}

const LockRecord = strictObject({
  pid: z.number().int().positive(),
  startTime: z.number().int().nonnegative().nullable(),
  bootId: z.string().nullable(),
  rootDir: z.string(),
});

/**
 * Takes `<stateDir>/lock` for this process, or throws {@link WorkspaceRootLockedError} when a live process holds it.
 * The lock is never released: one whose process is gone (or is another process now, by start time) is taken over.
 */
export function lockStateDir(stateDir: string, rootDir: string): void {
  mkdirSync(stateDir, { recursive: true, mode: 0o700 });
  const lockPath = path.join(stateDir, 'lock');
  const content = JSON.stringify({ ...identityOf(process.pid), rootDir });
  for (let attempt = 1; ; attempt++) {
    // Linked into place whole: no one ever reads a lock half written, and of two at once exactly one link succeeds.
    const temp = `${lockPath}.${randomUUID()}`;
    writeFileSync(temp, content, { mode: 0o600, flag: 'wx' });
    try {
      linkSync(temp, lockPath);
      return;
    } catch (error) {
      if (!isErrnoError(error, 'EEXIST') || attempt >= 3) throw error;
    } finally {
      unlinkSync(temp);
    }
    const held = readIfExists(lockPath);
    if (held === undefined) continue;
    const holder = parseLock(held);
    if (holder && isRunning(holder)) throw new WorkspaceRootLockedError(lockPath, holder.pid);
    takeOver(lockPath, held);
  }
}

/**
 * Removes a stale lock whose text is `stale`. Moved aside and checked, not unlinked: another runtime may have taken
 * the same stale lock over in between, and its fresh lock, moved aside by mistake, is put back.
 */
function takeOver(lockPath: string, stale: string): void {
  const aside = `${lockPath}.stale-${randomUUID()}`;
  try {
    renameSync(lockPath, aside);
  } catch (error) {
    if (isErrnoError(error, 'ENOENT')) return;
    throw error;
  }
  try {
    if (readFileSync(aside, 'utf8') !== stale) linkSync(aside, lockPath);
  } catch (error) {
    if (!isErrnoError(error, 'EEXIST')) throw error;
  } finally {
    unlinkSync(aside);
  }
}

function parseLock(text: string): z.infer<typeof LockRecord> | undefined {
  try {
    const parsed = LockRecord.safeParse(JSON.parse(text));
    return parsed.success ? parsed.data : undefined;
  } catch {
    return undefined; // not JSON: no process can be holding it
  }
}

function readIfExists(file: string): string | undefined {
  try {
    return readFileSync(file, 'utf8');
  } catch (error) {
    if (isErrnoError(error, 'ENOENT')) return undefined;
    throw error;
  }
}
