/** File-system helpers shared by the snapshot stores and the runtimes. */
import * as fs from 'node:fs/promises';

/** Duck-typed: errors from Node internals may come from another realm (jest, vm), so instanceof is unreliable. */
export function hasCode(error: unknown, ...codes: string[]): boolean {
  const code: unknown = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' && codes.includes(code);
}

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
