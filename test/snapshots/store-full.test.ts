import { spawnSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { FsSnapshotStore, StoreFullError, type SnapshotStore } from '../../src/snapshots';
import { ChunkedSnapshotStore } from '../../src/snapshots/engine/chunked-store';
import { Keyring } from '../../src/snapshots/engine/keyring';
import { cp, readAll } from '../helpers/checkpoints';

/**
 * A store on a real file system that runs out of room (a 2 MiB tmpfs) or turns read-only: the write is StoreFull,
 * nothing of it is visible or left behind, and what was stored before still restores. Mounting needs root.
 */
const mounted: string[] = [];

function mount(dir: string, options: string): string | null {
  const run = spawnSync('mount', ['-t', 'tmpfs', '-o', options, 'tmpfs', dir], { encoding: 'utf8' });
  return run.status === 0 ? null : (run.stderr || run.error?.message || `mount exited ${run.status}`).trim();
}

function unmount(dir: string): void {
  if (spawnSync('umount', [dir]).status !== 0) spawnSync('umount', ['-l', dir]);
}

/** Why this machine cannot run these tests, or null: a tmpfs is mounted and unmounted once to find out. */
const cannotMount = ((): string | null => {
  if (process.getuid?.() !== 0) return 'not running as root';
  const probe = fs.mkdtempSync(path.join(os.tmpdir(), 'ds-full-probe-'));
  try {
    const failed = mount(probe, 'size=2m');
    if (failed === null) unmount(probe);
    return failed;
  } finally {
    fs.rmSync(probe, { recursive: true, force: true });
  }
})();
if (cannotMount) console.warn(`store-full tests skipped: cannot mount a tmpfs (${cannotMount})`);

let dir: string;
beforeEach(() => {
  if (cannotMount) return;
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ds-full-'));
  const failed = mount(dir, 'size=2m');
  if (failed) throw new Error(`mount failed: ${failed}`);
  mounted.push(dir);
});
afterEach(() => {
  if (cannotMount) return;
  unmount(dir);
  mounted.splice(mounted.indexOf(dir), 1);
  fs.rmSync(dir, { recursive: true, force: true });
});
afterAll(() => {
  for (const left of mounted) unmount(left);
});

const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');
const keyring = new Keyring([{ id: 'k1', key: randomBytes(32) }]);

/** Every file under the store whose name says it is a temp file (`.x.tmp`, `.x.tmp-<random>`). */
function tempFiles(root: string): string[] {
  return fs
    .readdirSync(root, { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile() && /\.tmp(-|$)/.test(e.name))
    .map((e) => path.join(e.parentPath, e.name));
}

function manifestFiles(root: string, session = 's1'): string[] {
  return fs
    .readdirSync(path.join(root, session))
    .filter((n) => /\.manifest(\.json)?$/.test(n))
    .sort();
}

const kinds: [string, (root: string) => SnapshotStore][] = [
  ['the chunked store (encrypted)', (root) => new ChunkedSnapshotStore({ rootDir: root, keyring })],
  ['the chunked store (plaintext)', (root) => new ChunkedSnapshotStore({ rootDir: root, keyring: null })],
  ['the format-1 store', (root) => new FsSnapshotStore(root)],
];

(cannotMount ? describe.skip : describe).each(kinds)('%s', (_kind, storeAt) => {
  test('a checkpoint larger than the space left is StoreFull; nothing of it stays; the earlier one restores', async () => {
    const s = storeAt(path.join(dir, 'store'));
    const first = randomBytes(512 * 1024);
    await s.write(cp(1), Readable.from([first]));
    const before = await s.list('s1');

    const write = s.write(cp(2, 'cp-1'), Readable.from([randomBytes(4 * 1024 * 1024)]));
    await expect(write).rejects.toBeInstanceOf(StoreFullError);
    await expect(write).rejects.toMatchObject({
      code: 'StoreFull',
      sessionId: 's1',
      checkpointId: 'cp-2',
      message: expect.stringMatching(/^checkpoint cp-2 of session s1 was not stored: no space left on the device/),
    });
    expect(manifestFiles(path.join(dir, 'store'))).toEqual([expect.stringMatching(/^cp-1\.manifest/)]);
    expect(await s.list('s1')).toEqual(before);
    expect(tempFiles(dir)).toEqual([]);
    expect(sha(await readAll((await s.open('s1', 'cp-1')).stream))).toBe(sha(first));
  });

  test('a file system turned read-only is StoreFull for writes and claims; reads go on', async () => {
    const root = path.join(dir, 'store');
    const s = storeAt(root);
    const first = randomBytes(100_000);
    await s.write(cp(1), Readable.from([first]));
    const remount = spawnSync('mount', ['-o', 'remount,ro', dir], { encoding: 'utf8' });
    expect(remount.stderr).toBe('');
    await expect(s.write(cp(2, 'cp-1'), Readable.from([randomBytes(10_000)]))).rejects.toMatchObject({
      code: 'StoreFull',
      message: expect.stringContaining('the file system is read-only'),
    });
    // A new session needs directories first: Node's mkdir -p says ENOENT there, the store says why.
    await expect(s.write(cp(1, null, 's2'), Readable.from([randomBytes(10_000)]))).rejects.toMatchObject({
      code: 'StoreFull',
      message: expect.stringContaining('the file system is read-only'),
    });
    await expect(s.claim('s9', 'run-1')).rejects.toBeInstanceOf(StoreFullError);
    expect(manifestFiles(root)).toEqual([expect.stringMatching(/^cp-1\.manifest/)]);
    expect(sha(await readAll((await storeAt(root).open('s1', 'cp-1')).stream))).toBe(sha(first));
  });
});

(cannotMount ? test.skip : test)('a data key that finds no room is StoreFull, and leaves no temp file', async () => {
  const root = path.join(dir, 'store');
  const s = new ChunkedSnapshotStore({ rootDir: root, keyring });
  await s.write(cp(1), Readable.from([randomBytes(100_000)]));
  // Fill what is left, so that the next new lineage's first file (its wrapped data key) does not fit.
  const filler = path.join(dir, 'filler');
  try {
    fs.writeFileSync(filler, Buffer.alloc(4 * 1024 * 1024));
  } catch (err) {
    expect((err as NodeJS.ErrnoException).code).toBe('ENOSPC');
  }
  await expect(s.write(cp(1, null, 's2'), Readable.from([randomBytes(10_000)]))).rejects.toMatchObject({
    code: 'StoreFull',
    message: expect.stringContaining('no space left on the device'),
  });
  expect(tempFiles(dir)).toEqual([]);
  expect(fs.existsSync(path.join(root, 's2', 'keys', 'data-key.json'))).toBe(false);
  // Room again: the same write goes through.
  fs.rmSync(filler);
  await s.write(cp(1, null, 's2'), Readable.from([randomBytes(10_000)]));
  expect((await s.list('s2')).map((m) => m.checkpointId)).toEqual(['cp-1']);
});
