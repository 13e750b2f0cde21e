/**
 * The sealed bytes of a restore's chunks, read from their packs as a few long ranged reads ("windows") streamed in
 * order, rather than one read per batch: on an object store each request costs the client CPU (signing, the SDK's
 * middleware, a response to parse) that one read per MiB multiplied (bench/README.md, S3).
 *
 * A window is a run of chunks adjacent in one pack, cut at a chunk boundary once it reaches WINDOW_BYTES. Its bytes
 * stream into the batches' buffers as the batches ask for them, so a window is never held whole: what waits between
 * the store and a batch is the stream's own buffer. The next few windows are requested ahead (up to AHEAD_BYTES or
 * AHEAD_WINDOWS), so that chunks scattered over many packs (an incremental checkpoint's) are still read several at a
 * time.
 */
import type { Readable } from 'node:stream';
import type { BlobBackend } from '../blob/backend';
import type { Location } from './manifest-codec';

export const WINDOW_BYTES = 16 * 1024 * 1024;
const AHEAD_BYTES = 16 * 1024 * 1024;
const AHEAD_WINDOWS = 4;

interface Window {
  packId: string;
  offset: number;
  length: number;
  /** The chunk index one past the window's last chunk. */
  end: number;
}

interface OpenWindow {
  window: Window;
  /** Null: the pack is not there. */
  stream: Promise<Readable | null>;
}

/** Where a batch's chunks go: the buffer, and each chunk's place in it. */
export interface WindowTarget {
  into: Buffer;
  at: readonly number[];
}

export class PackWindows {
  private readonly windows: Window[] = [];
  private next = 0;
  private readonly open: OpenWindow[] = [];
  private current: { window: Window; source: AsyncIterator<Buffer>; stream: Readable } | null = null;
  private leftover: Buffer | null = null;
  private chunk = 0;
  private tail: Promise<unknown> = Promise.resolve();
  private closed = false;
  /** A failed read leaves the streams' positions unknown: every later take fails with it. */
  private failure: Error | null = null;

  constructor(
    private readonly backend: BlobBackend,
    private readonly keyOf: (packId: string) => string,
    chunks: readonly Location[],
    private readonly missing: (packId: string) => Error,
  ) {
    let window: Window | null = null;
    for (let i = 0; i < chunks.length; i++) {
      const [, , packId, offset, length] = chunks[i]!;
      if (
        window &&
        window.packId === packId &&
        window.offset + window.length === offset &&
        window.length < WINDOW_BYTES
      ) {
        window.length += length;
        window.end = i + 1;
      } else {
        window = { packId, offset, length, end: i + 1 };
        this.windows.push(window);
      }
    }
  }

  /**
   * Copies the sealed bytes of the next `lengths.length` chunks, in manifest order, to their places in `target`;
   * resolves with how many bytes of each there were (fewer than asked where a pack ends early). Calls are served in
   * the order they are made.
   */
  take(lengths: readonly number[], target: WindowTarget): Promise<number[]> {
    const done = this.tail.then(() => this.copy(lengths, target));
    this.tail = done.catch(() => undefined);
    return done;
  }

  /** Ends every read still open; safe to call twice. */
  async close(): Promise<void> {
    this.closed = true;
    this.current?.stream.destroy();
    this.current = null;
    for (const { stream } of this.open.splice(0)) {
      stream.then(
        (s) => s?.destroy(),
        () => undefined,
      );
    }
    await this.tail;
  }

  private async copy(lengths: readonly number[], { into, at }: WindowTarget): Promise<number[]> {
    if (this.failure !== null) throw this.failure;
    try {
      const got: number[] = [];
      for (let i = 0; i < lengths.length; i++, this.chunk++) {
        const window = await this.windowOf(this.chunk);
        got.push(await this.read(into, at[i]!, lengths[i]!));
        if (this.chunk + 1 === window.end) await this.finish();
      }
      return got;
    } catch (err) {
      this.failure = err instanceof Error ? err : new Error(String(err));
      throw this.failure;
    }
  }

  /** The window the chunk is in, its stream current. */
  private async windowOf(chunk: number): Promise<Window> {
    if (this.current && chunk < this.current.window.end) return this.current.window;
    if (this.closed) throw new Error('the restore was closed');
    this.requestAhead();
    const { window, stream: pending } = this.open.shift()!;
    const stream = await pending;
    if (!stream) throw this.missing(window.packId);
    this.current = { window, stream, source: stream[Symbol.asyncIterator]() as AsyncIterator<Buffer> };
    this.requestAhead();
    return window;
  }

  /** Requests the windows after the current one, up to the read-ahead bounds. */
  private requestAhead(): void {
    let ahead = this.open.reduce((n, { window }) => n + window.length, 0);
    while (
      this.next < this.windows.length &&
      (this.open.length === 0 || (this.open.length < AHEAD_WINDOWS && ahead < AHEAD_BYTES))
    ) {
      const window = this.windows[this.next++]!;
      const stream = this.backend.stream(this.keyOf(window.packId), {
        range: { offset: window.offset, length: window.length },
      });
      stream.catch(() => undefined); // awaited in order by windowOf
      this.open.push({ window, stream });
      ahead += window.length;
    }
  }

  /** Up to `length` bytes of the current window into `into` at `at`; fewer if it ends first. */
  private async read(into: Buffer, at: number, length: number): Promise<number> {
    let filled = 0;
    while (filled < length) {
      let piece = this.leftover;
      this.leftover = null;
      if (!piece) {
        const next = await this.current!.source.next();
        if (next.done) break;
        piece = next.value;
      }
      const n = Math.min(piece.length, length - filled);
      piece.copy(into, at + filled, 0, n);
      filled += n;
      if (n < piece.length) this.leftover = piece.subarray(n);
    }
    return filled;
  }

  /**
   * The current window is consumed. Its stream is read to its end rather than cut off, so that the connection under
   * it serves the next request; one that holds more than the window (never, from a backend that honours ranges) is
   * ended.
   */
  private async finish(): Promise<void> {
    const current = this.current!;
    this.current = null;
    this.leftover = null;
    const last = await current.source.next();
    if (!last.done) await current.source.return?.();
  }
}
