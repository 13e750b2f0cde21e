import type { SessionHandle } from '../client';
import { describeProgress } from './render';
import { printable } from './text';

/** Shows snapshot I/O progress on a terminal while a control runs; silent when stderr is not a terminal. */
export async function withProgressBar<T>(handle: SessionHandle, pending: Promise<T>): Promise<T> {
  if (!process.stderr.isTTY) return pending;
  let done = false;
  const draw = async () => {
    while (!done) {
      await new Promise((r) => setTimeout(r, 500));
      const io = await handle.progress().catch(() => []);
      const a = io[0];
      if (done || !a) continue;
      const width = 30;
      const filled = a.bytesTotal ? Math.min(width, Math.round((a.bytesDone / a.bytesTotal) * width)) : 0;
      const bar = a.bytesTotal ? `[${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ` : '';
      process.stderr.write(`\r${bar}${printable(describeProgress(a))}\x1b[K`);
    }
  };
  const drawing = draw();
  try {
    return await pending;
  } finally {
    done = true;
    await drawing;
    process.stderr.write('\r\x1b[K');
  }
}
