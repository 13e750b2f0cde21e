/**
 * Bounded memory, measured alone: captures and restores a state of the given size (incompressible or text-like, from
 * a file)
 * with the default engine, in this process, and prints the process's peak resident memory during each as JSON.
 * Run by bench/engine.ts; by hand:
 *
 *   npx tsx bench/bounded.ts <size-mb> <scratch-dir> [random|text] [<threads>|default] [<chunk-kib>]
 *
 * e.g. `npx tsx bench/bounded.ts 2048 /tmp text default 64` for the memory of 64 KiB chunks (DS_CHUNK_KIB=64).
 */
import { createCipheriv, randomBytes } from 'node:crypto';
import { createReadStream } from 'node:fs';
import * as fs from 'node:fs/promises';
import path from 'node:path';
import { Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { ChunkedSnapshotStore, chunkerFor, Keyring } from '../src/snapshots';
import { ChunkPool } from '../src/snapshots/engine/chunk-pool';

const MiB = 1024 * 1024;

async function peakDuring(fn: () => Promise<unknown>): Promise<{ peakMiB: number; ms: number }> {
  let peak = process.memoryUsage().rss;
  const timer = setInterval(() => (peak = Math.max(peak, process.memoryUsage().rss)), 10);
  const start = performance.now();
  try {
    await fn();
    return { peakMiB: Math.max(peak, process.memoryUsage().rss) / MiB, ms: performance.now() - start };
  } finally {
    clearInterval(timer);
  }
}

async function main(): Promise<void> {
  const size = Number(process.argv[2]) * MiB;
  const kind = process.argv[4] === 'text' ? 'text' : 'random';
  const dir = await fs.mkdtemp(path.join(process.argv[3]!, 'bounded-'));
  try {
    const file = path.join(dir, 'state.bin');
    const handle = await fs.open(file, 'w');
    const cipher = createCipheriv('aes-256-ctr', randomBytes(32), randomBytes(16));
    const zeros = Buffer.alloc(MiB);
    let line = 0;
    for (let done = 0; done < size; done += MiB) {
      if (kind === 'random') {
        await handle.write(cipher.update(zeros));
        continue;
      }
      const lines: string[] = [];
      for (let n = 0; n < MiB; line++) {
        const l = `2026-11-29T12:00:00Z INFO session=${line % 977} step=${line} tool=shell exit=${line % 3}\n`;
        lines.push(l);
        n += l.length;
      }
      await handle.write(Buffer.from(lines.join('')).subarray(0, MiB));
    }
    await handle.close();
    const store = new ChunkedSnapshotStore({
      rootDir: path.join(dir, 'store'),
      keyring: new Keyring([{ id: 'bench', key: randomBytes(32) }]),
      ...(process.argv[5] !== undefined && process.argv[5] !== 'default'
        ? { pool: new ChunkPool(Number(process.argv[5])) }
        : {}),
      ...(process.argv[6] !== undefined ? { chunker: chunkerFor(Number(process.argv[6]) * 1024) } : {}),
    });
    const checkpoint = {
      checkpointId: 'cp-1',
      sessionId: 'bounded',
      sequence: 1,
      parentId: null,
      runtime: { kind: 'memory', version: '1' },
      trigger: 'manual' as const,
    };
    global.gc?.();
    const idleMiB = process.memoryUsage().rss / MiB;
    const capture = await peakDuring(() => store.write(checkpoint, createReadStream(file, { highWaterMark: MiB })));
    await fs.rm(file);
    const restore = await peakDuring(async () => {
      const { stream } = await store.open('bounded', 'cp-1');
      await pipeline(stream, new Writable({ write: (_chunk, _encoding, done) => done() }));
    });
    const mbps = (ms: number) => size / MiB / (ms / 1000);
    console.log(
      JSON.stringify({
        idleMiB,
        captureMiB: capture.peakMiB,
        restoreMiB: restore.peakMiB,
        captureMBps: mbps(capture.ms),
        restoreMBps: mbps(restore.ms),
      }),
    );
  } finally {
    await fs.rm(dir, { recursive: true, force: true });
  }
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);
