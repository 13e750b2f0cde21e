import { createHash, randomBytes } from 'node:crypto';
import { PassThrough, Readable } from 'node:stream';
import { setTimeout as delay } from 'node:timers/promises';
import type { BlobBackend, BlobBody, BlobInfo, BlobRange } from '../../../src/snapshots/blob/backend';
import { ChunkedSnapshotStore } from '../../../src/snapshots/engine/chunked-store';
import { Keyring } from '../../../src/snapshots/engine/keyring';
import { SnapshotNotFoundError } from '../../../src/snapshots/errors';
import { cp, readAll } from '../../helpers/checkpoints';
import { contractBackends, type OpenedBackend } from '../blob/backends';

/**
 * Two stores on one backend, as two workers on two hosts sharing a bucket: what one collects while the other writes.
 * Each store reaches the backend through a gate the test opens, to hold one side at the moment the other acts.
 */

const MiB = 1024 * 1024;
const keyring = new Keyring([{ id: 'k1', key: randomBytes(32) }]);
const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');

/** A backend whose creates and deletes of matching keys wait until the test lets them through. */
class HeldBackend implements BlobBackend {
  readonly location: string;
  private readonly holds: { match: RegExp; op: 'create' | 'delete'; reached: () => void; release: Promise<void> }[] =
    [];

  constructor(private readonly inner: BlobBackend) {
    this.location = inner.location;
  }

  /** Holds the next `op` of a key matching `match`: `reached` resolves when one arrives, `release()` lets it go. */
  hold(op: 'create' | 'delete', match: RegExp): { reached: Promise<void>; release: () => void } {
    let reached!: () => void;
    let release!: () => void;
    const reachedP = new Promise<void>((resolve) => (reached = resolve));
    const releaseP = new Promise<void>((resolve) => (release = resolve));
    this.holds.push({ match, op, reached, release: releaseP });
    return { reached: reachedP, release };
  }

  private async pass(op: 'create' | 'delete', key: string): Promise<void> {
    const at = this.holds.findIndex((h) => h.op === op && h.match.test(key));
    if (at < 0) return;
    const [hold] = this.holds.splice(at, 1);
    hold!.reached();
    await hold!.release;
  }

  async create(key: string, body: BlobBody): Promise<boolean> {
    await this.pass('create', key);
    return this.inner.create(key, body);
  }
  put(key: string, body: BlobBody): Promise<void> {
    return this.inner.put(key, body);
  }
  read(key: string, options?: { range?: BlobRange; maxBytes?: number }): Promise<Buffer | null> {
    return this.inner.read(key, options);
  }
  stream(key: string, options?: { range?: BlobRange }) {
    return this.inner.stream(key, options);
  }
  stat(key: string): Promise<BlobInfo | null> {
    return this.inner.stat(key);
  }
  list(prefix: string): AsyncIterable<BlobInfo> {
    return this.inner.list(prefix);
  }
  listKeys(prefix: string): AsyncIterable<string> {
    return this.inner.listKeys(prefix);
  }
  async delete(key: string): Promise<void> {
    await this.pass('delete', key);
    return this.inner.delete(key);
  }
  now(): Promise<Date> {
    return this.inner.now();
  }
  async close(): Promise<void> {}
}

async function eventually(condition: () => Promise<boolean>, what: string): Promise<void> {
  const deadline = Date.now() + 60_000;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`gave up waiting for ${what}`);
    await delay(20);
  }
}

describe.each(contractBackends)('two stores on one backend ($name)', (harness) => {
  let opened: OpenedBackend;
  beforeEach(async () => {
    opened = await harness.open();
  });
  afterEach(async () => {
    await opened.dispose();
  });

  test('gc on one host while another writes over packs it may delete: nothing referenced is deleted', async () => {
    const onA = new HeldBackend(opened.backend);
    const onB = new HeldBackend(opened.backend);
    const a = new ChunkedSnapshotStore({ backend: onA, keyring, gcGraceMs: 0 });
    const b = new ChunkedSnapshotStore({ backend: onB, keyring, gcGraceMs: 0 });
    const base = randomBytes(2 * MiB);
    await a.write(cp(1), Readable.from([base]));
    const [oldPack] = await keys(opened.backend, 's1/packs/');
    // Ages are by the backend's clock, to the second on S3: A's pin must start after the pack was written, or gc keeps
    // the pack as possibly A's (rightly) and the race below never happens.
    const written = (await opened.backend.stat(oldPack!))!.modifiedAt.getTime();
    await eventually(
      async () => (await opened.backend.now()).getTime() > written,
      "the backend's clock to pass the pack",
    );

    // A writes cp-2 over cp-1's chunks; its source stalls, so its pin is up and names no pack yet.
    const input = new PassThrough();
    input.write(base);
    // New bytes behind it, so that batches are sealed and consumed (progress) while the source stalls.
    input.write(randomBytes(16 * MiB));
    let progressed = 0;
    const write = a.write(cp(2, 'cp-1'), input, { onProgress: (bytes) => (progressed = bytes) });
    write.catch(() => undefined); // settled below
    // Progress means A has read cp-1's chunk list (before its first chunk) and will reuse its pack.
    await eventually(async () => progressed > 0 && (await opened.backend.stat('s1/pins/s1.cp-2')) !== null, 'A');

    // B deletes cp-1 and collects: its pack is referenced by nothing B can see, and B is held as it deletes it.
    await b.delete('s1', 'cp-1');
    const deleting = onB.hold('delete', /^s1\/packs\//);
    const gc = b.gc();
    await deleting.reached;
    // A finishes: its pin now names the pack it reuses, and it is held as it publishes (if it gets that far).
    const publishing = onA.hold('create', /^s1\/cp-2\.manifest$/);
    input.end(randomBytes(64 * 1024));
    await eventually(
      async () =>
        ((await opened.backend.read('s1/pins/s1.cp-2'))?.toString() ?? '').includes(
          oldPack!.slice('s1/packs/'.length, -'.pack'.length),
        ),
      "A's pin to name the pack it reuses",
    );
    deleting.release();
    const report = await gc;
    expect(report.packsRemoved.map((p) => `s1/packs/${p.packId}.pack`)).toEqual([oldPack]);
    publishing.release();

    // A, told the pack went, publishes nothing; whatever either host lists restores.
    await expect(write).rejects.toBeInstanceOf(SnapshotNotFoundError);
    expect(await b.list('s1')).toEqual([]);
    for (const store of [a, b]) {
      for (const manifest of await store.list('s1')) await store.verify('s1', manifest.checkpointId);
    }
  });

  test('writers on one host, collections and deletes on the other: every checkpoint listed restores', async () => {
    const a = new ChunkedSnapshotStore({ backend: opened.backend, keyring, gcGraceMs: 0 });
    const b = new ChunkedSnapshotStore({ backend: opened.backend, keyring, gcGraceMs: 0 });
    const base = randomBytes(MiB);
    await a.write(cp(1), Readable.from([base]));
    const states = new Map<string, Buffer>();
    for (let i = 2; i <= 8; i++) {
      const state = Buffer.concat([base, randomBytes(32 * 1024)]);
      const write = a.write(cp(i, `cp-${i - 1}`), Readable.from([state]));
      // Meanwhile B drops the parent and collects.
      const collect = (async () => {
        await b.delete('s1', `cp-${i - 1}`);
        await b.gc();
      })();
      const [written] = await Promise.allSettled([write, collect]);
      if (written.status === 'fulfilled') states.set(`cp-${i}`, state);
      else expect(written.reason).toBeInstanceOf(SnapshotNotFoundError);
      await collect;
      if (written.status === 'rejected') await a.write(cp(i, `cp-${i - 1}`), Readable.from([state]));
      states.set(`cp-${i}`, state);
    }
    await b.gc();
    for (const manifest of await b.list('s1')) {
      const restored = await readAll((await b.open('s1', manifest.checkpointId)).stream);
      expect(sha(restored)).toBe(sha(states.get(manifest.checkpointId)!));
    }
    expect((await b.list('s1')).map((m) => m.checkpointId)).toEqual(['cp-8']);
  });
});

async function keys(backend: BlobBackend, prefix: string): Promise<string[]> {
  const out: string[] = [];
  for await (const { key } of backend.list(prefix)) out.push(key);
  return out;
}
