/**
 * Messages between chunk-pool.ts and its worker threads (chunk-worker.ts). Buffers cross as transferred
 * ArrayBuffers where they own one (no copy), otherwise as copies.
 */
import { isSharedArrayBuffer } from 'node:util/types';
import type { ChunkContext, ChunkKey, OpenBatchResult, OpenEntry, SealBatchResult, SealContext } from './chunk-work';
import type { CodecId } from './codec';

/** Lineage key material as it crosses the thread boundary. */
export interface WireKey {
  dataKeyId: string;
  key: Uint8Array;
  chunkIdKey: Uint8Array;
}

/** Key material as it crosses: copies that own their memory (a pooled Buffer would carry its whole pool across). */
export function toWireKey(key: ChunkKey): WireKey {
  return { dataKeyId: key.dataKeyId, key: new Uint8Array(key.key), chunkIdKey: new Uint8Array(key.chunkIdKey) };
}

function fromWireKey(wire: WireKey): ChunkKey {
  return { dataKeyId: wire.dataKeyId, key: toBuffer(wire.key), chunkIdKey: toBuffer(wire.chunkIdKey) };
}

/** A seal context as it crosses the thread boundary. */
export interface WireContext {
  tenant: string;
  lineage: string;
  formatVersion: number;
  key: WireKey | null;
  known: readonly string[];
  codec?: CodecId;
}

export type PoolRequest =
  | {
      type: 'seal';
      job: number;
      contextId: number;
      context?: WireContext;
      data: Uint8Array;
      sizes: number[];
      /** A buffer the thread may seal into (an earlier batch's output, written out since). */
      spare?: Uint8Array;
    }
  | { type: 'open'; job: number; context: OpenWireContext; sealed: Uint8Array; entries: OpenEntry[] }
  | { type: 'release'; contextId: number };

/** What opening a read batch needs: a read's context, as it crosses the thread boundary. */
export interface OpenWireContext {
  tenant: string;
  lineage: string;
  formatVersion: number;
  key: WireKey | null;
  dataKeyId: string | null;
}

export type PoolReply =
  | { job: number; type: 'seal'; result: SealBatchResult; data: Uint8Array }
  | { job: number; type: 'open'; result: OpenBatchResult; sealed: Uint8Array }
  | { job: number; type: 'error'; message: string };

/** A Buffer view of bytes that arrived as a Uint8Array (structured clone does not keep the Buffer class). */
export function toBuffer(bytes: Uint8Array): Buffer {
  return Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

/** A read's context, rebuilt on the worker's side. */
export function fromOpenWireContext(wire: OpenWireContext): ChunkContext & { dataKeyId: string | null } {
  return {
    tenant: wire.tenant,
    lineage: wire.lineage,
    formatVersion: wire.formatVersion,
    dataKeyId: wire.dataKeyId,
    key: wire.key ? fromWireKey(wire.key) : null,
  };
}

/** The context of a write, rebuilt on the worker's side. */
export function fromWireContext(wire: WireContext): SealContext {
  return {
    tenant: wire.tenant,
    lineage: wire.lineage,
    formatVersion: wire.formatVersion,
    known: wire.known,
    ...(wire.codec !== undefined ? { codec: wire.codec } : {}),
    key: wire.key ? fromWireKey(wire.key) : null,
  };
}

/**
 * Bytes that start their ArrayBuffer and fill it but for a few bytes can be moved to the other thread instead of
 * copied (a decoder's output is a byte shorter than its buffer). Slices of Node's shared 8 KiB pool never qualify.
 */
function ownsBuffer(bytes: Uint8Array): boolean {
  return (
    bytes.byteOffset === 0 && bytes.buffer.byteLength - bytes.byteLength <= 64 && !isSharedArrayBuffer(bytes.buffer)
  );
}

/** What to transfer with a message: the large byte arrays it carries that own their memory. */
export function transferList(message: PoolRequest | PoolReply): ArrayBuffer[] {
  const bytes: Uint8Array[] = [];
  const buffers: ArrayBuffer[] = [];
  if ('data' in message) bytes.push(message.data);
  if (message.type === 'seal' && 'spare' in message && message.spare) bytes.push(message.spare);
  // A seal's output is a view of the start of a buffer its batch owns whole (the unused end goes along, to be reused).
  if (message.type === 'seal' && 'result' in message && message.result.sealed.byteOffset === 0) {
    const { buffer } = message.result.sealed;
    if (buffer.byteLength > 0 && !isSharedArrayBuffer(buffer)) buffers.push(buffer);
  }
  // An open's sealed batch goes whole both ways (a read buffer with headroom; plaintext chunks are views of it), and
  // the key copies made for it go rather than being copied again.
  if (message.type === 'open' && 'context' in message && message.context.key) {
    buffers.push(message.context.key.key.buffer as ArrayBuffer, message.context.key.chunkIdKey.buffer as ArrayBuffer);
  }
  if (message.type === 'open') {
    const { buffer } = message.sealed;
    if (message.sealed.byteOffset === 0 && buffer.byteLength > 0 && !isSharedArrayBuffer(buffer)) {
      buffers.push(buffer);
    }
    if ('result' in message && message.result.ok) bytes.push(...message.result.chunks);
  }
  // A buffer listed twice cannot be transferred: once each.
  return [...new Set([...buffers, ...bytes.filter(ownsBuffer).map((b) => b.buffer as ArrayBuffer)])];
}
