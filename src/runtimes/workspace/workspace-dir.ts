import * as fsp from 'node:fs/promises';
import * as path from 'node:path';
import { isErrnoError } from '../../errors';
import { RuntimeFailedError } from '../session-runtime';
import type { UserIdentity } from './user';

/*
 * The instance directories on disk: `<root>/<session key>/<instance>`, its log beside it as `<instance>.log`. Making
 * them, seeding them, handing them to the workspace user, and removing them again.
 */

/** A name of the id alphabet, or a session key (`<session>@<tenant>` for a session of another tenant than `default`). */
const SAFE_ID = /^[A-Za-z0-9][A-Za-z0-9._-]*(@[A-Za-z0-9][A-Za-z0-9_-]*)?$/;
/** lstat calls the walk keeps in flight in each directory. */
export const STATS_AHEAD = 32;

/** Whether `id` may name a directory under the root: what every session and instance id must be. */
export function isSafeId(id: string): boolean {
  return SAFE_ID.test(id) && !id.includes('..');
}

export function assertSafeId(what: string, id: string): void {
  if (!isSafeId(id)) throw new RuntimeFailedError(`${what} ${JSON.stringify(id)} is not path-safe`);
}

/**
 * Makes the instance's fresh, empty directory `dir` in `sessionDir` under `rootDir`, the session directory first if
 * need be; an instance directory already there is a RuntimeFailedError.
 */
export async function makeWorkspaceDir(
  rootDir: string,
  sessionDir: string,
  dir: string,
  user: UserIdentity | undefined,
): Promise<{ dir: string; logPath: string; user: UserIdentity | undefined }> {
  await fsp.mkdir(rootDir, { recursive: true });
  // A concurrent dispose or failed start of the same session may remove its directory once empty: then again.
  for (let attempt = 1; ; attempt++) {
    await fsp.mkdir(sessionDir).catch((error: unknown) => {
      if (!isErrnoError(error, 'EEXIST')) throw error;
    });
    // The worker's, and no one else's to read: with a user, searchable (its workspace lies below) but not
    // listable, so a command cannot find the session's other instances or its logs.
    await fsp.chmod(sessionDir, user ? 0o711 : 0o700).catch(retryOnMissing(attempt));
    try {
      await fsp.mkdir(dir, { mode: 0o700 });
      break;
    } catch (error) {
      if (isErrnoError(error, 'EEXIST')) {
        throw new RuntimeFailedError(`workspace ${dir} already exists`, { cause: error });
      }
      retryOnMissing(attempt)(error);
    }
  }
  return { dir, logPath: `${dir}.log`, user };
}

/** A catch for a step of `makeWorkspaceDir`: the session directory vanished under it, try again (a few times). */
function retryOnMissing(attempt: number): (error: unknown) => void {
  return (error) => {
    if (!isErrnoError(error, 'ENOENT') || attempt >= 5) throw error;
  };
}

/**
 * Gives the workspace and the paths below it (relative, '/'-separated) to `user`. Symlinks themselves, not their
 * targets: a link a restore made points inside the workspace, but its owner is still the link's own.
 */
export async function handOver(dir: string, paths: readonly string[], user: UserIdentity): Promise<void> {
  await fsp.chown(dir, user.uid, user.gid);
  let next = 0;
  const worker = async (): Promise<void> => {
    for (let i = next++; i < paths.length; i = next++) {
      if (paths[i] === '') continue;
      await fsp.lchown(path.join(dir, ...paths[i]!.split('/')), user.uid, user.gid);
    }
  };
  await Promise.all(Array.from({ length: Math.min(STATS_AHEAD, paths.length) }, worker));
}

/** Writes the seed files and returns every path made, directories included, as `handOver` takes them. */
export async function writeSeedFiles(dir: string, files: Record<string, string>): Promise<string[]> {
  const made = new Set<string>();
  for (const [name, content] of Object.entries(files)) {
    const segments = name.split('/');
    if (name.startsWith('/') || segments.some((s) => s === '' || s === '..')) {
      throw new RuntimeFailedError(
        `seed file path ${JSON.stringify(name)} must be relative, without ".." or empty segments`,
      );
    }
    const file = path.join(dir, ...segments);
    await fsp.mkdir(path.dirname(file), { recursive: true });
    await fsp.writeFile(file, content);
    for (let i = 1; i <= segments.length; i++) made.add(segments.slice(0, i).join('/'));
  }
  return [...made];
}

/**
 * Removes what a failed start or restore created. A failure to remove must not replace the error the caller
 * needs to see (a restore rejects with the state stream's own error): the directory is then left behind, and
 * a retry with the same instance id fails with RuntimeFailedError rather than reusing it.
 */
export async function discardWorkspace(dir: string, logPath: string): Promise<void> {
  await removeWorkspace(dir, logPath).catch(() => {});
  await removeIfEmpty(path.dirname(dir));
}

/** Removes the session directory once its last instance is gone; one still in use stays. */
export async function removeIfEmpty(dir: string): Promise<void> {
  await fsp.rmdir(dir).catch(() => {});
}

export async function anyExists(...files: string[]): Promise<boolean> {
  const found = await Promise.all(
    files.map((file) =>
      fsp.lstat(file).then(
        () => true,
        () => false,
      ),
    ),
  );
  return found.includes(true);
}

/** Beside `<session>/<instance>` and its log: the instance's command failed, and what it left is kept until then. */
export const FAILED_SUFFIX = '.failed';

export async function removeWorkspace(dir: string, logPath: string): Promise<void> {
  await removeTree(dir);
  await fsp.rm(logPath, { force: true });
  await fsp.rm(`${dir}${FAILED_SUFFIX}`, { force: true });
}

export async function removeTree(dir: string): Promise<void> {
  try {
    await fsp.rm(dir, { recursive: true, force: true });
  } catch (error) {
    // Directories the command (or the archive) made read-only cannot be emptied until made writable again.
    if (!isErrnoError(error, 'EACCES', 'EPERM')) throw error;
    await makeDirectoriesWritable(dir);
    await fsp.rm(dir, { recursive: true, force: true });
  }
}

/** The size of the regular files under `dir`, as far as they can be read: what removing it frees, about. */
export async function treeBytes(dir: string): Promise<number> {
  const entries = await fsp.readdir(dir, { recursive: true, withFileTypes: true }).catch(() => []);
  const files = entries.filter((entry) => entry.isFile()).map((entry) => path.join(entry.parentPath, entry.name));
  let bytes = 0;
  let next = 0;
  const worker = async (): Promise<void> => {
    for (let i = next++; i < files.length; i = next++) {
      bytes += await fsp.lstat(files[i]!).then(
        (stats) => stats.size,
        () => 0,
      );
    }
  };
  await Promise.all(Array.from({ length: Math.min(STATS_AHEAD, files.length) }, worker));
  return bytes;
}

async function makeDirectoriesWritable(dir: string): Promise<void> {
  await fsp.chmod(dir, 0o700);
  for (const entry of await fsp.readdir(dir, { withFileTypes: true })) {
    if (entry.isDirectory()) await makeDirectoriesWritable(path.join(dir, entry.name));
  }
}
