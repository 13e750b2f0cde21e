import { isUnchangedRange, readExactly, type UnchangedRange } from '../state-source';
import type { Chunker } from './chunker';

/** One chunk of the new state: the base's chunk number `reuse`, or new bytes to store. */
export type PlannedChunk = { reuse: number } | { chunk: Buffer };

/** The base checkpoint's chunking: the plaintext size of each chunk, in order. */
export interface BaseChunks {
  readonly sizes: readonly number[];
}

/**
 * Chunks a state told as bytes and unchanged runs (see StateSource), reusing the base's chunks over the runs without
 * reading them. The result is the chunking {@link Chunker.chunks} gives the same bytes read in full, when the base was
 * chunked with the same options: a chunk boundary depends only on the bytes from the previous boundary up to one
 * byte past it, so from a boundary inside an unchanged run the base's boundaries repeat for as long as the run lasts.
 *
 * Concretely, at a boundary `pos` of the new state that falls on a base boundary inside a run, the base's next chunk
 * `[s, e)` is taken as it is if the run also holds bytes `e` and `e + 1` (or the run, the base and the new state all
 * end at `e`). Anywhere else the bytes are chunked: new bytes as given, run bytes read through `read` a little at a
 * time, until a boundary lands on a base boundary again. So a run costs reads only around its edges: the part of
 * a base chunk it starts in, and about a chunk before its end.
 *
 * If the base was chunked with other options the result is still the same bytes, only cut differently.
 *
 * @throws TypeError for a run outside the base state (nothing has been yielded for it).
 */
export async function* planChunks(
  pieces: AsyncIterable<Uint8Array | UnchangedRange>,
  base: BaseChunks,
  chunker: Chunker,
): AsyncGenerator<PlannedChunk> {
  // How much of a range is read at a time when its bytes must be chunked: half a chunk, so that little is read past
  // the boundary where the chunking is back in step with the base.
  const readStep = Math.max(chunker.options.minSize, chunker.options.avgSize / 2);
  const count = base.sizes.length;
  // starts[k]: offset of base chunk k in the base state; starts[count] is the base's size.
  const starts = new Float64Array(count + 1);
  for (let k = 0; k < count; k++) starts[k + 1] = starts[k]! + base.sizes[k]!;
  const baseSize = starts[count]!;
  /** The base chunk that starts exactly at `offset`, or -1. */
  const chunkAt = (offset: number): number => {
    let lo = 0;
    let hi = count - 1;
    while (lo <= hi) {
      const mid = (lo + hi) >>> 1;
      const s = starts[mid]!;
      if (s === offset) return mid;
      if (s < offset) lo = mid + 1;
      else hi = mid - 1;
    }
    return -1;
  };

  const input = pieces[Symbol.asyncIterator]();
  // The piece after `current`, asked for only once `current` is used up or the state's end must be known: a source
  // may hold its state still until its last piece has been asked for (a workspace thaws its process then), and the
  // runs before must have been read by then.
  let following: IteratorResult<Uint8Array | UnchangedRange> | undefined;
  const peek = async (): Promise<IteratorResult<Uint8Array | UnchangedRange>> => (following ??= await input.next());
  let current: Uint8Array | UnchangedRange | undefined;
  let currentAt = 0; // bytes of `current` consumed (chunked, reused or held)
  let currentStart = 0; // offset of `current` in the new state
  let streamAt = 0; // offset of the first byte handed to the chunker or reused
  let pos = 0; // the last boundary: chunks up to it have been yielded

  const advance = async (): Promise<void> => {
    for (;;) {
      const next = await peek();
      if (next.done) {
        current = undefined;
        return;
      }
      following = undefined;
      const piece = next.value;
      if (isUnchangedRange(piece)) checkRange(piece, baseSize);
      if (piece.length === 0) continue;
      current = piece;
      currentAt = 0;
      currentStart = streamAt;
      return;
    }
  };
  /** Whether base chunk `k`, met at a boundary inside `range`, can be taken as it is (see above). */
  const reusable = async (k: number, range: UnchangedRange): Promise<boolean> => {
    const end = starts[k + 1]!;
    const rangeEnd = range.baseOffset + range.length;
    return end + 2 <= rangeEnd || (end === baseSize && rangeEnd === baseSize && (await peek()).done === true);
  };
  /** The base chunk that can be taken at `pos`, if `pos` lies in the current range on a base boundary; else -1. */
  const reusableAt = async (): Promise<number> => {
    if (current === undefined || !isUnchangedRange(current) || pos < currentStart) return -1;
    const k = chunkAt(current.baseOffset + (pos - currentStart));
    return k >= 0 && (await reusable(k, current)) ? k : -1;
  };
  /** The bytes from `streamAt` on, as the chunker pulls them: pieces as given, ranges read a step at a time. */
  async function* bytesFrom(): AsyncGenerator<Buffer> {
    while (current !== undefined) {
      if (!isUnchangedRange(current)) {
        const piece = asBuffer(current).subarray(currentAt);
        currentAt = current.length;
        streamAt += piece.length;
        yield piece;
      } else {
        const until = Math.min(current.length, currentAt + readStep);
        for await (const part of readExactly(current, currentAt, until)) {
          streamAt += part.length;
          yield asBuffer(part);
        }
        currentAt = until;
      }
      if (currentAt === current.length) await advance();
    }
  }

  try {
    await advance();
    while (current !== undefined) {
      // On a boundary in step with the base: take its chunks while they lie inside the range.
      for (let k = await reusableAt(); k >= 0 && k < count && (await reusable(k, current as UnchangedRange)); k++) {
        yield { reuse: k };
        const size = base.sizes[k]!;
        currentAt += size;
        pos += size;
        streamAt += size;
      }
      if (current !== undefined && currentAt === current.length) {
        await advance();
        continue;
      }
      // Otherwise chunk the bytes from `pos` (the streaming chunker scans each byte once), until a boundary is in
      // step with the base again; what the chunker read past that boundary is dropped.
      const chunks = chunker.chunks(bytesFrom());
      try {
        for await (const chunk of chunks) {
          yield { chunk };
          pos += chunk.length;
          if ((await reusableAt()) >= 0) break;
        }
      } finally {
        await chunks.return(undefined);
      }
      if (current !== undefined) {
        currentAt = pos - currentStart;
        streamAt = pos;
      }
    }
  } finally {
    await input.return?.();
  }
}

function checkRange(range: UnchangedRange, baseSize: number): void {
  const { baseOffset, length } = range;
  if (
    !Number.isSafeInteger(baseOffset) ||
    !Number.isSafeInteger(length) ||
    baseOffset < 0 ||
    length < 0 ||
    baseOffset + length > baseSize
  ) {
    throw new TypeError(
      `unchanged range [${baseOffset}, ${baseOffset}+${length}) is not inside the base state of ${baseSize} bytes`,
    );
  }
}

function asBuffer(piece: Uint8Array): Buffer {
  return Buffer.isBuffer(piece) ? piece : Buffer.from(piece.buffer, piece.byteOffset, piece.byteLength);
}
