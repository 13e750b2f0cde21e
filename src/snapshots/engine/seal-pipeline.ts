/**
 * The write side of the chunked store: a state's chunks, new or reused from a base checkpoint, turned into the
 * checkpoint's chunk list while their sealed objects are appended to packs.
 *
 * Chunks are copied into batches of about BATCH_BYTES; each batch is id'd, compressed and sealed on a pool thread
 * while the caller goes on reading and chunking. Results are taken in order, so the chunk list is too. Batch buffers
 * are reused: a batch's input comes back with its result, and its output once it is written.
 */
import { createHash } from 'node:crypto';
import type { Readable } from 'node:stream';
import { isStateSource, sourceBytes, type StateSource } from '../state-source';
import type { ChunkPool, PoolContext } from './chunk-pool';
import { EMPTY, shared, type ChunkKey, type SealBatchResult, type SealedEntry } from './chunk-work';
import type { Chunker } from './chunker';
import { planChunks, type PlannedChunk } from './incremental';
import type { Location } from './manifest-codec';
import type { ChunkedManifest } from './manifests';
import { BATCH_BYTES, type PackWriter } from './packs';

/** Plaintext bytes of reused chunks after which a batch of them is closed (progress is reported per batch). */
const REUSED_BATCH_BYTES = 64 * 1024 * 1024;

/**
 * The first batch of a write starts this small: most checkpoints of a small session are a few KiB, and a batch
 * buffer of full size is a fresh shared allocation of over a MiB per write. A write that outgrows it goes on in
 * full-size batches.
 */
const FIRST_BATCH_BYTES = 64 * 1024;

/**
 * The batch being filled: new chunks copied into `buffer` (cut at `sizes`), and base chunks taken as they are, all
 * in order (`order`: a new chunk's index in `sizes`, or a reused entry). Reused chunks do not cut batches, so a state
 * with many small changes still seals about BATCH_BYTES at a time.
 */
interface Batch {
  buffer: Buffer | null;
  /** Bytes of `buffer` filled. */
  used: number;
  sizes: number[];
  order: (number | SealedEntry)[];
  /** Plaintext bytes of the reused chunks in `order`. */
  covered: number;
}

const emptyBatch = (): Batch => ({ buffer: null, used: 0, sizes: [], order: [], covered: 0 });

export interface SealPipelineParts {
  pool: ChunkPool;
  /** The write's context, registered with the pool (its known ids are `known`'s). */
  context: PoolContext;
  packs: PackWriter;
  /** Every chunk the checkpoint may reference without sealing it (the parent's and the base's); grows as it seals. */
  known: Map<string, Location>;
  /** The base checkpoint's chunks that `{ reuse }` refers to, by index. */
  base: readonly Location[] | null;
  /** The chunker's largest chunk: a batch's buffer holds BATCH_BYTES and one more chunk. */
  maxChunkSize: number;
  onProgress: ((bytesDone: number) => void) | undefined;
}

export class SealPipeline {
  /** The checkpoint's chunks, in order. */
  readonly chunks: Location[] = [];
  /** Packs of older checkpoints that the chunk list reuses. */
  readonly referencedPacks = new Set<string>();
  /** Bytes of the state so far. */
  size = 0;
  private readonly listDigest = createHash('sha256');
  private readonly inflight: Promise<SealBatchResult>[] = [];
  private readonly spareInputs: Buffer[] = [];
  private readonly spareOutputs: Buffer[] = [];
  private readonly capacity: number;
  private batch: Batch = emptyBatch();
  private firstInput = true;

  constructor(private readonly parts: SealPipelineParts) {
    this.capacity = BATCH_BYTES + parts.maxChunkSize;
  }

  /** Takes the next chunk; waits while the pool's window of batches is full. */
  async add(planned: PlannedChunk): Promise<void> {
    const batch = this.batch;
    if ('reuse' in planned) {
      const [id, chunkSize] = this.parts.base![planned.reuse]!;
      batch.order.push({ id, size: chunkSize, known: true });
      batch.covered += chunkSize;
    } else {
      if (batch.buffer && batch.buffer.length - batch.used < planned.chunk.length) {
        // Only a small first batch fills up before BATCH_BYTES: it goes as it is.
        await this.next();
        return this.add(planned);
      }
      batch.buffer ??= this.spareInputs.pop() ?? this.newInput(planned.chunk.length);
      batch.used += planned.chunk.copy(batch.buffer, batch.used);
      batch.order.push(batch.sizes.length);
      batch.sizes.push(planned.chunk.length);
    }
    // Reused chunks cost no sealing: a batch of them closes only every REUSED_BATCH_BYTES, for progress.
    if (batch.used >= BATCH_BYTES || batch.covered >= REUSED_BATCH_BYTES) await this.next();
  }

  /** Sends the batch off; waits while the pool's window of batches is full. */
  private async next(): Promise<void> {
    this.dispatch();
    while (this.inflight.length >= this.parts.pool.window) await this.consume(await this.inflight.shift()!);
  }

  /** A batch buffer: the write's first is small (FIRST_BATCH_BYTES), every later one full size. */
  private newInput(chunkSize: number): Buffer {
    if (this.firstInput) {
      this.firstInput = false;
      return shared(Math.min(this.capacity, Math.max(FIRST_BATCH_BYTES, chunkSize)));
    }
    return shared(this.capacity);
  }

  /** Seals what is left and waits for every batch; returns the digest of the chunk-id list (format 2 and 3). */
  async finish(): Promise<string> {
    this.dispatch();
    while (this.inflight.length > 0) await this.consume(await this.inflight.shift()!);
    return `sha256:${this.listDigest.digest('hex')}`;
  }

  /** After a failure: waits for the batches still in flight, so that nothing runs on once the write is over. */
  async settle(): Promise<void> {
    await Promise.allSettled(this.inflight);
  }

  private dispatch(): void {
    const { order, sizes, buffer } = this.batch;
    if (order.length === 0) return;
    const { pool, context } = this.parts;
    // On a pool thread, or here while the threads are busy (ChunkPool.seal).
    const sealed =
      sizes.length === 0
        ? Promise.resolve<SealBatchResult & { data: Buffer | null }>({ sealed: EMPTY, entries: [], data: null })
        : pool.seal(context, buffer!, sizes, this.spareOutputs.pop() ?? null);
    const merged = sealed.then((result) => {
      // A small first buffer is not kept: a spare must hold a full batch.
      if (result.data && result.data.length >= this.capacity && this.spareInputs.length < pool.window) {
        this.spareInputs.push(result.data);
      }
      return {
        sealed: result.sealed,
        entries: order.map((item) => (typeof item === 'number' ? result.entries[item]! : item)),
      };
    });
    merged.catch(() => undefined); // awaited in order; a failure must not count as unhandled meanwhile
    this.inflight.push(merged);
    this.batch = emptyBatch();
  }

  /** A sealed batch, in order: its objects appended to a pack, its chunks added to the list. */
  private async consume(result: SealBatchResult): Promise<void> {
    const { pool, packs, known } = this.parts;
    const outputs = this.spareOutputs;
    let packId = '';
    let at = 0;
    if (result.sealed.length > 0) {
      const { sealed } = result;
      let written: Promise<void>;
      [packId, at, written] = await packs.append([sealed]);
      void written.then(
        () => outputs.length < pool.window && outputs.push(Buffer.from(sealed.buffer, 0, sealed.buffer.byteLength)),
        () => undefined, // the write's failure reaches the caller through the pack writer
      );
    } else if (result.sealed.buffer.byteLength > 0 && outputs.length < pool.window) {
      // A spare the batch did not need (every chunk stored already) comes back unused.
      outputs.push(Buffer.from(result.sealed.buffer, 0, result.sealed.buffer.byteLength));
    }
    for (const entry of result.entries) {
      let location = known.get(entry.id);
      if ('known' in entry) {
        if (!location) throw new Error(`chunk ${entry.id} was reported as stored but is not`);
        const [, , storedIn] = location;
        this.referencedPacks.add(storedIn);
      } else if (!location) {
        // (A chunk sealed twice in one write — by two threads, or by a thread and this one — keeps its first copy;
        // the second is dead bytes.)
        location = [entry.id, entry.size, packId, at + entry.at, entry.length];
        known.set(entry.id, location);
      }
      this.chunks.push(location);
      this.listDigest.update(entry.id, 'hex');
      this.size += entry.size;
    }
    this.parts.onProgress?.(this.size);
  }
}

/**
 * The chunks of a state: base chunks over a source's unchanged runs when its base is usable (see planChunks),
 * otherwise every byte read and chunked.
 */
export async function* plannedChunks(
  data: Readable | StateSource,
  base: readonly Location[] | null,
  chunker: Chunker,
  signal: AbortSignal | undefined,
): AsyncGenerator<PlannedChunk> {
  if (isStateSource(data) && base) {
    for await (const planned of planChunks(data.pieces, { sizes: base.map(([, size]) => size) }, chunker)) {
      signal?.throwIfAborted();
      yield planned;
    }
    return;
  }
  const bytes = isStateSource(data) ? sourceBytes(data) : data;
  for await (const chunk of chunker.chunks(abortable(bytes, signal))) yield { chunk };
}

/**
 * The chunk list of a base checkpoint for reuse by a new one, or null if it cannot serve: missing or unreadable,
 * format 1 (no chunks), or sealed in another mode or under another data key than the new checkpoint (a manifest's
 * chunks share one). Reading every byte instead is slower, never wrong.
 */
export function reusableChunks(base: ChunkedManifest | null, key: ChunkKey | null): Location[] | null {
  if (!base) return null;
  const { mode, dataKeyId } = base.encryption;
  const sameKey = key ? mode === 'aes-256-gcm' && dataKeyId === key.dataKeyId : mode === 'none';
  return sameKey ? base.chunks : null;
}

/** The pieces of `source`, stopping with the signal's reason once it aborts. */
async function* abortable(source: AsyncIterable<unknown>, signal?: AbortSignal): AsyncGenerator<Uint8Array> {
  for await (const piece of source) {
    signal?.throwIfAborted();
    yield piece as Uint8Array;
  }
}
