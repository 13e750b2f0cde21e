/**
 * Entry point of a chunk worker thread (started by chunk-pool.ts): seals batches of chunks and opens read batches
 * (chunk-work.ts) for the thread that started it. Seal contexts (key material, the ids already stored) arrive once
 * per write and stay until released; an open brings its own. Neither leaves the process.
 */
import { parentPort } from 'node:worker_threads';
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
      const result = openBatch(fromOpenWireContext(request.context), toBuffer(request.sealed), request.entries);
      reply = { job: request.job, type: 'open', result, sealed: request.sealed };
    } else {
      const { context, known } = contextFor(request.contextId, request.context);
      const spare = request.spare ? toBuffer(request.spare) : null;
      const result = sealBatch(context, known, toBuffer(request.data), request.sizes, spare);
      // The input goes back, for the caller's next batch.
      reply = { job: request.job, type: 'seal', result, data: request.data };
    }
  } catch (err) {
    reply = { job: request.job, type: 'error', message: err instanceof Error ? err.message : String(err) };
  }
  port.postMessage(reply, transferList(reply));
});
