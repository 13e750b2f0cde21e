import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { packBytes } from '../helpers/checkpoints';
import { runningStatus, startTestSystem, type TestSystem } from '../helpers/temporal';

/**
 * Incremental checkpoints end to end: a real server, workers and the workspace runtime. A checkpoint after a few
 * files changed stores about those files, and every checkpoint restores to exactly the tree it was taken of.
 */
let sys: TestSystem;
beforeAll(async () => {
  sys = await startTestSystem();
});
afterAll(async () => {
  await sys?.close();
});

const SLEEPER = ['sh', '-c', 'while true; do sleep 1; done'];
const FILE_BYTES = 256 * 1024;

/** Every regular file under `dir` (relative path → contents). */
function tree(dir: string): Map<string, Buffer> {
  const out = new Map<string, Buffer>();
  for (const e of fs.readdirSync(dir, { withFileTypes: true, recursive: true })) {
    if (e.isFile())
      out.set(path.relative(dir, path.join(e.parentPath, e.name)), fs.readFileSync(path.join(e.parentPath, e.name)));
  }
  return out;
}

function expectSameTree(actual: Map<string, Buffer>, expected: Map<string, Buffer>): void {
  expect([...actual.keys()].sort()).toEqual([...expected.keys()].sort());
  for (const [name, bytes] of expected) expect(actual.get(name)!.equals(bytes)).toBe(true);
}

test('a checkpoint after a few files changed stores about those files, and each checkpoint restores its own tree', async () => {
  const sessionId = `incremental-${crypto.randomUUID().slice(0, 8)}`;
  const session = await sys.sessions.start({ sessionId, runtime: { kind: 'workspace', command: SLEEPER } });
  const { runtime } = await runningStatus(session);
  const dir = runtime.location;
  fs.mkdirSync(path.join(dir, 'data'));
  for (let i = 0; i < 40; i++) fs.writeFileSync(path.join(dir, 'data', `f${i}.bin`), crypto.randomBytes(FILE_BYTES));
  // Older than the file system's clock tick at the next capture, so that the files can be named as unchanged.
  await new Promise((resolve) => setTimeout(resolve, 50));
  const first = tree(dir);
  const cp1 = await session.checkpoint();
  const afterFirst = packBytes(path.join(sys.store.root, sessionId));
  expect(afterFirst).toBeGreaterThan(40 * FILE_BYTES);

  fs.writeFileSync(path.join(dir, 'data', 'f7.bin'), crypto.randomBytes(FILE_BYTES));
  fs.rmSync(path.join(dir, 'data', 'f20.bin'));
  fs.writeFileSync(path.join(dir, 'data', 'new.txt'), 'added after the first checkpoint\n');
  const second = tree(dir);
  const cp2 = await session.checkpoint();
  expect(cp2.size).toBeGreaterThan(39 * FILE_BYTES);
  // One file's worth of new chunks (and a chunk or two around it), not the 10 MiB of the tree.
  expect(packBytes(path.join(sys.store.root, sessionId)) - afterFirst).toBeLessThan(4 * FILE_BYTES);

  await session.pause();
  const resumed = await session.resume({ checkpointId: cp2.checkpointId });
  expectSameTree(tree(resumed.runtime.location), second);
  await session.pause();
  const rewound = await session.resume({ checkpointId: cp1.checkpointId });
  expectSameTree(tree(rewound.runtime.location), first);
  await session.stop({ checkpoint: false });
});
