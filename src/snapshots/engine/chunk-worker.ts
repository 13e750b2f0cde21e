/**
 * Entry point of a chunk worker thread (started by chunk-pool.ts): seals batches of chunks and opens read batches
 * (chunk-work.ts) for the thread that started it. Seal contexts (key material, the ids already stored) arrive once
 * per write and stay until released; an open brings its own. Neither leaves the process.
 */
import { parentPort } from 'node:worker_threads';
import { messageOf } from '../../errors';
import { openBatch, sealBatch } from './chunk-work';
import {
  fromOpenWireContext,
  fromWireContext,
  toBuffer,
  transferList,
  type PoolReply,
  type PoolRequest,
  type WireContext,
} from './chunk-wire';

if (!parentPort) throw new Error('chunk-worker.ts runs as a worker thread');
const port = parentPort;
const contexts = new Map<number, { context: ReturnType<typeof fromWireContext>; known: Set<string> }>();

function contextFor(id: number, wire: WireContext | undefined) {
  let entry = contexts.get(id);
  if (!entry) {
    if (!wire) throw new Error(`chunk worker: unknown context ${id}`);
    const context = fromWireContext(wire);
    entry = { context, known: new Set(wire.known) };
    contexts.set(id, entry);
  }
  return entry;
}

port.on('message', (request: PoolRequest) => {
  if (request.type === 'release') {
    contexts.delete(request.contextId);
    return;
  }
  let reply: PoolReply;
  try {
    if (request.type === 'open') {
      const context = fromOpenWireContext(request.context);
      const sealed = toBuffer(request.sealed);
      let result: ReturnType<typeof openBatch>;
      try {
        result = openBatch(context, sealed, request.entries);
      } finally {
        context.key?.key.fill(0);
        context.key?.chunkIdKey.fill(0);
      }
      // A chunk that shares its memory with other data (a small decoder output is a slice of Node's pool) is copied
      // into its own, so that only its bytes cross back.
      if (result.ok) result.chunks = result.chunks.map((c) => (c.buffer === sealed.buffer ? c : ownCopy(c)));
      reply = { job: request.job, type: 'open', result, sealed: request.sealed };
    } else {
      const { context, known } = contextFor(request.contextId, request.context);
      const spare = request.spare ? toBuffer(request.spare) : null;
      const result = sealBatch(context, known, toBuffer(request.data), request.sizes, spare);
      // The input goes back, for the caller's next batch.
      reply = { job: request.job, type: 'seal', result, data: request.data };
    }
  } catch (err) {
    reply = { job: request.job, type: 'error', message: messageOf(err) };
  }
  port.postMessage(reply, transferList(reply));
});

/** `bytes` itself if it fills its own memory, else a copy that does. */
function ownCopy(bytes: Buffer): Buffer {
  if (bytes.byteOffset === 0 && bytes.byteLength === bytes.buffer.byteLength) return bytes;
  const own = Buffer.allocUnsafeSlow(bytes.length);
  bytes.copy(own);
  return own;
}
