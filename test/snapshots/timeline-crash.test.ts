import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { ChunkedSnapshotStore, Keyring, type TimelineRecord } from '../../src/snapshots';
import { appendedEntry, BATCH } from './fixtures/timeline-appender';

/** A worker killed with SIGKILL while it appends to a timeline on a local directory: real processes, real files. */

const REPO = path.resolve(__dirname, '../..');
const APPENDER = path.join(__dirname, 'fixtures/timeline-appender.ts');
const key = randomBytes(32);
const keyring = new Keyring([{ id: 'k1', key }]);

let dir: string;
const children = new Set<ChildProcess>();
beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ds-timeline-crash-'));
});
afterEach(() => {
  for (const child of children) child.kill('SIGKILL');
  children.clear();
  fs.rmSync(dir, { recursive: true, force: true });
});

/** Starts the appender, kills it once `batches` appends have resolved; the last index it reported durable. */
async function killedMidAppend(sessionId: string, batches: number): Promise<number> {
  const args = { rootDir: dir, keyHex: key.toString('hex'), sessionId };
  const child = spawn(process.execPath, ['--import', 'tsx', APPENDER, JSON.stringify(args)], {
    cwd: REPO,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.add(child);
  let durable = 0;
  let stderr = '';
  let ended = false;
  child.stdout.on('data', (chunk: Buffer) => {
    const last = chunk.toString().trim().split('\n').at(-1);
    if (last) durable = Number(last);
  });
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  void exited.then(() => (ended = true));
  const deadline = Date.now() + 60_000;
  while (durable < batches * BATCH) {
    if (ended) throw new Error(`the appender ended before it was killed: ${stderr}`);
    if (Date.now() > deadline) throw new Error('gave up waiting for the appender');
    await delay(10);
  }
  child.kill('SIGKILL');
  await exited;
  children.delete(child);
  return durable;
}

async function readAll(store: ChunkedSnapshotStore, sessionId: string): Promise<TimelineRecord[]> {
  const all: TimelineRecord[] = [];
  for (let from: number | null = 1; from !== null;) {
    const page: Awaited<ReturnType<ChunkedSnapshotStore['readTimeline']>> = await store.readTimeline(sessionId, {
      from,
      limit: 1000,
    });
    all.push(...page.entries);
    from = page.next;
  }
  return all;
}

test('kill -9 mid-append: every entry read is whole, every acknowledged one is there, the retry completes', async () => {
  for (let round = 1; round <= 3; round++) {
    const sessionId = `crash-${round}`;
    const durable = await killedMidAppend(sessionId, 3 + round);
    const store = new ChunkedSnapshotStore({ rootDir: dir, keyring });
    // Whatever the kill cut short is absent or whole, never an error and never part of an entry.
    const read = await readAll(store, sessionId);
    for (const entry of read) expect(entry).toEqual(appendedEntry(entry.index));
    const indices = read.map((e) => e.index);
    expect(indices.slice(0, durable)).toEqual(Array.from({ length: durable }, (_, i) => i + 1));
    // At most the batch in flight beyond what was acknowledged.
    expect(Math.max(...indices)).toBeLessThanOrEqual(durable + BATCH);
    // The workflow retries the batch in flight: it lands beside what the killed append stored.
    const inFlight = Array.from({ length: BATCH }, (_, i) => appendedEntry(durable + 1 + i));
    await store.appendTimeline(sessionId, inFlight);
    expect((await readAll(store, sessionId)).map((e) => e.index)).toEqual(
      Array.from({ length: durable + BATCH }, (_, i) => i + 1),
    );
  }
}, 180_000);
