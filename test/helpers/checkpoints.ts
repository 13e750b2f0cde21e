import * as fs from 'node:fs';
import path from 'node:path';
import type { Readable } from 'node:stream';
import type { NewCheckpoint } from '../../src/snapshots';

/** Checkpoint `cp-<sequence>` of a memory-runtime session, taken by hand. */
export function cp(sequence: number, parentId: string | null = null, sessionId = 's1'): NewCheckpoint {
  return {
    checkpointId: `cp-${sequence}`,
    sessionId,
    sequence,
    parentId,
    runtime: { kind: 'memory', version: '1' },
    trigger: 'manual',
  };
}

/** Every byte of a stream (or of any iterable of byte pieces). */
export async function readAll(stream: AsyncIterable<unknown>): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const p of stream) parts.push(Buffer.isBuffer(p) ? p : Buffer.from(p as Uint8Array));
  return Buffer.concat(parts);
}

/** Bytes of the `.pack` files under `root` (a store, a lineage or its packs folder): what checkpoints cost on disk. */
export function packBytes(root: string): number {
  if (!fs.existsSync(root)) return 0;
  let total = 0;
  for (const e of fs.readdirSync(root, { withFileTypes: true, recursive: true })) {
    if (e.isFile() && e.name.endsWith('.pack')) total += fs.statSync(path.join(e.parentPath, e.name)).size;
  }
  return total;
}

/** What a consumer of a stream observes: the bytes, whether 'end' fired, and the error if any. */
export function consume(stream: Readable): Promise<{ bytes: Buffer; ended: boolean; error?: Error }> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let ended = false;
    let error: Error | undefined;
    stream.on('data', (chunk: Buffer) => chunks.push(chunk));
    stream.on('end', () => (ended = true));
    stream.on('error', (e) => (error = e));
    stream.on('close', () => resolve({ bytes: Buffer.concat(chunks), ended, error }));
  });
}

/** What a refused claim on session `s1` looks like to a caller: SessionIdTakenError with `message`. */
export function sessionIdTaken(message: RegExp) {
  return {
    code: 'SessionAlreadyExists',
    name: 'SessionIdTakenError',
    sessionId: 's1',
    checkpointId: '',
    message: expect.stringMatching(message),
  };
}
