/**
 * A chunked checkpoint's plaintext as a stream: its chunks read from their packs in batches (one read per run of
 * adjacent objects), a few batches ahead of the consumer, opened — authenticated, decrypted, decompressed — on a
 * pool thread or on the calling thread, and yielded in manifest order.
 */
import { Readable } from 'node:stream';
import type { BlobBackend } from '../blob/backend';
import { SnapshotCorruptError, SnapshotReadError, SnapshotTamperedError } from '../errors';
import { CHUNKED_FORMAT_VERSION } from '../format';
import type { StoreProgress } from '../snapshot-store';
import type { ChunkPool } from './chunk-pool';
import type { OpenFailure } from './chunk-work';
import type { Location } from './manifest-codec';
import { BATCH_BYTES, PackReader, type PackBinding, type PackReadFor } from './packs';

/** Read batches in flight ahead of a restore's consumer. */
const READ_AHEAD_BATCHES = 4;

/** The plaintext of `chunks`, read from the lineage's packs in `backend`; fails with the checkpoint's typed error. */
export function readChunks(
  chunks: readonly Location[],
  from: { backend: BlobBackend; binding: PackBinding; readFor: PackReadFor; pool: ChunkPool },
  options: StoreProgress = {},
): Readable {
  const { binding, readFor, pool } = from;
  const { sessionId, checkpointId } = readFor;
  const { key } = binding;
  const reader = new PackReader(from.backend, binding, readFor, chunks, BATCH_BYTES * 1.5);
  const context = {
    tenant: binding.tenant,
    lineage: binding.lineage,
    formatVersion: CHUNKED_FORMAT_VERSION,
    key,
    dataKeyId: key?.dataKeyId ?? null,
  };
  // Encrypted chunks open into new buffers, so a batch's read buffer is free again once it is opened: reused,
  // instead of leaving a MiB of garbage per batch. (Plaintext chunks are views of it: never reused.)
  const spare: Buffer[] = [];
  const readAndOpen = async (batch: Location[]): Promise<Buffer[]> => {
    const { sealed, entries } = await reader.readBatch(batch, spare.pop());
    // Opened on a pool thread, or here while the threads are busy (ChunkPool.open): whichever side has time takes
    // the next batch.
    const { result: opened, sealed: back } = await pool.open(context, sealed, entries, { move: true });
    if (!opened.ok) throw openFailureError(opened.failure, sessionId, checkpointId);
    if (key && back.byteOffset === 0) spare.push(Buffer.from(back.buffer, 0, back.buffer.byteLength));
    return opened.chunks;
  };
  async function* plaintext(): AsyncGenerator<Buffer> {
    const inflight: Promise<Buffer[]>[] = [];
    let done = 0;
    const batches = readBatches(chunks);
    try {
      for (;;) {
        options.signal?.throwIfAborted();
        const next = batches.next();
        if (!next.done) {
          const opened = readAndOpen(next.value);
          opened.catch(() => undefined); // awaited in order below
          inflight.push(opened);
          if (inflight.length < READ_AHEAD_BATCHES) continue;
        }
        const ready = inflight.shift();
        if (!ready) break;
        for (const plain of await ready) {
          done += plain.length;
          options.onProgress?.(done);
          yield plain;
        }
      }
    } finally {
      await Promise.allSettled(inflight);
      await reader.close();
    }
  }
  return Readable.from(plaintext(), { objectMode: false });
}

/**
 * The chunks of a manifest in order, in batches of about BATCH_BYTES of sealed or of plain bytes, whichever is more:
 * a MiB of well-compressed text opens to many, and a few such batches in flight would cost as many.
 */
function* readBatches(chunks: readonly Location[]): Generator<Location[]> {
  let batch: Location[] = [];
  let bytes = 0;
  for (const location of chunks) {
    batch.push(location);
    const [, size, , , sealedLength] = location;
    bytes += Math.max(size, sealedLength);
    if (bytes >= BATCH_BYTES) {
      yield batch;
      batch = [];
      bytes = 0;
    }
  }
  if (batch.length > 0) yield batch;
}

/** A chunk refused by a pool thread, as the typed error of the checkpoint it belongs to. */
function openFailureError(failure: OpenFailure, sessionId: string, checkpointId: string): Error {
  const where = `chunk ${failure.id} of checkpoint ${checkpointId}`;
  switch (failure.kind) {
    case 'sealed':
      return new SnapshotTamperedError(failure.message, failure.reason, {
        sessionId,
        checkpointId,
        objectId: failure.id,
      });
    case 'decode':
      return new SnapshotCorruptError(`${where} does not decode: ${failure.message}`, sessionId, checkpointId);
    case 'unavailable':
      return new SnapshotReadError(`this worker cannot decode ${where}: ${failure.message}`, sessionId, checkpointId);
    case 'id-mismatch':
      return new SnapshotCorruptError(`${where} does not match its id`, sessionId, checkpointId);
    case 'other':
      return new SnapshotReadError(`${where} could not be opened: ${failure.message}`, sessionId, checkpointId);
  }
}
