/**
 * Messages between chunk-pool.ts and its worker threads (chunk-worker.ts). Buffers cross as transferred
 * ArrayBuffers where they own one (no copy), otherwise as copies.
 */
import type { ChunkContext, OpenBatchResult, OpenEntry, SealBatchResult } from './chunk-work';

/** A context as it crosses the thread boundary; `known` only for seal contexts. */
export interface WireContext {
  tenant: string;
  lineage: string;
  formatVersion: number;
  key: { dataKeyId: string; key: Uint8Array; chunkIdKey: Uint8Array } | null;
  dataKeyId: string | null;
  known?: readonly string[];
}

export type PoolRequest =
  | { type: 'seal'; job: number; contextId: number; context?: WireContext; data: Uint8Array; sizes: number[] }
  | { type: 'open'; job: number; contextId: number; context?: WireContext; sealed: Uint8Array; entries: OpenEntry[] }
  | { type: 'release'; contextId: number };

export type PoolReply =
  | { job: number; type: 'seal'; result: SealBatchResult }
  | { job: number; type: 'open'; result: OpenBatchResult }
  | { job: number; type: 'error'; message: string };

/** A Buffer view of bytes that arrived as a Uint8Array (structured clone does not keep the Buffer class). */
export function toBuffer(bytes: Uint8Array): Buffer {
  return Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

/** The context of a read or write, rebuilt on the worker's side. */
export function fromWireContext(wire: WireContext): ChunkContext & { dataKeyId: string | null } {
  return {
    tenant: wire.tenant,
    lineage: wire.lineage,
    formatVersion: wire.formatVersion,
    dataKeyId: wire.dataKeyId,
    key: wire.key
      ? { dataKeyId: wire.key.dataKeyId, key: toBuffer(wire.key.key), chunkIdKey: toBuffer(wire.key.chunkIdKey) }
      : null,
  };
}

/** Bytes that own their whole ArrayBuffer can be moved to the other thread instead of copied. */
export function ownsBuffer(bytes: Uint8Array): boolean {
  return (
    bytes.byteOffset === 0 &&
    bytes.byteLength === bytes.buffer.byteLength &&
    !(bytes.buffer instanceof SharedArrayBuffer)
  );
}

/** What to transfer with a message: the large byte arrays it carries that own their memory. */
export function transferList(message: PoolRequest | PoolReply): ArrayBuffer[] {
  const bytes: Uint8Array[] = [];
  if ('data' in message) bytes.push(message.data);
  if ('sealed' in message) bytes.push(message.sealed);
  if (message.type === 'seal' && 'result' in message) bytes.push(...message.result.objects);
  if (message.type === 'open' && 'result' in message && message.result.ok) bytes.push(message.result.plain);
  return bytes.filter(ownsBuffer).map((b) => b.buffer as ArrayBuffer);
}
