import { isUnchangedRange, type UnchangedRange } from '../state-source';
import type { Chunker } from './chunker';

/** One chunk of the new state: the base's chunk number `reuse`, or new bytes to store. */
export type PlannedChunk = { reuse: number } | { chunk: Buffer };

/** The base checkpoint's chunking: the plaintext size of each chunk, in order. */
export interface BaseChunks {
  readonly sizes: readonly number[];
}

const EMPTY = Buffer.alloc(0);

/**
 * Chunks a state told as bytes and unchanged runs (see StateSource), reusing the base's chunks over the runs without
 * reading them. The result is the chunking {@link Chunker.chunks} gives the same bytes read in full, when the base was
 * chunked with the same options: a chunk boundary depends only on the bytes from the previous boundary up to one
 * byte past it, so from a boundary inside an unchanged run the base's boundaries repeat for as long as the run lasts.
 *
 * Concretely, at a boundary `pos` of the new state that falls on a base boundary inside a run, the base's next chunk
 * `[s, e)` is taken as it is if the run also holds bytes `e` and `e + 1` (or the run, the base and the new state all
 * end at `e`). Anywhere else the bytes are chunked: new bytes as given, run bytes read through `read`, a chunk's worth
 * at a time, until a boundary lands on a base boundary again. So a run costs reads only around its edges: the part of
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
  const { maxSize, avgSize } = chunker.options;
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
  let lookahead = await input.next();
  let current: Uint8Array | UnchangedRange | undefined;
  let currentAt = 0; // bytes of `current` consumed (chunked, reused or held)
  let currentStart = 0; // offset of `current` in the new state
  let streamAt = 0; // offset of the first byte not yet consumed
  // Bytes from `pos` (the last boundary) on, read but not yet chunked: pending[pendingStart..].
  let pending: Buffer = EMPTY;
  let pendingStart = 0;
  let pos = 0;

  const advance = async (): Promise<void> => {
    for (;;) {
      if (lookahead.done) {
        current = undefined;
        return;
      }
      const piece = lookahead.value;
      lookahead = await input.next();
      if (isUnchangedRange(piece)) checkRange(piece, baseSize);
      if (piece.length === 0) continue;
      current = piece;
      currentAt = 0;
      currentStart = streamAt;
      return;
    }
  };
  const append = (parts: Buffer[]): void => {
    const held = pending.length - pendingStart;
    pending = held === 0 && parts.length === 1 ? parts[0]! : Buffer.concat([pending.subarray(pendingStart), ...parts]);
    pendingStart = 0;
    for (const p of parts) streamAt += p.length;
  };
  /** Whether base chunk `k`, met at a boundary inside `range`, can be taken as it is (see above). */
  const reusable = (k: number, range: UnchangedRange): boolean => {
    const end = starts[k + 1]!;
    const rangeEnd = range.baseOffset + range.length;
    return end + 2 <= rangeEnd || (end === baseSize && rangeEnd === baseSize && lookahead.done === true);
  };

  try {
    await advance();
    for (;;) {
      if (pending.length === pendingStart && current !== undefined && isUnchangedRange(current)) {
        const range = current;
        for (let k = chunkAt(range.baseOffset + currentAt); k >= 0 && k < count && reusable(k, range); k++) {
          yield { reuse: k };
          const size = base.sizes[k]!;
          currentAt += size;
          pos += size;
          streamAt += size;
        }
        if (currentAt === range.length) {
          await advance();
          continue;
        }
      }
      // Chunk from `pos`: gather bytes until the cut is final (see Chunker.cutAt).
      let cut = -1;
      for (;;) {
        const end = pending.length;
        if (end > pendingStart) {
          cut = chunker.cutAt(pending, pendingStart, end);
          if (current === undefined || cut < end || end - pendingStart >= maxSize) break;
        }
        if (current === undefined) break;
        if (!isUnchangedRange(current)) {
          const bytes = current;
          append([asBuffer(bytes).subarray(currentAt)]);
          currentAt = bytes.length;
        } else {
          const until = Math.min(current.length, currentAt + avgSize);
          const parts: Buffer[] = [];
          let got = 0;
          for await (const part of current.read(currentAt, until)) {
            parts.push(asBuffer(part));
            got += part.length;
          }
          if (got !== until - currentAt) {
            throw new Error(`an unchanged range read ${got} bytes where ${until - currentAt} were asked for`);
          }
          append(parts);
          currentAt = until;
        }
        if (currentAt === current.length) await advance();
      }
      if (cut < 0) return; // no bytes left
      yield { chunk: pending.subarray(pendingStart, cut) };
      pos += cut - pendingStart;
      pendingStart = cut;
      // Back in step with the base? Then what was read past `pos` is dropped and the base's chunks take over.
      if (current !== undefined && isUnchangedRange(current) && pos >= currentStart) {
        const k = chunkAt(current.baseOffset + (pos - currentStart));
        if (k >= 0 && reusable(k, current)) {
          currentAt = pos - currentStart;
          streamAt = pos;
          pending = EMPTY;
          pendingStart = 0;
        }
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
