/**
 * The worker image runs the compiled build (dist/, CommonJS from tsc), not the sources the other tests load through
 * a transpiler. This compiles the project as the Dockerfile does, into a temp dir, and runs the snapshot engine from
 * there in a plain `node` process: worker threads, the WebAssembly chunker and an encrypted round trip.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

const root = path.resolve(__dirname, '../..');
let outDir: string;
beforeAll(() => {
  // Inside the project's node_modules, so that the compiled files resolve the project's dependencies.
  const cache = path.join(root, 'node_modules', '.cache');
  fs.mkdirSync(cache, { recursive: true });
  outDir = fs.mkdtempSync(path.join(cache, 'ds-dist-'));
  const tsc = spawnSync(
    process.execPath,
    [require.resolve('typescript/bin/tsc'), '-p', 'tsconfig.build.json', '--outDir', outDir],
    { cwd: root, encoding: 'utf8' },
  );
  if (tsc.status !== 0) throw new Error(`tsc failed:\n${tsc.stdout}${tsc.stderr}`);
});
afterAll(() => {
  fs.rmSync(outDir, { recursive: true, force: true });
});

test('the compiled snapshot engine checkpoints and restores on its threads in plain node', () => {
  const script = `
    const { ChunkedSnapshotStore } = require(${JSON.stringify(path.join(outDir, 'snapshots/engine/chunked-store.js'))});
    const { ChunkPool } = require(${JSON.stringify(path.join(outDir, 'snapshots/engine/chunk-pool.js'))});
    const { Keyring } = require(${JSON.stringify(path.join(outDir, 'snapshots/engine/keyring.js'))});
    const { Readable } = require('node:stream');
    const crypto = require('node:crypto');
    const fs = require('node:fs');
    (async () => {
      const dir = fs.mkdtempSync(require('node:path').join(require('node:os').tmpdir(), 'ds-dist-store-'));
      const store = new ChunkedSnapshotStore({
        rootDir: dir,
        keyring: new Keyring([{ id: 'k', key: crypto.randomBytes(32) }]),
        pool: new ChunkPool(2),
      });
      const state = Buffer.concat([crypto.randomBytes(3 << 20), Buffer.from('a line of text\\n'.repeat(200000))]);
      const m = await store.write(
        { checkpointId: 'cp-1', sessionId: 's', sequence: 1, parentId: null,
          runtime: { kind: 'memory', version: '1' }, trigger: 'manual' },
        Readable.from([state]),
      );
      const parts = [];
      for await (const p of (await store.open('s', 'cp-1')).stream) parts.push(p);
      fs.rmSync(dir, { recursive: true, force: true });
      console.log(JSON.stringify({ same: Buffer.concat(parts).equals(state), size: m.size, encryption: m.encryption }));
    })().catch((e) => { console.error(e); process.exit(1); });
  `;
  const run = spawnSync(process.execPath, ['-e', script], { encoding: 'utf8', timeout: 60_000 });
  expect(run.stderr).toBe('');
  expect(run.status).toBe(0);
  expect(JSON.parse(run.stdout.trim())).toEqual({
    same: true,
    size: 3 * 1024 * 1024 + 15 * 200000,
    encryption: 'aes-256-gcm',
  });
});
