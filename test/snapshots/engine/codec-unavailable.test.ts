import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { promisify } from 'node:util';
import { ChunkedSnapshotStore } from '../../../src/snapshots/engine/chunked-store';
import { CODECS, isCodecAvailable, type CodecId } from '../../../src/snapshots/engine/codec';
import { Keyring } from '../../../src/snapshots/engine/keyring';
import { chunkCodecFor } from '../../../src/snapshots/open-snapshot-store';
import { cp } from '../../helpers/checkpoints';

/**
 * A worker without the zstd binding opening a checkpoint another worker wrote with zstd: a retryable error that says
 * what the worker lacks, not `SnapshotCorrupt` (which would make restore fall back past a good checkpoint).
 */
const withZstd = isCodecAvailable(CODECS.zstd) ? it : it.skip;

interface Outcome {
  ok: boolean;
  code?: string;
  message?: string;
}

/** Writes a compressible checkpoint here (`codec` as DS_SNAPSHOT_CODEC resolves it); opens it where zstd is missing. */
async function openWithoutZstd(codec: CodecId | undefined): Promise<Outcome & { verify: Outcome }> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ds-no-zstd-'));
  try {
    const key = randomBytes(32);
    const store = new ChunkedSnapshotStore({
      rootDir: dir,
      keyring: new Keyring([{ id: 'k', key }]),
      ...(codec !== undefined ? { codec } : {}),
    });
    const text = Buffer.from('a line of text that compresses well\n'.repeat(20_000));
    await store.write(cp(1), Readable.from([text]));
    // The other worker: a process in which `zstd-napi` cannot be loaded, decoding on its own thread.
    const script = `
      const Module = require('node:module');
      const resolve = Module._resolveFilename;
      Module._resolveFilename = function (request, ...rest) {
        if (request.startsWith('zstd-napi')) throw new Error('zstd-napi is not installed here');
        return resolve.call(this, request, ...rest);
      };
      const { ChunkedSnapshotStore } = require(${JSON.stringify(path.resolve('src/snapshots/engine/chunked-store.ts'))});
      const { ChunkPool } = require(${JSON.stringify(path.resolve('src/snapshots/engine/chunk-pool.ts'))});
      const { Keyring } = require(${JSON.stringify(path.resolve('src/snapshots/engine/keyring.ts'))});
      const store = new ChunkedSnapshotStore({
        rootDir: ${JSON.stringify(dir)},
        keyring: new Keyring([{ id: 'k', key: Buffer.from(${JSON.stringify(key.toString('base64'))}, 'base64') }]),
        pool: new ChunkPool(0),
      });
      const outcome = (p) => p.then(() => ({ ok: true }), (err) => ({ ok: false, code: err.code, message: err.message }));
      (async () => {
        const open = await outcome(store.open('s1', 'cp-1').then(async ({ stream }) => { for await (const piece of stream) void piece; }));
        const verify = await outcome(store.verifyLineage('s1'));
        console.log(JSON.stringify({ ...open, verify }));
      })();
    `;
    const { stdout } = await promisify(execFile)(process.execPath, [
      '--require',
      require.resolve('tsx/cjs'),
      '-e',
      script,
    ]);
    return JSON.parse(stdout.trim().split('\n').at(-1)!) as Outcome & { verify: Outcome };
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

withZstd(
  'a worker without the zstd binding reports what it lacks, not a corrupt checkpoint',
  async () => {
    const result = await openWithoutZstd(undefined);
    expect(result.ok).toBe(false);
    // Not a wire code: retried, never failed over to an older checkpoint as if this one were corrupt.
    expect(result.code).toBe('SnapshotRead');
    expect(result.message).toMatch(/this worker cannot decode chunk .* zstd is not installed/);
    // Verifying there says the same, rather than reporting the checkpoint corrupt.
    expect(result.verify).toEqual({ ok: false, code: 'SnapshotRead', message: result.message });
  },
  60_000,
);

withZstd(
  'with DS_SNAPSHOT_CODEC=brotli a worker that has zstd writes what one without it reads',
  async () => {
    expect(await openWithoutZstd(chunkCodecFor('brotli'))).toEqual({ ok: true, verify: { ok: true } });
  },
  60_000,
);
