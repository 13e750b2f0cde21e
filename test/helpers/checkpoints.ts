import type { NewCheckpoint } from '../../src/snapshots/snapshot-store';

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
