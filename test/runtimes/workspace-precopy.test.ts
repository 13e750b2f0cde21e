/**
 * Pre-copy capture: the workspace is read while its command runs (the draft), then frozen and captured against the
 * draft. The checkpoint must be the tree exactly as it was at the freeze, whatever changed while the draft was read.
 */
import { randomBytes } from 'node:crypto';
import * as fsp from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { WorkspaceRuntime, type CapturedState } from '../../src/runtimes';
import type { WorkspaceInstance } from '../../src/runtimes/workspace/process-group';
import { ChunkedSnapshotStore, isUnchangedRange, sourceBytes, type UnchangedRange } from '../../src/snapshots';
import { readAll } from '../helpers/checkpoints';
import { eventually } from '../helpers/temporal';

/** What a tree holds, by path: kind, permission bits, whole-second mtime and content (or link target). */
type Tree = Map<string, string>;

async function treeOf(root: string): Promise<Tree> {
  const tree: Tree = new Map();
  const walk = async (rel: string): Promise<void> => {
    for (const name of (await fsp.readdir(path.join(root, rel))).sort()) {
      const relPath = rel === '' ? name : `${rel}/${name}`;
      const full = path.join(root, relPath);
      const stats = await fsp.lstat(full);
      const common = `${(stats.mode & 0o7777).toString(8)} ${Math.floor(stats.mtimeMs / 1000)}`;
      if (stats.isDirectory()) {
        tree.set(relPath, `dir ${common}`);
        await walk(relPath);
      } else if (stats.isFile()) {
        tree.set(relPath, `file ${common} ${(await fsp.readFile(full)).toString('base64')}`);
      } else if (stats.isSymbolicLink()) {
        tree.set(relPath, `link ${common} ${await fsp.readlink(full)}`);
      }
    }
  };
  await walk('');
  return tree;
}

/** The paths where two trees differ, with what each holds there (content cut short): empty when equal. */
function differences(actual: Tree, expected: Tree): string[] {
  const out: string[] = [];
  for (const name of new Set([...actual.keys(), ...expected.keys()])) {
    const a = actual.get(name);
    const e = expected.get(name);
    if (a !== e) out.push(`${name}: ${a?.slice(0, 60) ?? 'missing'} ≠ ${e?.slice(0, 60) ?? 'missing'}`);
  }
  return out;
}

/**
 * The runtime with a look at the tree at the very moment of each capture's freeze (every process of the group
 * stopped), and a hook that runs just before it freezes.
 */
class WatchedRuntime extends WorkspaceRuntime {
  atFreeze: Tree[] = [];
  beforeFreeze: (dir: string) => Promise<void> = async () => undefined;
  thawed = 0;

  protected override async freezeForCapture(instance: WorkspaceInstance): Promise<() => void> {
    await this.beforeFreeze(instance.dir);
    const thaw = await super.freezeForCapture(instance);
    this.atFreeze.push(await treeOf(instance.dir));
    let thawed = false;
    return () => {
      if (!thawed) this.thawed++;
      thawed = true;
      thaw();
    };
  }
}

/** Keeps changing the tree: appends, rewrites in place and by truncation, renames over, makes and removes dirs. */
const WRITER = [
  'sh',
  '-c',
  [
    'i=0',
    'while true; do',
    '  i=$((i+1))',
    '  echo "line $i" >> log.txt',
    '  head -c $((65536 + i % 7 * 1000)) /dev/urandom > "churn/r$((i % 4)).bin"',
    '  dd if=/dev/urandom of=big.bin bs=65536 count=4 seek=$((i % 120)) conv=notrunc 2>/dev/null',
    '  printf "%s" "$i" > count.tmp && mv count.tmp count',
    '  mkdir -p "d$((i % 3))" && echo "$i" > "d$((i % 3))/f" && rm -rf "d$(((i + 1) % 3))"',
    '  ln -sfn "churn/r$((i % 4)).bin" latest',
    '  sleep 0.005',
    'done',
  ].join('\n'),
];

let tmp: string;
let runtime: WatchedRuntime;
let store: ChunkedSnapshotStore;
let nextId = 0;

beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'workspace-precopy-'));
});

beforeEach(() => {
  const rootDir = path.join(tmp, `root-${++nextId}`);
  runtime = new WatchedRuntime({ rootDir, stateDir: `${rootDir}.run`, defaultStopGraceMs: 2_000 });
  store = new ChunkedSnapshotStore({ rootDir: path.join(tmp, `store-${nextId}`), keyring: null });
});

afterEach(async () => {
  await runtime.stopAll();
});

afterAll(async () => {
  await fsp.rm(tmp, { recursive: true, force: true });
});

const SESSION = 'session-1';
const spec = (command: string[]) => ({ kind: 'workspace' as const, command });

/** `state` with `during` run after each piece of its draft the store takes: changes while the draft is read. */
function changingDuringDraft(state: CapturedState, during: (piece: number) => Promise<void>): CapturedState {
  const draft = state.precopy!;
  return {
    ...state,
    stored: (checkpointId) => state.stored(checkpointId),
    close: () => state.close(),
    precopy: (async function* () {
      let piece = 0;
      for await (const p of draft) {
        yield p;
        await during(piece++);
      }
    })(),
  };
}

/**
 * 4 KiB of `file` overwritten (at `at`, else in the middle), its size and mtime as they were: the chunks around the change are new,
 * the others the same as before, so a capture that took the file as unchanged would restore the old bytes there.
 */
async function rewriteAt(file: string, at?: number): Promise<void> {
  const { mtime, size } = await fsp.stat(file);
  const handle = await fsp.open(file, 'r+');
  await handle.write(randomBytes(4096), 0, 4096, at ?? Math.floor(size / 2));
  await handle.close();
  await fsp.utimes(file, mtime, mtime);
}

/** Stores a checkpoint of `instanceId`, restores it into a new instance and returns the restored tree. */
async function checkpointAndRestore(
  instanceId: string,
  sequence: number,
  during: (piece: number) => Promise<void> = async () => undefined,
): Promise<Tree> {
  const checkpointId = `cp-${sequence}`;
  const state = await runtime.captureState(instanceId);
  expect(state.precopy).toBeDefined();
  const manifest = await store.write(
    {
      checkpointId,
      sessionId: SESSION,
      sequence,
      parentId: sequence > 1 ? `cp-${sequence - 1}` : null,
      runtime: { kind: runtime.kind, version: runtime.version },
      trigger: 'manual',
    },
    changingDuringDraft(state, during),
  );
  state.stored(manifest.checkpointId);
  const { stream } = await store.open(SESSION, checkpointId);
  const restored = await runtime.restore({
    sessionId: SESSION,
    instanceId: `restored-${sequence}-${nextId}`,
    spec: spec(['sleep', '30']),
    state: stream,
    checkpointId,
  });
  const tree = await treeOf(restored.location);
  await runtime.dispose(restored.instanceId);
  return tree;
}

describe('pre-copy capture', () => {
  test('a checkpoint of a tree that changes throughout is the tree at the freeze, not before or after', async () => {
    const info = await runtime.start({ sessionId: SESSION, instanceId: 'writer', spec: spec(WRITER) });
    await fsp.mkdir(path.join(info.location, 'churn'));
    await fsp.mkdir(path.join(info.location, 'still'));
    // Read while the writer runs: big enough that the draft takes many pieces, and it is written into as it is read.
    await fsp.writeFile(path.join(info.location, 'big.bin'), randomBytes(8 * 1024 * 1024));
    // The draft's first file, which only this test changes: behind the draft as it reads it.
    await fsp.writeFile(path.join(info.location, 'aa-first.bin'), randomBytes(4 * 1024 * 1024));
    for (let i = 0; i < 4; i++) await fsp.writeFile(path.join(info.location, `still/s${i}.bin`), randomBytes(1 << 20));
    await eventually(
      async () => Number(await fsp.readFile(path.join(info.location, 'count'), 'utf8').catch(() => '0')) > 3,
    );

    for (let sequence = 1; sequence <= 3; sequence++) {
      let lastPiece = -1;
      // Between the draft and the freeze: files made, removed, renamed and rewritten with their mtime set back.
      runtime.beforeFreeze = async (dir) => {
        await fsp.writeFile(path.join(dir, `made-${sequence}.txt`), `made before freeze ${sequence}`);
        await fsp.rm(path.join(dir, 'still/s0.bin'), { force: true });
        await fsp
          .rename(path.join(dir, 'still/s1.bin'), path.join(dir, `still/moved-${sequence}.bin`))
          .catch(() => undefined);
        await fsp.writeFile(path.join(dir, 'still/s1.bin'), randomBytes(1 << 20));
        await rewriteAt(path.join(dir, 'still/s2.bin'));
      };
      const restored = await checkpointAndRestore(info.instanceId, sequence, async (piece) => {
        lastPiece = piece;
        // Inside the draft: the file it is reading (the part already read) and files it has yet to reach, each the
        // same size with its mtime set back.
        if (piece === 1) {
          for (const name of ['aa-first.bin', 'still/s3.bin', 'big.bin']) {
            await rewriteAt(path.join(info.location, name), name === 'aa-first.bin' ? 0 : undefined);
          }
        }
      });
      expect(lastPiece).toBeGreaterThan(1);
      const atFreeze = runtime.atFreeze.at(-1)!;
      expect(atFreeze.get(`made-${sequence}.txt`)).toBeDefined();
      expect(differences(restored, atFreeze)).toEqual([]);
      // The writer ran on after the thaw: what is there now is not what was captured.
      const countAtFreeze = atFreeze.get('count');
      expect(countAtFreeze).toBeDefined();
      await eventually(async () => {
        const count = await fsp.readFile(path.join(info.location, 'count'), 'utf8').catch(() => '');
        return countAtFreeze!.endsWith(` ${Buffer.from(count).toString('base64')}`) ? undefined : true;
      });
    }
    expect(runtime.thawed).toBe(3);
  }, 120_000);

  test('the group runs while the draft is read and is frozen once the state is read', async () => {
    const counter = [
      'sh',
      '-c',
      'n=0; while true; do n=$((n+1)); echo $n > count.tmp; mv count.tmp count; sleep 0.02; done',
    ];
    const info = await runtime.start({ sessionId: SESSION, instanceId: 'counter', spec: spec(counter) });
    await fsp.writeFile(path.join(info.location, 'data.bin'), randomBytes(3 * 1024 * 1024));
    const count = async (): Promise<number> =>
      Number((await fsp.readFile(path.join(info.location, 'count'), 'utf8').catch(() => '0')).trim());
    await eventually(async () => ((await count()) > 2 ? true : undefined));

    const state = await runtime.captureState(info.instanceId);
    const draft = state.precopy![Symbol.asyncIterator]();
    await draft.next();
    // The draft is being read: the command still counts.
    const during = await count();
    await eventually(async () => ((await count()) > during ? true : undefined));
    for (let piece = await draft.next(); !piece.done; piece = await draft.next()) void piece;

    // The first read of the state freezes the group, once; it runs again once what the draft lacks is copied.
    expect(runtime.atFreeze).toHaveLength(0);
    const pieces = state.pieces[Symbol.asyncIterator]();
    await pieces.next();
    expect(runtime.atFreeze).toHaveLength(1);
    const frozenAt = Number(Buffer.from(runtime.atFreeze[0]!.get('count')!.split(' ').at(-1)!, 'base64').toString());
    for (let piece = await pieces.next(); !piece.done; piece = await pieces.next()) void piece;
    expect(runtime.thawed).toBe(1);
    await eventually(async () => ((await count()) > frozenAt ? true : undefined));

    // Closed before the state is read: never frozen.
    const unread = await runtime.captureState(info.instanceId);
    unread.close();
    expect(runtime.atFreeze).toHaveLength(1);
  }, 60_000);

  test("the state's runs are the draft's bytes, and a file changed while the draft read it is read again", async () => {
    const info = await runtime.start({ sessionId: SESSION, instanceId: 'quiet', spec: spec(['sleep', '30']) });
    const names = ['a.bin', 'b.bin', 'c.bin', 'd.bin'];
    for (const name of names) await fsp.writeFile(path.join(info.location, name), randomBytes(1536 * 1024));
    await delay(50); // the clock past the writes: a file changed in the draft's clock tick is never reused

    const state = await runtime.captureState(info.instanceId);
    const draftParts: Buffer[] = [];
    let piece = 0;
    for await (const p of state.precopy!) {
      draftParts.push(isUnchangedRange(p) ? await readAll(p.read(0, p.length)) : Buffer.from(p));
      // After the draft's first piece (part of a.bin): c.bin, ahead of the draft, is changed in place.
      if (piece++ === 0) {
        const handle = await fsp.open(path.join(info.location, 'c.bin'), 'r+');
        await handle.write(Buffer.from('changed'), 0, 7, 1000);
        await handle.close();
      }
    }
    const draftBytes = Buffer.concat(draftParts);
    const ranges: Array<{ at: number; range: UnchangedRange }> = [];
    const parts: Buffer[] = [];
    let at = 0;
    for await (const p of state.pieces) {
      const bytes = isUnchangedRange(p) ? await readAll(p.read(0, p.length)) : Buffer.from(p);
      if (isUnchangedRange(p)) {
        ranges.push({ at, range: p });
        expect(bytes.equals(draftBytes.subarray(p.baseOffset, p.baseOffset + p.length))).toBe(true);
      }
      parts.push(bytes);
      at += bytes.length;
    }
    const bytes = Buffer.concat(parts);
    expect(bytes.equals(await readAll(await runtime.capture(info.instanceId)))).toBe(true);
    // Most of the state came from the draft; c.bin did not.
    const fromDraft = ranges.reduce((sum, { range }) => sum + range.length, 0);
    expect(fromDraft).toBeGreaterThan(0.6 * bytes.length);
    const cAt = bytes.indexOf(Buffer.from('c.bin\0'));
    expect(ranges.some(({ at: start, range }) => start <= cAt && cAt < start + range.length)).toBe(false);
  });

  test('a consumer that skips the draft gets every byte of the state, as capture gives it', async () => {
    const info = await runtime.start({ sessionId: SESSION, instanceId: 'skip', spec: spec(['sleep', '30']) });
    await fsp.writeFile(path.join(info.location, 'a.txt'), 'a');
    const state = await runtime.captureState(info.instanceId);
    const bytes = await readAll(sourceBytes(state));
    expect(bytes.equals(await readAll(await runtime.capture(info.instanceId)))).toBe(true);
    state.stored('cp-1');
    expect((await runtime.captureState(info.instanceId)).base).toBe('cp-1');
  });
});
