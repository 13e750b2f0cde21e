/**
 * Entry point of a chunk worker thread (started by chunk-pool.ts): seals batches of chunks and decompresses opened
 * ones (chunk-work.ts) for the thread that started it. Contexts (key material, the ids already stored) arrive once per write or read and stay
 * until released; they never leave the process.
 */
import { parentPort } from 'node:worker_threads';
import { decodeBodies, sealBatch } from './chunk-work';
import {
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
    if (request.type === 'decode') {
      const bodies = request.bodies.map((b) => ({ ...b, body: toBuffer(b.body) }));
      reply = { job: request.job, type: 'decode', result: decodeBodies(bodies, request.checkIds) };
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
