import { Readable } from 'node:stream';

/**
 * A run of a state stream that its runtime vouches for: the same bytes as `[baseOffset, baseOffset + length)` of
 * the state of the source's base checkpoint. The store reuses the base's chunks over such a run without reading it,
 * which is what makes a checkpoint after a small change cost about the change, not the state.
 *
 * The runtime answers for the claim (a workspace by file size, times and inode, a memory state by the writes it
 * saw); the store cannot check it without reading the bytes, which is the cost it exists to avoid.
 */
export interface UnchangedRange {
  readonly baseOffset: number;
  readonly length: number;
  /**
   * The bytes `[start, end)` of this run, read now. The store calls it for the edges it must chunk again (at most
   * a few chunks per run) and for the whole run when the base cannot be used.
   */
  read(start: number, end: number): AsyncIterable<Uint8Array>;
}

/**
 * A state stream told as bytes and unchanged runs, in order. With `base` null every piece is bytes.
 *
 * Whoever is handed a source consumes `pieces` to the end or calls `close`, which releases what the runtime holds
 * for the capture (a frozen process, say).
 */
export interface StateSource {
  /** The checkpoint of the same session that unchanged runs refer to. */
  readonly base: string | null;
  readonly pieces: AsyncIterable<Uint8Array | UnchangedRange>;
  /**
   * Optional: a draft of the state, told while it may still change (a workspace read while its process runs), so
   * that its chunks can be stored ahead. Its runs refer to `base`. When it is present, the runs of `pieces` refer to
   * the draft's bytes instead, and only if the draft was read to the end first: a consumer that stores the draft and
   * then `pieces` stores, for the state itself, about what changed between the two; one that skips the draft gets
   * the state's every byte from `pieces` (its runs read through `read`).
   */
  readonly precopy?: AsyncIterable<Uint8Array | UnchangedRange>;
  close(): void;
}

export function isUnchangedRange(piece: Uint8Array | UnchangedRange): piece is UnchangedRange {
  return !(piece instanceof Uint8Array);
}

export function isStateSource(data: Readable | StateSource): data is StateSource {
  return 'pieces' in data && 'base' in data;
}

/** Every byte of a source, unchanged runs read through their `read` (what a store without a base needs). */
export async function* sourceBytes(source: StateSource): AsyncGenerator<Uint8Array> {
  for await (const piece of source.pieces) {
    if (!isUnchangedRange(piece)) {
      yield piece;
      continue;
    }
    yield* readExactly(piece, 0, piece.length);
  }
}

/**
 * The bytes `[start, end)` of an unchanged range, read through its `read`; an Error when they come back as more or
 * fewer bytes (which would shift every byte after them), before any byte past `end` is handed on.
 */
export async function* readExactly(range: UnchangedRange, start: number, end: number): AsyncGenerator<Uint8Array> {
  let got = 0;
  for await (const part of range.read(start, end)) {
    got += part.length;
    if (got > end - start) break;
    yield part;
  }
  if (got !== end - start) {
    throw new Error(`an unchanged range read ${got} bytes where ${end - start} were asked for`);
  }
}

/** A source as a plain byte stream (closing it closes the source). */
export function sourceStream(source: StateSource): Readable {
  const stream = Readable.from(sourceBytes(source), { objectMode: false });
  stream.once('close', () => source.close());
  return stream;
}
