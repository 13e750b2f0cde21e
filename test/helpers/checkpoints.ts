import type { Readable } from 'node:stream';
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

/** Every byte of a stream. */
export async function readAll(stream: Readable): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const p of stream) parts.push(p as Buffer);
  return Buffer.concat(parts);
}
