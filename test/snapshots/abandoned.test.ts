import { spawn, type ChildProcess } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { PassThrough, Readable } from 'node:stream';
import { setTimeout as delay } from 'node:timers/promises';
import { ChunkedSnapshotStore } from '../../src/snapshots/engine/chunked-store';
import { Keyring } from '../../src/snapshots/engine/keyring';
import { FsSnapshotStore } from '../../src/snapshots/fs-snapshot-store';
import type { CheckpointManifest, NewCheckpoint, SnapshotStore } from '../../src/snapshots/snapshot-store';
import { cp, readAll } from '../helpers/checkpoints';

/** What a writer killed mid-write leaves in the store, and what cleanAbandoned and gc do about it. Real processes. */

const REPO = path.resolve(__dirname, '../..');
const WRITER = path.join(__dirname, 'fixtures/stalled-writer.ts');
const HOUR = 60 * 60_000;
const MiB = 1024 * 1024;
const key = randomBytes(32);

let dir: string;
const children = new Set<ChildProcess>();
const live: PassThrough[] = [];

beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ds-abandoned-'));
});
afterEach(async () => {
  for (const child of children) child.kill('SIGKILL');
  children.clear();
  // A write left waiting would hold its pool context; ending its input with an error releases it.
  for (const input of live.splice(0)) input.destroy(new Error('test over'));
  await delay(10);
  fs.rmSync(dir, { recursive: true, force: true });
});

const chunked = (options: { touchIntervalMs?: number } = {}) =>
  new ChunkedSnapshotStore({ rootDir: dir, keyring: new Keyring([{ id: 'k1', key }]), ...options });

const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');

/** Every file under the store, as `session/…` paths, sorted. */
function files(): string[] {
  return fs
    .readdirSync(dir, { withFileTypes: true, recursive: true })
    .filter((e) => e.isFile())
    .map((e) => path.relative(dir, path.join(e.parentPath, e.name)))
    .sort();
}

const size = (rel: string) => fs.statSync(path.join(dir, rel)).size;
const mtime = (rel: string) => fs.statSync(path.join(dir, rel)).mtimeMs;
const temps = (rel: string) => (fs.existsSync(path.join(dir, rel)) ? fs.readdirSync(path.join(dir, rel)) : []);

/** Dates every file of the store `ms` back: what the crash left has aged, and so has everything else. */
function backdate(ms: number, only: readonly string[] = files()): void {
  const then = new Date(Date.now() - ms);
  for (const rel of only) fs.utimesSync(path.join(dir, rel), then, then);
}

async function waitFor(condition: () => boolean, what: string): Promise<void> {
  const deadline = Date.now() + 60_000;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`gave up waiting for ${what}`);
    await delay(25);
  }
}

/**
 * Runs fixtures/stalled-writer.ts: a write of `bytes` random bytes that then waits for more. Once `underWay` holds,
 * the process is killed with SIGKILL, as a worker's would be.
 */
async function killedMidWrite(
  config: { store: 'chunked' | 'fs'; sessionId: string; checkpointId: string; bytes: number },
  underWay: () => boolean,
): Promise<void> {
  const args = { rootDir: dir, ...(config.store === 'chunked' ? { keyHex: key.toString('hex') } : {}), ...config };
  const child = spawn(process.execPath, ['--import', 'tsx', WRITER, JSON.stringify(args)], {
    cwd: REPO,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.add(child);
  let stderr = '';
  let ended = false;
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => {
      ended = true;
      resolve({ code, signal });
    }),
  );
  await waitFor(() => {
    if (ended) throw new Error(`the writer exited before it was killed: ${stderr}`);
    return underWay();
  }, 'the write to be under way');
  child.kill('SIGKILL');
  expect(await exited).toEqual({ code: null, signal: 'SIGKILL' });
}

/** A write in this process that has taken `first` and waits for the rest (`finish`). */
function stalledWrite(store: SnapshotStore, checkpoint: NewCheckpoint, first: Buffer) {
  const input = new PassThrough();
  live.push(input);
  input.write(first);
  const written = store.write(checkpoint, input);
  written.catch(() => undefined); // awaited by finish
  return {
    finish: (rest: Buffer): Promise<CheckpointManifest> => {
      input.end(rest);
      return written;
    },
  };
}

describe('the chunked store', () => {
  test('a writer killed mid-write leaves a pin and a temp pack; cleanAbandoned removes them and spares a live write', async () => {
    const s = chunked();
    await s.claim('s1', 'run-1');
    const first = randomBytes(MiB);
    await s.write(cp(1), Readable.from([first]));
    const pin = 's1/pins/s1.cp-2';
    const tempPacks = () => temps('s1/packs').filter((n) => n.endsWith('.tmp'));
    await killedMidWrite(
      { store: 'chunked', sessionId: 's1', checkpointId: 'cp-2', bytes: 16 * MiB },
      () => fs.existsSync(path.join(dir, pin)) && tempPacks().length === 1 && size(`s1/packs/${tempPacks()[0]}`) > 0,
    );
    const tempPack = `s1/packs/${tempPacks()[0]}`;
    // Killed between a publish's write and its link, a writer leaves these (names as files.ts and the format-1 store
    // make them); made by hand, since no kill lands there reliably.
    const published = [
      's1/.0123456789abcdef.tmp',
      's1/keys/.fedcba9876543210.tmp',
      's1/.cp-3.data.tmp-00112233aabbccdd',
    ];
    for (const rel of published) fs.writeFileSync(path.join(dir, rel), 'half a file');
    const crashed = [pin, tempPack, ...published];
    backdate(2 * HOUR);
    const left = files();
    const bytes = crashed.reduce((n, rel) => n + size(rel), 0);

    // Another worker's write, in progress while the cleaning runs.
    const rest = randomBytes(MiB);
    const state = randomBytes(16 * MiB);
    const write = stalledWrite(s, cp(1, null, 's2'), state);
    await waitFor(() => fs.existsSync(path.join(dir, 's2/pins/s2.cp-1')) && temps('s2/packs').length === 1, 's2');
    const liveFiles = ['s2/pins/s2.cp-1', `s2/packs/${temps('s2/packs')[0]}`];

    expect(await s.cleanAbandoned({ dryRun: true })).toEqual({ tempFiles: 4, pins: 1, bytes });
    expect(files().filter((f) => f.startsWith('s1/'))).toEqual(left);
    expect(await s.cleanAbandoned()).toEqual({ tempFiles: 4, pins: 1, bytes });

    expect(files().filter((f) => f.startsWith('s1/'))).toEqual(left.filter((f) => !crashed.includes(f)));
    expect(files().filter((f) => f.startsWith('s1/'))).toEqual([
      's1/claim.json',
      's1/cp-1.manifest',
      's1/keys/data-key.json',
      expect.stringMatching(/^s1\/packs\/[0-9a-z]+-[0-9a-f]{16}-h\.pack$/),
    ]);
    for (const rel of liveFiles) expect(fs.existsSync(path.join(dir, rel))).toBe(true);
    expect(await s.cleanAbandoned()).toEqual({ tempFiles: 0, pins: 0, bytes: 0 });

    await write.finish(rest);
    expect(sha(await readAll((await s.open('s2', 'cp-1')).stream))).toBe(sha(Buffer.concat([state, rest])));
    expect(sha(await readAll((await s.open('s1', 'cp-1')).stream))).toBe(sha(first));
    expect(temps('s2/pins')).toEqual([]);
  });

  test('gc removes a dead writer’s pin and temp pack first, then frees the pack only that pin kept', async () => {
    const s = chunked();
    await s.claim('s1', 'run-1');
    const first = randomBytes(MiB);
    await s.write(cp(1), Readable.from([first]));
    const [kept] = temps('s1/packs');
    // Past 64 MiB the writer renames its first pack into place and starts a second: both stay when it is killed.
    await killedMidWrite(
      { store: 'chunked', sessionId: 's1', checkpointId: 'cp-2', bytes: 80 * MiB },
      () => temps('s1/packs').filter((n) => n.endsWith('.pack')).length === 2 && temps('s1/packs').length === 3,
    );
    const orphan = temps('s1/packs').find((n) => n.endsWith('.pack') && n !== kept)!;
    const tempPack = `s1/packs/${temps('s1/packs').find((n) => n.endsWith('.tmp'))!}`;
    const pin = 's1/pins/s1.cp-2';
    const abandoned = { tempFiles: 1, pins: 1, bytes: size(tempPack) + size(pin) };
    const removed = [{ lineage: 's1', packId: orphan.replace(/\.pack$/, ''), bytes: size(`s1/packs/${orphan}`) }];
    const before = files();

    // Two hours on: the pin, untouched for more than an hour, is a dead writer's; the pack it kept is an orphan.
    const later = Date.now() + 2 * HOUR;
    const dry = await s.gc({ dryRun: true, now: later });
    expect(dry).toMatchObject({ dryRun: true, abandoned, packsRemoved: removed, packsKept: 1 });
    expect(files()).toEqual(before);
    expect(await s.gc({ now: later })).toMatchObject({ dryRun: false, abandoned, packsRemoved: removed, packsKept: 1 });
    expect(files()).toEqual(['s1/claim.json', 's1/cp-1.manifest', 's1/keys/data-key.json', `s1/packs/${kept}`]);
    expect(sha(await readAll((await s.open('s1', 'cp-1')).stream))).toBe(sha(first));
  });

  test('a live write that stalls keeps its pin and temp pack touched: the cleaning never takes them', async () => {
    const s = chunked({ touchIntervalMs: 20 });
    const state = randomBytes(16 * MiB);
    const write = stalledWrite(s, cp(1), state);
    await waitFor(() => fs.existsSync(path.join(dir, 's1/pins/s1.cp-1')) && temps('s1/packs').length === 1, 'pin');
    const mine = ['s1/pins/s1.cp-1', `s1/packs/${temps('s1/packs')[0]}`];
    // As if the source had given nothing for two hours: the writer's touches bring both back.
    backdate(2 * HOUR, mine);
    await waitFor(() => mine.every((rel) => mtime(rel) > Date.now() - HOUR), 'the writer to touch its files');
    expect(await s.cleanAbandoned()).toEqual({ tempFiles: 0, pins: 0, bytes: 0 });
    await write.finish(Buffer.from('the end'));
    expect(sha(await readAll((await s.open('s1', 'cp-1')).stream))).toBe(
      sha(Buffer.concat([state, Buffer.from('the end')])),
    );
  });

  test('an empty pin, from a writer that predates touching, is abandoned only after a day', async () => {
    const s = chunked();
    await s.write(cp(1), Readable.from([randomBytes(100_000)]));
    fs.writeFileSync(path.join(dir, 's1/pins/s1.cp-2'), '');
    backdate(2 * HOUR, ['s1/pins/s1.cp-2']);
    expect(await s.cleanAbandoned()).toEqual({ tempFiles: 0, pins: 0, bytes: 0 });
    backdate(25 * HOUR, ['s1/pins/s1.cp-2']);
    expect(await s.cleanAbandoned()).toEqual({ tempFiles: 0, pins: 1, bytes: 0 });
    expect(temps('s1/pins')).toEqual([]);
  });

  test('an age that is not a non-negative number of milliseconds is refused, and nothing is removed', async () => {
    const s = chunked();
    fs.mkdirSync(path.join(dir, 's1'));
    fs.writeFileSync(path.join(dir, 's1/.0123456789abcdef.tmp'), 'x');
    for (const olderThanMs of [-1, Number.NaN]) {
      await expect(s.cleanAbandoned({ olderThanMs })).rejects.toThrow(
        new TypeError(`olderThanMs must be a non-negative number of milliseconds and now a time, not ${olderThanMs}`),
      );
    }
    expect(files()).toEqual(['s1/.0123456789abcdef.tmp']);
    expect(await s.cleanAbandoned({ olderThanMs: 0, now: Date.now() + 1000 })).toEqual({
      tempFiles: 1,
      pins: 0,
      bytes: 1,
    });
  });
});

describe('the format-1 store', () => {
  test('a writer killed mid-write leaves a temp data file; cleanAbandoned removes it and spares a live write', async () => {
    const s = new FsSnapshotStore(dir);
    await s.claim('s1', 'run-1');
    const first = randomBytes(MiB);
    await s.write(cp(1), Readable.from([first]));
    const tempData = () => temps('s1').filter((n) => n.startsWith('.cp-2.data.tmp-'));
    await killedMidWrite(
      { store: 'fs', sessionId: 's1', checkpointId: 'cp-2', bytes: 2 * MiB },
      () => tempData().length === 1 && size(`s1/${tempData()[0]}`) === 2 * MiB,
    );
    backdate(2 * HOUR);

    const state = randomBytes(MiB);
    const write = stalledWrite(s, cp(1, null, 's2'), state);
    await waitFor(() => temps('s2').some((n) => n.startsWith('.cp-1.data.tmp-')), 'the live write');

    expect(await s.cleanAbandoned()).toEqual({ tempFiles: 1, pins: 0, bytes: 2 * MiB });
    expect(files().filter((f) => f.startsWith('s1/'))).toEqual([
      's1/claim.json',
      's1/cp-1.data',
      's1/cp-1.manifest.json',
    ]);
    await write.finish(Buffer.from('the end'));
    expect(sha(await readAll((await s.open('s2', 'cp-1')).stream))).toBe(
      sha(Buffer.concat([state, Buffer.from('the end')])),
    );
    expect(sha(await readAll((await s.open('s1', 'cp-1')).stream))).toBe(sha(first));
  });

  test('a live write that stalls keeps its temp file touched', async () => {
    const s = new FsSnapshotStore(dir, { touchIntervalMs: 20 });
    const write = stalledWrite(s, cp(1), Buffer.from('a start'));
    await waitFor(() => temps('s1').length === 1 && size(`s1/${temps('s1')[0]}`) === 7, 'the temp file');
    const mine = `s1/${temps('s1')[0]}`;
    backdate(2 * HOUR, [mine]);
    await waitFor(() => mtime(mine) > Date.now() - HOUR, 'the writer to touch its temp file');
    expect(await s.cleanAbandoned()).toEqual({ tempFiles: 0, pins: 0, bytes: 0 });
    await write.finish(Buffer.from(', and the end'));
    expect((await readAll((await s.open('s1', 'cp-1')).stream)).toString()).toBe('a start, and the end');
  });
});
