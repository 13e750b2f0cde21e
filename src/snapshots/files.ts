/** Small-file helpers of the snapshot stores: atomic publishing, bounded reads. */
import { randomBytes } from 'node:crypto';
import * as fs from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fsyncDir } from '../fs-io';

/**
 * `mkdir -p`; returns the first directory it created, if any (as fs.mkdir does). Node's recursive mkdir reports
 * ENOENT where the file system refused with EROFS or ENOSPC; the first missing directory is then made by hand, so
 * that the real reason is what the caller sees.
 */
export async function ensureDir(path: string): Promise<string | undefined> {
  try {
    return await fs.mkdir(path, { recursive: true });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
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

/** The bytes of a small file, or null if it does not exist. A file over `maxBytes` is an error, not read. */
export async function readSmall(path: string, maxBytes: number): Promise<Buffer | null> {
  try {
    const st = await fs.stat(path);
    if (st.size > maxBytes) throw new Error(`${path} is ${st.size} bytes, more than the ${maxBytes} it can be`);
    return await fs.readFile(path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw err;
  }
}

/**
 * Writes `bytes` to a temp file, fsyncs it, and renames (or, without `replace`, links) it into place, then fsyncs
 * the directory. Returns false when `replace` is false and the target exists. Whatever fails, the temp file goes:
 * a full disk must not be left fuller.
 */
export async function publish(path: string, bytes: Buffer, options: { replace?: boolean } = {}): Promise<boolean> {
  const dir = dirname(path);
  await ensureDir(dir);
  const tmp = join(dir, `.${randomBytes(8).toString('hex')}.tmp`);
  try {
    const handle = await fs.open(tmp, 'wx');
    try {
      await handle.writeFile(bytes);
      await handle.sync();
    } finally {
      await handle.close();
    }
    if (options.replace === false) {
      try {
        await fs.link(tmp, path);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'EEXIST') return false;
        throw err;
      }
    } else {
      await fs.rename(tmp, path);
    }
  } finally {
    await fs.rm(tmp, { force: true });
  }
  await fsyncDir(dir);
  return true;
}
