import { createHash, randomBytes } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import * as fsp from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { setTimeout as delay } from 'node:timers/promises';
import { extract as tarExtract, pack as tarPack } from 'tar-stream';
import type { WorkspaceRuntimeSpec } from '../../src/domain/schemas';
import { ArchiveRejectedError, RuntimeFailedError, WorkspaceRuntime } from '../../src/runtimes';
import { isUnchangedRange, sourceBytes, type StateSource, type UnchangedRange } from '../../src/snapshots';
import { readAll } from '../helpers/checkpoints';

/** Counts up from the value in `count` (or 0), replacing the file atomically every 50 ms. */
const COUNTER = [
  'sh',
  '-c',
  'n=$(cat count 2>/dev/null || echo 0); while true; do n=$((n+1)); echo $n > count.tmp; mv count.tmp count; sleep 0.05; done',
];
/** Ignores SIGTERM (as does its `sleep`, which inherits the ignored disposition); `ready` once the trap is set. */
const IGNORES_TERM = ['sh', '-c', 'trap "" TERM; touch ready; while true; do sleep 0.1; done'];
const SESSION = 'session-1';

interface TarEntry {
  type: string;
  mode: number;
  mtime: Date;
  linkname: string | null;
  data: Buffer;
}

let tmp: string;
let rootDir: string;
let runtime: WorkspaceRuntime;
let nextId = 0;
const newId = (): string => `inst-${++nextId}`;
const spec = (command: string[], extra: Partial<WorkspaceRuntimeSpec> = {}): WorkspaceRuntimeSpec => ({
  kind: 'workspace',
  command,
  ...extra,
});

beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'workspace-runtime-'));
});

beforeEach(() => {
  rootDir = path.join(tmp, `root-${++nextId}`);
  // Beside the root, not in it: the tests below see in the root only what instances leave. Without pre-copy, a
  // captureState's runs are named against the stored base, which the tests below check; workspace-precopy.test.ts
  // covers the draft told first.
  runtime = new WorkspaceRuntime({
    rootDir,
    stateDir: `${rootDir}.run`,
    defaultStopGraceMs: 2_000,
    precopy: false,
  });
});

afterEach(async () => {
  await runtime.stopAll();
});

afterAll(async () => {
  await fsp.rm(tmp, { recursive: true, force: true });
});

async function untar(archive: Buffer): Promise<Map<string, TarEntry>> {
  const entries = new Map<string, TarEntry>();
  const extract = tarExtract();
  extract.end(archive);
  for await (const entry of extract) {
    const chunks: Buffer[] = [];
    for await (const chunk of entry) chunks.push(chunk as Buffer);
    const { name, type, mode, mtime, linkname } = entry.header;
    entries.set(name, { type, mode, mtime, linkname, data: Buffer.concat(chunks) });
  }
  return entries;
}

async function tarOf(
  entries: Array<{ name: string; type?: 'file' | 'symlink' | 'directory'; linkname?: string; data?: string }>,
): Promise<Buffer> {
  const pack = tarPack();
  for (const { data, ...header } of entries) pack.entry(header, data ?? '');
  pack.finalize();
  const chunks: Buffer[] = [];
  for await (const chunk of pack) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

interface Materialized {
  bytes: Buffer;
  /** Each unchanged range with where it lies in `bytes`. */
  ranges: Array<{ at: number; range: UnchangedRange }>;
}

/** Every byte of a source, each range read whole when it comes (as a store without a usable base does). */
async function materialize(source: StateSource): Promise<Materialized> {
  const chunks: Buffer[] = [];
  const ranges: Materialized['ranges'] = [];
  let at = 0;
  for await (const piece of source.pieces) {
    const bytes = isUnchangedRange(piece) ? await readAll(piece.read(0, piece.length)) : Buffer.from(piece);
    if (isUnchangedRange(piece)) {
      expect(bytes.length).toBe(piece.length);
      ranges.push({ at, range: piece });
    }
    chunks.push(bytes);
    at += bytes.length;
  }
  return { bytes: Buffer.concat(chunks), ranges };
}

/** Where each entry's record (header, content, padding) lies in an archive whose names all fit ustar. */
function recordsOf(archive: Buffer): Map<string, { start: number; end: number }> {
  const records = new Map<string, { start: number; end: number }>();
  for (let at = 0; at + 512 <= archive.length;) {
    const header = archive.subarray(at, at + 512);
    if (header.every((byte) => byte === 0)) break;
    const name = header
      .subarray(0, 100)
      .toString('utf8')
      .replace(/\0[^]*$/, '');
    const size = parseInt(header.subarray(124, 136).toString('latin1').trim(), 8);
    const end = at + 512 + Math.ceil(size / 512) * 512;
    records.set(name, { start: at, end });
    at = end;
  }
  return records;
}

/** The entries of `archive` whose records lie wholly inside an unchanged range, in archive order. */
function namesInRanges(archive: Buffer, ranges: Materialized['ranges']): string[] {
  return [...recordsOf(archive)]
    .filter(([, { start, end }]) => ranges.some(({ at, range }) => at <= start && end <= at + range.length))
    .map(([name]) => name);
}

/**
 * `expect(actual).toEqual(expected)` for archives, without jest's byte-by-byte comparison of large buffers; a
 * failure says where the bytes part.
 */
function expectSameBytes(actual: Buffer, expected: Buffer): void {
  const differsAt = actual.equals(expected) ? -1 : actual.findIndex((byte, i) => byte !== expected[i]);
  expect({ length: actual.length, differsAt }).toEqual({ length: expected.length, differsAt: -1 });
}

/** Checks each range's claim: its bytes are the base capture's bytes at its base offset. */
async function expectRangesMatchBase(ranges: Materialized['ranges'], baseBytes: Buffer): Promise<void> {
  for (const { range } of ranges) {
    const claimed = baseBytes.subarray(range.baseOffset, range.baseOffset + range.length);
    expect(claimed.length).toBe(range.length);
    expectSameBytes(await readAll(range.read(0, range.length)), claimed);
  }
}

/**
 * The next capture of an instance whose stored base is `base` (bytes `baseBytes`): the same bytes as a plain capture,
 * its ranges the base's bytes; `reread` names the records it reads rather than takes from the base, in order.
 */
async function nextCapture(
  instanceId: string,
  base: string,
  baseBytes: Buffer,
): Promise<Materialized & { reread: string[] }> {
  const state = await runtime.captureState(instanceId);
  expect(state.base).toBe(base);
  const { bytes, ranges } = await materialize(state);
  expectSameBytes(bytes, await readAll(await runtime.capture(instanceId)));
  await expectRangesMatchBase(ranges, baseBytes);
  const kept = new Set(namesInRanges(bytes, ranges));
  return { bytes, ranges, reread: [...recordsOf(bytes).keys()].filter((name) => !kept.has(name)) };
}

/**
 * Lets the file system clock move past the last change: a file changed in the same clock tick as a capture is
 * never reused by the next one.
 */
const settle = (): Promise<void> => delay(50);

async function waitFor<T>(probe: () => T | undefined | Promise<T | undefined>, timeoutMs = 10_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error('timed out waiting');
    await delay(20);
  }
}

async function readCount(dir: string): Promise<number> {
  const text = await fsp.readFile(path.join(dir, 'count'), 'utf8').catch(() => '0');
  return Number(text.trim());
}

async function exists(file: string): Promise<boolean> {
  return fsp.lstat(file).then(
    () => true,
    () => false,
  );
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ESRCH') return false;
    throw error;
  }
}

async function sha256(file: string): Promise<string> {
  const hash = createHash('sha256');
  await pipeline(createReadStream(file), hash);
  return hash.digest('hex');
}

describe('WorkspaceRuntime', () => {
  test('start writes seed files, runs the command in the workspace with its env, and logs outside it', async () => {
    const instanceId = newId();
    const info = await runtime.start({
      sessionId: SESSION,
      instanceId,
      spec: spec(['sh', '-c', 'cat sub/dir/b.txt > copy.txt; echo "$GREETING" > env.txt; echo to-the-log; sleep 30'], {
        files: { 'a.txt': 'hello', 'sub/dir/b.txt': 'world' },
        env: { GREETING: 'hi there' },
      }),
    });

    const dir = path.join(rootDir, SESSION, instanceId);
    expect(info).toMatchObject({
      instanceId,
      sessionId: SESSION,
      kind: 'workspace',
      version: '1',
      location: dir,
      output: `${dir}.log`,
      running: true,
    });
    expect(isAlive(info.pid!)).toBe(true);
    expect(await fsp.readFile(path.join(dir, 'a.txt'), 'utf8')).toBe('hello');
    await waitFor(async () => ((await exists(path.join(dir, 'env.txt'))) ? true : undefined));
    expect(await fsp.readFile(path.join(dir, 'copy.txt'), 'utf8')).toBe('world');
    expect(await fsp.readFile(path.join(dir, 'env.txt'), 'utf8')).toBe('hi there\n');
    expect(await fsp.readFile(`${dir}.log`, 'utf8')).toBe('to-the-log\n');
    expect(await runtime.describe(instanceId)).toEqual(info);
  });

  test('a counter survives capture, stop and restore into a new instance, continuing from the captured value', async () => {
    const first = await runtime.start({
      sessionId: SESSION,
      instanceId: newId(),
      spec: spec(COUNTER, { files: { 'notes.txt': 'keep me' } }),
    });
    await waitFor(async () => ((await readCount(first.location)) >= 3 ? true : undefined));

    const archive = await readAll(await runtime.capture(first.instanceId));
    const captured = await untar(archive);
    const capturedCount = Number(captured.get('count')!.data.toString().trim());
    expect(capturedCount).toBeGreaterThanOrEqual(3);
    expect(captured.get('notes.txt')!.data.toString()).toBe('keep me');

    const exit = await runtime.stop(first.instanceId);
    expect(exit).toEqual({ exitCode: null, signal: 'SIGTERM', requested: true });
    expect(isAlive(first.pid!)).toBe(false);
    expect((await runtime.describe(first.instanceId))?.running).toBe(false);

    // The files exactly as captured (a command that leaves them alone).
    const still = await runtime.restore({
      sessionId: SESSION,
      instanceId: newId(),
      spec: spec(['sleep', '30']),
      state: Readable.from([archive]),
    });
    expect(await fsp.readFile(path.join(still.location, 'count'), 'utf8')).toBe(`${capturedCount}\n`);
    const recaptured = await untar(await readAll(await runtime.capture(still.instanceId)));
    expect([...recaptured.keys()]).toEqual([...captured.keys()]);
    for (const [name, entry] of captured) expect(recaptured.get(name)).toEqual(entry);

    // The counter itself, in a fresh directory, from the same bytes.
    const second = await runtime.restore({
      sessionId: SESSION,
      instanceId: newId(),
      spec: spec(COUNTER),
      state: Readable.from([archive]),
    });
    expect(second.location).not.toBe(first.location);
    expect(second.pid).not.toBe(first.pid);
    const seen: number[] = [];
    await waitFor(async () => {
      seen.push(await readCount(second.location));
      return seen.at(-1)! >= capturedCount + 3 ? true : undefined;
    });
    expect(seen.every((n) => n >= capturedCount)).toBe(true);
    expect(await fsp.readFile(path.join(second.location, 'notes.txt'), 'utf8')).toBe('keep me');
  });

  test('captures while running are consistent and the process is frozen exactly while the stream is open', async () => {
    const info = await runtime.start({ sessionId: SESSION, instanceId: newId(), spec: spec(COUNTER) });
    await waitFor(async () => ((await readCount(info.location)) >= 2 ? true : undefined));

    let previous = 0;
    for (let i = 0; i < 5; i++) {
      const entries = await untar(await readAll(await runtime.capture(info.instanceId)));
      const text = entries.get('count')!.data.toString();
      expect(text).toMatch(/^\d+\n$/);
      expect(Number(text)).toBeGreaterThanOrEqual(previous);
      previous = Number(text);
      await delay(30);
    }

    // Not read yet: the group stays stopped, so the count does not move.
    const pending = await runtime.capture(info.instanceId);
    const frozenAt = await readCount(info.location);
    await delay(300);
    expect(await readCount(info.location)).toBe(frozenAt);
    // Two captures at once: the group resumes only when both are done.
    const concurrent = await runtime.capture(info.instanceId);
    await readAll(pending);
    await delay(300);
    expect(await readCount(info.location)).toBe(frozenAt);
    await readAll(concurrent);
    await waitFor(async () => ((await readCount(info.location)) > frozenAt ? true : undefined));

    // Destroyed before it was read: resumed all the same.
    const abandoned = await runtime.capture(info.instanceId);
    const abandonedAt = await readCount(info.location);
    abandoned.destroy();
    await waitFor(async () => ((await readCount(info.location)) > abandonedAt ? true : undefined));
  });

  test('capture and restore keep directories, modes, mtimes and symlinks inside the workspace', async () => {
    const info = await runtime.start({
      sessionId: SESSION,
      instanceId: newId(),
      spec: spec(['sleep', '30'], { files: { 'bin/run.sh': '#!/bin/sh\necho run\n', 'data/x.txt': 'x' } }),
    });
    await fsp.chmod(path.join(info.location, 'bin/run.sh'), 0o750);
    await fsp.chmod(path.join(info.location, 'data'), 0o555);
    await fsp.mkdir(path.join(info.location, 'empty'));
    await fsp.symlink('../data/x.txt', path.join(info.location, 'bin/x-link'));
    const mtime = new Date('2020-01-02T03:04:05Z');
    await fsp.utimes(path.join(info.location, 'data/x.txt'), mtime, mtime);

    const archive = await readAll(await runtime.capture(info.instanceId));
    const entries = await untar(archive);
    expect([...entries.keys()]).toEqual(['bin', 'bin/run.sh', 'bin/x-link', 'data', 'data/x.txt', 'empty']);
    expect(entries.get('bin/x-link')).toMatchObject({ type: 'symlink', linkname: '../data/x.txt' });

    const restored = await runtime.restore({
      sessionId: SESSION,
      instanceId: newId(),
      spec: spec(['sleep', '30']),
      state: Readable.from([archive]),
    });
    const at = (name: string): string => path.join(restored.location, name);
    expect((await fsp.stat(at('bin/run.sh'))).mode & 0o777).toBe(0o750);
    expect((await fsp.stat(at('data'))).mode & 0o777).toBe(0o555);
    expect((await fsp.stat(at('empty'))).isDirectory()).toBe(true);
    expect(await fsp.readlink(at('bin/x-link'))).toBe('../data/x.txt');
    expect(await fsp.readFile(at('bin/x-link'), 'utf8')).toBe('x');
    expect((await fsp.stat(at('data/x.txt'))).mtime).toEqual(mtime);
    // Capture is deterministic: the same tree gives the same bytes.
    expect(await readAll(await runtime.capture(restored.instanceId))).toEqual(archive);
    // Read-only directories do not keep dispose from removing the workspace.
    await runtime.dispose(info.instanceId);
    await runtime.dispose(restored.instanceId);
    expect(await exists(info.location)).toBe(false);
    expect(await exists(restored.location)).toBe(false);
  });

  test('capture fails on a symlink that points outside the workspace, which restore would refuse', async () => {
    const info = await runtime.start({ sessionId: SESSION, instanceId: newId(), spec: spec(['sleep', '30']) });
    await fsp.symlink('/etc/hostname', path.join(info.location, 'outside'));
    await expect(readAll(await runtime.capture(info.instanceId))).rejects.toThrow(RuntimeFailedError);
    // Resumed after the failed capture.
    expect((await runtime.describe(info.instanceId))?.running).toBe(true);
  });

  test('stop escalates to SIGKILL when the command ignores SIGTERM', async () => {
    const info = await runtime.start({
      sessionId: SESSION,
      instanceId: newId(),
      spec: spec(IGNORES_TERM),
    });
    await waitFor(async () => ((await exists(path.join(info.location, 'ready'))) ? true : undefined));
    const started = Date.now();
    const exit = await runtime.stop(info.instanceId, { graceMs: 300 });
    expect(Date.now() - started).toBeGreaterThanOrEqual(290);
    expect(exit).toEqual({ exitCode: null, signal: 'SIGKILL', requested: true });
    expect(isAlive(info.pid!)).toBe(false);
    expect(await runtime.waitForExit(info.instanceId)).toEqual(exit);
    expect(await runtime.stop(info.instanceId)).toEqual(exit);
  });

  test('stop uses the grace period from the spec when the call gives none', async () => {
    const info = await runtime.start({
      sessionId: SESSION,
      instanceId: newId(),
      spec: spec(IGNORES_TERM, { stopGraceMs: 200 }),
    });
    await waitFor(async () => ((await exists(path.join(info.location, 'ready'))) ? true : undefined));
    const started = Date.now();
    expect(await runtime.stop(info.instanceId)).toMatchObject({ signal: 'SIGKILL' });
    expect(Date.now() - started).toBeLessThan(1_500);
  });

  test('a program that does not exist fails with RuntimeFailedError naming it, leaving nothing behind', async () => {
    const instanceId = newId();
    const failure = runtime.start({ sessionId: SESSION, instanceId, spec: spec(['no-such-program-xyz', '--flag']) });
    await expect(failure).rejects.toThrow(RuntimeFailedError);
    await expect(failure).rejects.toThrow('command not found: no-such-program-xyz');
    expect(await runtime.describe(instanceId)).toBeUndefined();
    // Not even the session's directory: it was made for this start alone.
    expect(await fsp.readdir(rootDir)).toEqual([]);
  });

  test('a program that cannot be executed fails with "permission denied", leaving nothing behind', async () => {
    const program = path.join(tmp, `not-executable-${newId()}.sh`);
    await fsp.writeFile(program, '#!/bin/sh\nsleep 30\n', { mode: 0o644 });
    const failure = runtime.start({ sessionId: SESSION, instanceId: newId(), spec: spec([program]) });
    await expect(failure).rejects.toThrow(RuntimeFailedError);
    await expect(failure).rejects.toThrow(`permission denied: ${program} cannot be run`);
    expect(await fsp.readdir(rootDir)).toEqual([]);
  });

  test('a restore whose program does not exist leaves nothing behind', async () => {
    const failure = runtime.restore({
      sessionId: SESSION,
      instanceId: newId(),
      spec: spec(['no-such-program-xyz']),
      state: Readable.from([await tarOf([{ name: 'a.txt', data: 'a' }])]),
    });
    await expect(failure).rejects.toThrow('command not found: no-such-program-xyz');
    expect(await fsp.readdir(rootDir)).toEqual([]);
  });

  test('disposing the last instance of a session removes the session directory, not one still in use', async () => {
    const first = await runtime.start({ sessionId: SESSION, instanceId: newId(), spec: spec(['sleep', '30']) });
    const second = await runtime.start({ sessionId: SESSION, instanceId: newId(), spec: spec(['sleep', '30']) });
    await runtime.dispose(first.instanceId);
    expect((await fsp.readdir(path.join(rootDir, SESSION))).sort()).toEqual([
      second.instanceId,
      `${second.instanceId}.log`,
    ]);
    await runtime.dispose(second.instanceId);
    expect(await fsp.readdir(rootDir)).toEqual([]);
  });

  test('start refuses ids that are not path-safe', async () => {
    await expect(runtime.start({ sessionId: '..', instanceId: newId(), spec: spec(['true']) })).rejects.toThrow(
      RuntimeFailedError,
    );
    await expect(runtime.start({ sessionId: SESSION, instanceId: 'a/b', spec: spec(['true']) })).rejects.toThrow(
      RuntimeFailedError,
    );
  });

  test.each([
    ['before the end of the archive', 0.5],
    ['after every byte but before the end (a digest check)', 1],
  ])(
    'restore from a state stream that fails %s rejects with that error, removes the directory, starts nothing',
    async (_, fraction) => {
      class DigestMismatchError extends Error {}
      const marker = path.join(tmp, `started-${newId()}`);
      const archive = await tarOf([
        { name: 'big.txt', data: 'x'.repeat(100_000) },
        { name: 'small.txt', data: 'y' },
      ]);
      const error = new DigestMismatchError('digest mismatch');
      const state = new Readable({ read() {} });
      state.push(archive.subarray(0, Math.floor(archive.length * fraction)));
      setTimeout(() => state.destroy(error), 50);

      const instanceId = newId();
      const restoring = runtime.restore({
        sessionId: SESSION,
        instanceId,
        spec: spec(['sh', '-c', `touch ${marker}; sleep 30`]),
        state,
        checkpointId: 'cp-1',
      });
      await expect(restoring).rejects.toBe(error);
      expect(await runtime.describe(instanceId)).toBeUndefined();
      expect(await exists(path.join(rootDir, SESSION, instanceId))).toBe(false);
      await delay(200);
      expect(await exists(marker)).toBe(false);
    },
  );

  test.each([
    [
      'a ".." path',
      [
        { name: 'ok.txt', data: 'ok' },
        { name: '../evil', data: 'evil' },
      ],
    ],
    ['a nested ".." path', [{ name: 'sub/../../evil', data: 'evil' }]],
    ['an absolute path', [{ name: '/tmp/evil-absolute', data: 'evil' }]],
    ['a symlink out of the workspace', [{ name: 'link', type: 'symlink' as const, linkname: '../../evil' }]],
    ['an absolute symlink', [{ name: 'link', type: 'symlink' as const, linkname: '/etc' }]],
  ])('restore rejects an archive with %s and writes nothing', async (_, entries) => {
    const instanceId = newId();
    const restoring = runtime.restore({
      sessionId: SESSION,
      instanceId,
      spec: spec(['sleep', '30']),
      state: Readable.from([await tarOf(entries)]),
    });
    await expect(restoring).rejects.toThrow(ArchiveRejectedError);
    expect(await runtime.describe(instanceId)).toBeUndefined();
    expect(await fsp.readdir(rootDir)).toEqual([]);
    expect(await exists(path.join(rootDir, 'evil'))).toBe(false);
    expect(await exists('/tmp/evil-absolute')).toBe(false);
  });

  test('a tree of many small files restores exactly: contents, modes, mtimes, a read-only directory sealed last', async () => {
    const info = await runtime.start({ sessionId: SESSION, instanceId: newId(), spec: spec(['sleep', '60']) });
    for (let d = 0; d < 12; d++) {
      const dir = path.join(info.location, `dir-${d}`, 'sub');
      await fsp.mkdir(dir, { recursive: true });
      for (let f = 0; f < 30; f++) {
        const file = path.join(dir, `f-${f}.txt`);
        await fsp.writeFile(file, randomBytes((d * 30 + f) * 37));
        await fsp.chmod(file, f % 3 === 0 ? 0o444 : 0o640);
        await fsp.utimes(file, new Date(1_600_000_000_000 + f * 1000), new Date(1_600_000_000_000 + f * 1000));
      }
    }
    await fsp.writeFile(path.join(info.location, 'big.bin'), randomBytes(3 * 1024 * 1024 + 5));
    await fsp.chmod(path.join(info.location, 'dir-3'), 0o555);
    const archive = await readAll(await runtime.capture(info.instanceId));

    const restored = await runtime.restore({
      sessionId: SESSION,
      instanceId: newId(),
      spec: spec(['sleep', '60']),
      state: Readable.from([archive]),
    });
    expect((await fsp.stat(path.join(restored.location, 'dir-3'))).mode & 0o777).toBe(0o555);
    // (Buffer.equals: toEqual walks megabytes byte by byte.)
    expect((await readAll(await runtime.capture(restored.instanceId))).equals(archive)).toBe(true);
  }, 60_000);

  test('an archive that names a file twice restores the later one, as tar does', async () => {
    const restored = await runtime.restore({
      sessionId: SESSION,
      instanceId: newId(),
      spec: spec(['sleep', '30']),
      state: Readable.from([
        await tarOf([
          { name: 'twice.txt', data: 'first, and longer than the second' },
          { name: 'other.txt', data: 'other' },
          { name: 'twice.txt', data: 'second' },
        ]),
      ]),
    });
    expect(await fsp.readFile(path.join(restored.location, 'twice.txt'), 'utf8')).toBe('second');
  });

  test('restore of an archive with a file under a file fails and leaves nothing behind', async () => {
    const instanceId = newId();
    const restoring = runtime.restore({
      sessionId: SESSION,
      instanceId,
      spec: spec(['sleep', '30']),
      state: Readable.from([
        await tarOf([
          { name: 'a', data: 'a file' },
          ...Array.from({ length: 40 }, (_, i) => ({ name: `z-${i}.txt`, data: 'z'.repeat(i) })),
          { name: 'a/b', data: 'under a file' },
        ]),
      ]),
    });
    await expect(restoring).rejects.toThrow(/ENOTDIR|EEXIST/);
    expect(await runtime.describe(instanceId)).toBeUndefined();
    expect(await fsp.readdir(rootDir)).toEqual([]);
  });

  test('dispose stops a running instance and removes its directory and log', async () => {
    const info = await runtime.start({ sessionId: SESSION, instanceId: newId(), spec: spec(['sleep', '30']) });
    await runtime.dispose(info.instanceId);
    expect(isAlive(info.pid!)).toBe(false);
    expect(await exists(info.location)).toBe(false);
    expect(await exists(`${info.location}.log`)).toBe(false);
    expect(await runtime.describe(info.instanceId)).toBeUndefined();
  });

  test('children the command started are stopped with it', async () => {
    const info = await runtime.start({
      sessionId: SESSION,
      instanceId: newId(),
      spec: spec(['sh', '-c', 'sh -c "trap \\"\\" TERM; echo \\$\\$ > child.pid; exec sleep 30" & wait']),
    });
    const childPid = await waitFor(async () => {
      const text = await fsp.readFile(path.join(info.location, 'child.pid'), 'utf8').catch(() => '');
      return text.endsWith('\n') ? Number(text) : undefined;
    });
    await runtime.stop(info.instanceId, { graceMs: 5_000 });
    // The leader died of SIGTERM at once; the child ignoring it is killed with the group, not left behind.
    await waitFor(() => (isAlive(childPid) ? undefined : true), 2_000);
  });

  test('a ~50 MB workspace round-trips byte-exact through a streamed capture', async () => {
    const info = await runtime.start({ sessionId: SESSION, instanceId: newId(), spec: spec(['sleep', '60']) });
    const big = path.join(info.location, 'big.bin');
    function* randomChunks(): Generator<Buffer> {
      for (let i = 0; i < 50; i++) yield randomBytes(1024 * 1024 + 7);
    }
    await pipeline(Readable.from(randomChunks()), createWriteStream(big));

    const tarFile = path.join(tmp, `${info.instanceId}.tar`);
    await pipeline(await runtime.capture(info.instanceId), createWriteStream(tarFile));
    const restored = await runtime.restore({
      sessionId: SESSION,
      instanceId: newId(),
      spec: spec(['sleep', '60']),
      state: createReadStream(tarFile),
    });
    expect(await sha256(path.join(restored.location, 'big.bin'))).toBe(await sha256(big));
  }, 60_000);

  test('captureState without a stored capture has no base, gives the bytes of capture, and restores the tree', async () => {
    const longName = `deep/${'n'.repeat(120)}.txt`;
    const info = await runtime.start({
      sessionId: SESSION,
      instanceId: newId(),
      spec: spec(['sleep', '30'], {
        files: { 'a.txt': 'a', [longName]: 'long', 'héllo wörld.txt': 'unicode', empty: '' },
      }),
    });
    await fsp.chmod(path.join(info.location, 'a.txt'), 0o600);
    await fsp.symlink('../a.txt', path.join(info.location, 'deep/link'));

    const state = await runtime.captureState(info.instanceId);
    expect(state.base).toBeNull();
    const bytes = await readAll(sourceBytes(state));
    expect(bytes).toEqual(await readAll(await runtime.capture(info.instanceId)));

    const restored = await runtime.restore({
      sessionId: SESSION,
      instanceId: newId(),
      spec: spec(['sleep', '30']),
      state: Readable.from([bytes]),
    });
    expect(await fsp.readFile(path.join(restored.location, longName), 'utf8')).toBe('long');
    expect(await fsp.readFile(path.join(restored.location, 'héllo wörld.txt'), 'utf8')).toBe('unicode');
    expect(await fsp.readlink(path.join(restored.location, 'deep/link'))).toBe('../a.txt');
    expect((await fsp.stat(path.join(restored.location, 'a.txt'))).mode & 0o777).toBe(0o600);
    // The same tree: the same bytes, mtimes and modes included.
    expect(await readAll(await runtime.capture(restored.instanceId))).toEqual(bytes);
  });

  test('after a stored capture, captureState names the records that did not change as ranges of it', async () => {
    const files = Object.fromEntries(
      Array.from({ length: 200 }, (_, i) => [`src/f${String(i).padStart(3, '0')}.txt`, `line ${i}\n`.repeat(i % 9)]),
    );
    const info = await runtime.start({
      sessionId: SESSION,
      instanceId: newId(),
      spec: spec(['sleep', '30'], { files: { ...files, 'top.txt': 'top' } }),
    });
    // Tar holds whole seconds: from an older mtime, the changes below surely change the directory's header.
    const longAgo = new Date('2020-01-01T00:00:00Z');
    await fsp.utimes(path.join(info.location, 'src'), longAgo, longAgo);
    await settle();
    const first = await runtime.captureState(info.instanceId);
    const firstBytes = await readAll(sourceBytes(first));
    first.stored('cp-1');

    await fsp.writeFile(path.join(info.location, 'src/f010.txt'), 'changed, and longer than it was');
    await fsp.writeFile(path.join(info.location, 'src/new.txt'), 'new');
    await fsp.rm(path.join(info.location, 'src/f020.txt'));

    const { bytes, ranges, reread } = await nextCapture(info.instanceId, 'cp-1', firstBytes);

    // Everything but the directory whose entries changed (its mtime did), the changed file and the new one.
    expect(reread).toEqual(['src', 'src/f010.txt', 'src/new.txt']);
    // Runs are as long as the base allows: split only where a record changed, was removed or was added.
    expect(ranges).toHaveLength(4);
    const unchangedBytes = ranges.reduce((sum, { range }) => sum + range.length, 0);
    expect(unchangedBytes).toBeGreaterThan(0.9 * bytes.length);
    // Any part of a range, as the store reads the edges it chunks again.
    const longest = ranges.map(({ range }) => range).sort((a, b) => b.length - a.length)[0]!;
    for (const [start, end] of [
      [0, 1],
      [511, 513],
      [700, 5_000],
      [longest.length - 1, longest.length],
      [100, longest.length - 100],
      [7, 7],
    ] as const) {
      const at = longest.baseOffset;
      expectSameBytes(await readAll(longest.read(start, end)), firstBytes.subarray(at + start, at + end));
    }
    await expect(readAll(longest.read(0, longest.length + 1))).rejects.toThrow(RangeError);
  });

  test('a file rewritten with its size and its mtime set back is read again: its ctime changed', async () => {
    const info = await runtime.start({
      sessionId: SESSION,
      instanceId: newId(),
      spec: spec(['sleep', '30'], { files: { 'a.txt': 'aaaa', 'b.txt': 'bbbb' } }),
    });
    const mtime = new Date('2021-05-06T07:08:09Z');
    await fsp.utimes(path.join(info.location, 'a.txt'), mtime, mtime);
    await settle();
    const first = await runtime.captureState(info.instanceId);
    const firstBytes = await readAll(sourceBytes(first));
    first.stored('cp-1');

    await fsp.writeFile(path.join(info.location, 'a.txt'), 'AAAA');
    await fsp.utimes(path.join(info.location, 'a.txt'), mtime, mtime);

    const second = await runtime.captureState(info.instanceId);
    const { bytes, ranges } = await materialize(second);
    await expectRangesMatchBase(ranges, firstBytes);
    expect(namesInRanges(bytes, ranges)).toEqual(['b.txt']);
    // The header is the same as before, byte for byte: only the ctime tells the change.
    const before = recordsOf(firstBytes).get('a.txt')!;
    const after = recordsOf(bytes).get('a.txt')!;
    expect(bytes.subarray(after.start, after.start + 512)).toEqual(
      firstBytes.subarray(before.start, before.start + 512),
    );
    expect((await untar(bytes)).get('a.txt')!.data.toString()).toBe('AAAA');
  });

  test('a capture that is not stored leaves the base where it was; stop drops it', async () => {
    const info = await runtime.start({
      sessionId: SESSION,
      instanceId: newId(),
      spec: spec(['sleep', '30'], { files: { 'm.txt': 'm', 'n.txt': 'n', 'o.txt': 'o' } }),
    });
    await settle();
    const first = await runtime.captureState(info.instanceId);
    const firstBytes = await readAll(sourceBytes(first));
    first.stored('cp-1');

    // Sorted first, so every record of the captures below lies elsewhere than in cp-1.
    await fsp.writeFile(path.join(info.location, 'a.txt'), 'shifts the others');
    await settle();
    const read = await runtime.captureState(info.instanceId);
    expect(read.base).toBe('cp-1');
    await readAll(sourceBytes(read));
    const abandoned = await runtime.captureState(info.instanceId);
    abandoned.close();
    // Storing needs every piece produced: a capture closed early cannot become a base.
    expect(() => abandoned.stored('cp-x')).toThrow(/all produced/);

    const third = await runtime.captureState(info.instanceId);
    expect(third.base).toBe('cp-1');
    const { bytes, ranges } = await materialize(third);
    await expectRangesMatchBase(ranges, firstBytes);
    expect(namesInRanges(bytes, ranges)).toEqual(['m.txt', 'n.txt', 'o.txt']);

    third.stored('cp-3');
    expect((await runtime.captureState(info.instanceId)).base).toBe('cp-3');
    await runtime.stop(info.instanceId);
    const afterStop = await runtime.captureState(info.instanceId);
    expect(afterStop.base).toBeNull();
    afterStop.close();
  });

  test('reading an unchanged range fails when a file in it changed since the walk', async () => {
    const info = await runtime.start({
      sessionId: SESSION,
      instanceId: newId(),
      spec: spec(['sleep', '30'], { files: { 'a.txt': 'aaaa', 'b.txt': 'bbbb' } }),
    });
    await settle();
    const first = await runtime.captureState(info.instanceId);
    await readAll(sourceBytes(first));
    first.stored('cp-1');

    const second = await runtime.captureState(info.instanceId);
    const ranges: UnchangedRange[] = [];
    for await (const piece of second.pieces) if (isUnchangedRange(piece)) ranges.push(piece);
    expect(ranges).toHaveLength(1);
    const [range] = ranges as [UnchangedRange];
    await fsp.writeFile(path.join(info.location, 'b.txt'), 'bb');
    await expect(readAll(range.read(0, range.length))).rejects.toThrow(/b\.txt changed during capture/);
    // The parts without content still read: the headers are all the run claims there.
    await expect(readAll(range.read(0, 512))).resolves.toHaveLength(512);
  });

  test('closing a captureState without reading it resumes the process, once per capture', async () => {
    const info = await runtime.start({ sessionId: SESSION, instanceId: newId(), spec: spec(COUNTER) });
    await waitFor(async () => ((await readCount(info.location)) >= 2 ? true : undefined));

    const unread = await runtime.captureState(info.instanceId);
    const frozenAt = await readCount(info.location);
    const concurrent = await runtime.captureState(info.instanceId);
    await delay(300);
    expect(await readCount(info.location)).toBe(frozenAt);
    // Closing one capture twice does not count as the other's close.
    unread.close();
    unread.close();
    await delay(300);
    expect(await readCount(info.location)).toBe(frozenAt);
    concurrent.close();
    await waitFor(async () => ((await readCount(info.location)) > frozenAt ? true : undefined));

    // Read to the end: resumed as well.
    const read = await runtime.captureState(info.instanceId);
    const readAt = await readCount(info.location);
    await readAll(sourceBytes(read));
    await waitFor(async () => ((await readCount(info.location)) > readAt ? true : undefined));
  });

  describe('restore with a checkpoint id', () => {
    /** Restores `archive` into a new instance running `command`, as checkpoint `checkpointId`. */
    const restoreArchive = (archive: Buffer, checkpointId?: string, command = ['sleep', '30']) =>
      runtime.restore({
        sessionId: SESSION,
        instanceId: newId(),
        spec: spec(command),
        state: Readable.from([archive]),
        ...(checkpointId === undefined ? {} : { checkpointId }),
      });

    /** The bytes of a captureState of a new instance holding `files`. */
    async function captureOf(
      files: Record<string, string>,
      prepare?: (dir: string) => Promise<unknown>,
    ): Promise<Buffer> {
      const info = await runtime.start({
        sessionId: SESSION,
        instanceId: newId(),
        spec: spec(['sleep', '30'], { files }),
      });
      await prepare?.(info.location);
      return readAll(sourceBytes(await runtime.captureState(info.instanceId)));
    }

    test('makes the checkpoint the base: the next captureState names what is still as restored as ranges of it', async () => {
      const longName = `deep/${'n'.repeat(120)}.txt`;
      const files = Object.fromEntries(
        Array.from({ length: 50 }, (_, i) => [`f${String(i).padStart(2, '0')}.txt`, `file ${i}\n`.repeat(i * 7)]),
      );
      const archive = await captureOf(
        { ...files, 'sub/inner.txt': 'inner', empty: '', [longName]: 'long' },
        async (dir) => {
          await fsp.symlink('../f00.txt', path.join(dir, 'sub/link'));
          await fsp.chmod(path.join(dir, 'f01.txt'), 0o640);
          await fsp.chmod(path.join(dir, 'sub'), 0o750);
          const longAgo = new Date('2020-01-01T00:00:00Z');
          await fsp.lutimes(path.join(dir, 'sub/link'), longAgo, longAgo);
          await fsp.utimes(path.join(dir, 'sub'), longAgo, longAgo);
        },
      );
      const restored = await restoreArchive(archive, 'cp-1');
      await settle();
      await fsp.writeFile(path.join(restored.location, 'f10.txt'), 'changed');
      await fsp.writeFile(path.join(restored.location, 'zz-new.txt'), 'new');

      const { bytes, ranges, reread } = await nextCapture(restored.instanceId, 'cp-1', archive);
      // Every record but the changed file and the new one, the pax record of the long name, the subdirectory, its
      // symlink and the trailer included.
      expect([...recordsOf(bytes).keys()]).toEqual(expect.arrayContaining(['PaxHeader', 'empty', 'sub', 'sub/link']));
      expect(reread).toEqual(['f10.txt', 'zz-new.txt']);
      expect(ranges).toHaveLength(3);
      expect(ranges.at(-1)!.range).toMatchObject({ baseOffset: archive.length - 1024, length: 1024 });
      const unchangedBytes = ranges.reduce((sum, { range }) => sum + range.length, 0);
      expect(unchangedBytes).toBeGreaterThan(0.9 * bytes.length);
    });

    /** Sets the checksum of the header at `at` for its bytes as they are now, in the form the encoder writes it. */
    function fixChecksum(archive: Buffer, at: number): void {
      const header = archive.subarray(at, at + 512);
      header.fill(0x20, 148, 156);
      const sum = header.reduce((total, byte) => total + byte, 0);
      header.write(`${sum.toString(8).padStart(6, '0')} \0`, 148, 'latin1');
    }

    // Each change keeps the tree tar-stream extracts; the layout it is made against is checked first.
    test.each<[string, string | null, (archive: Buffer) => Buffer]>([
      ['as captured', 'cp-1', (archive) => archive],
      [
        'with a header field the encoder never writes (a uid)',
        null,
        (archive) => {
          const changed = Buffer.from(archive);
          changed.write('000007 ', 1024 + 108, 'latin1');
          fixChecksum(changed, 1024);
          return changed;
        },
      ],
      [
        "with a byte in a file's padding that is not zero",
        null,
        (archive) => {
          const changed = Buffer.from(archive);
          changed[512 + 100] = 0x20;
          return changed;
        },
      ],
      [
        'with a zero block between two entries',
        null,
        (archive) => Buffer.concat([archive.subarray(0, 1024), Buffer.alloc(512), archive.subarray(1024)]),
      ],
      ['with a third zero block at the end', null, (archive) => Buffer.concat([archive, Buffer.alloc(512)])],
      ['with the trailer cut to one zero block', null, (archive) => archive.subarray(0, archive.length - 512)],
    ])('of a capture %s restores the tree; the next base is %s', async (_, base, change) => {
      const archive = await captureOf({ 'a.txt': 'a', 'b/c.txt': 'c'.repeat(600) });
      expect([...recordsOf(archive)]).toEqual([
        ['a.txt', { start: 0, end: 1024 }],
        ['b', { start: 1024, end: 1536 }],
        ['b/c.txt', { start: 1536, end: 3072 }],
      ]);
      expect(archive.length).toBe(4096);
      const recomputed = Buffer.from(archive);
      fixChecksum(recomputed, 1024);
      expectSameBytes(recomputed, archive);
      const restored = await restoreArchive(change(archive), 'cp-1');
      expect(await fsp.readFile(path.join(restored.location, 'a.txt'), 'utf8')).toBe('a');
      expect(await fsp.readFile(path.join(restored.location, 'b/c.txt'), 'utf8')).toBe('c'.repeat(600));
      // The tree itself is as captured whatever the change: only the index can tell.
      expectSameBytes(await readAll(await runtime.capture(restored.instanceId)), archive);
      const next = await runtime.captureState(restored.instanceId);
      expect(next.base).toBe(base);
      const { ranges } = await materialize(next);
      await expectRangesMatchBase(ranges, change(archive));
      expect(ranges.length > 0).toBe(base !== null);
    });

    test("of an archive tar-stream's pack wrote (its headers differ from a capture's) leaves no base", async () => {
      const longName = `${'n'.repeat(120)}.txt`;
      const archive = await tarOf([
        { name: 'short.txt', data: 'short' },
        { name: longName, data: 'long' },
      ]);
      const restored = await restoreArchive(archive, 'cp-1');
      expect(await fsp.readFile(path.join(restored.location, longName), 'utf8')).toBe('long');
      const next = await runtime.captureState(restored.instanceId);
      expect(next.base).toBeNull();
      next.close();
    });

    test('files rewritten right after restore, by the command or anyone, same size and mtime, are not named unchanged', async () => {
      const mtime = new Date('2021-05-06T07:08:09Z');
      const archive = await captureOf({ 'a.txt': 'aaaa', 'b.txt': 'bbbb', 'p.txt': 'pppp', 'q.txt': 'qqqq' }, (dir) =>
        Promise.all(['a.txt', 'b.txt', 'p.txt', 'q.txt'].map((name) => fsp.utimes(path.join(dir, name), mtime, mtime))),
      );
      // The command rewrites p.txt the moment it runs, and gives it q.txt's times (the same as p.txt's were).
      const restored = await restoreArchive(archive, 'cp-1', [
        'sh',
        '-c',
        'printf PPPP > p.txt; touch -r q.txt p.txt; touch done; exec sleep 30',
      ]);
      await fsp.writeFile(path.join(restored.location, 'a.txt'), 'AAAA');
      await fsp.utimes(path.join(restored.location, 'a.txt'), mtime, mtime);
      await waitFor(async () => ((await exists(path.join(restored.location, 'done'))) ? true : undefined));

      const next = await runtime.captureState(restored.instanceId);
      expect(next.base).toBe('cp-1');
      const { bytes, ranges } = await materialize(next);
      await expectRangesMatchBase(ranges, archive);
      expect(namesInRanges(bytes, ranges)).toEqual(['b.txt', 'q.txt']);
      // Their headers are as restored, byte for byte: only the ctime tells the change.
      for (const name of ['a.txt', 'p.txt']) {
        const before = recordsOf(archive).get(name)!;
        const after = recordsOf(bytes).get(name)!;
        expect(bytes.subarray(after.start, after.start + 512)).toEqual(
          archive.subarray(before.start, before.start + 512),
        );
      }
      const entries = await untar(bytes);
      expect(entries.get('a.txt')!.data.toString()).toBe('AAAA');
      expect(entries.get('p.txt')!.data.toString()).toBe('PPPP');
    });
  });
});
