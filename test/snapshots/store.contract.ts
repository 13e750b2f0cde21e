import { createHash, randomBytes } from 'node:crypto';
import { Readable } from 'node:stream';
import {
  SessionIdTakenError,
  SnapshotNotFoundError,
  TimelineConflictError,
  type CheckpointManifest,
  type NewCheckpoint,
  type SnapshotMaintenance,
  type SnapshotStore,
  type TimelineLog,
} from '../../src/snapshots';
import type { BlobBackend } from '../../src/snapshots/blob/backend';
import { seeded } from '../helpers/bytes';
import { consume, cp, readAll, sessionIdTaken as taken } from '../helpers/checkpoints';
import { contractBackends, type BackendHarness, type OpenedBackend } from './blob/backends';

/** What a store under the contract can do beyond the SnapshotStore interface; a case that needs more is skipped. */
export interface StoreCapabilities {
  /** The `formatVersion` its manifests say. */
  formatVersion: number;
  /** The `encryption` its manifests report (`undefined`: the format has no such field). */
  encryption: CheckpointManifest['encryption'];
  /** Data is authenticated, so altered bytes are SnapshotTampered rather than only SnapshotCorrupt. */
  authenticatesData: boolean;
  /** It also implements SnapshotMaintenance (verifyLineage, gc, rekey, shred). */
  maintenance: boolean;
  /**
   * A failed write leaves no file at all. Not so for an encrypted chunked store: the lineage's data key, made by the
   * first write, stays for the next one.
   */
  failedWritesLeaveNoFiles: boolean;
}

export interface SnapshotStoreContract {
  name: string;
  /** A store on `backend` (new and empty). */
  newStore: (backend: BlobBackend) => SnapshotStore & TimelineLog;
  capabilities: StoreCapabilities;
  /** The backends to run on: every one in blob/backends.ts by default. */
  backends?: readonly BackendHarness[];
}

const MiB = 1024 * 1024;
const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');

/** A stream of `bytes` in 64 KiB pieces, so that writes and reads span many of them. */
function streamOf(bytes: Buffer): Readable {
  const pieces: Buffer[] = [];
  for (let at = 0; at < bytes.length; at += 64 * 1024) pieces.push(bytes.subarray(at, at + 64 * 1024));
  return Readable.from(pieces);
}

/**
 * The SnapshotStore contract: what every store does the same, whatever its format. Each store's test file calls it
 * once per configuration; what only one store does is tested in that store's own file.
 */
export function runSnapshotStoreContract({
  name,
  newStore,
  capabilities,
  backends = contractBackends,
}: SnapshotStoreContract): void {
  for (const harness of backends) runOn(harness, name, newStore, capabilities);
}

function runOn(
  harness: BackendHarness,
  name: string,
  newStore: SnapshotStoreContract['newStore'],
  capabilities: StoreCapabilities,
): void {
  const withMaintenance = capabilities.maintenance ? test : test.skip;

  describe(`SnapshotStore contract: ${name} on ${harness.name}`, () => {
    let opened: OpenedBackend;
    let store: SnapshotStore & TimelineLog;
    /** Every object (and temp file) the backend holds. */
    const everything = () => opened.everything();
    beforeEach(async () => {
      opened = await harness.open();
      store = newStore(opened.backend);
    });
    afterEach(async () => {
      await opened.dispose();
    });

    test('a round trip: the bytes, the manifest a reader sees, progress up to the size', async () => {
      const state = randomBytes(3 * MiB);
      const progress: number[] = [];
      const checkpoint: NewCheckpoint = { ...cp(2, 'cp-1'), label: 'before upgrade', trigger: 'pause' };
      const before = Date.now();
      const manifest = await store.write(checkpoint, streamOf(state), { onProgress: (n) => progress.push(n) });
      expect(manifest).toEqual({
        formatVersion: capabilities.formatVersion,
        checkpointId: 'cp-2',
        sessionId: 's1',
        sequence: 2,
        parentId: 'cp-1',
        runtime: { kind: 'memory', version: '1' },
        size: state.length,
        digest: expect.stringMatching(/^sha256:[0-9a-f]{64}$/),
        createdAt: expect.any(String),
        label: 'before upgrade',
        trigger: 'pause',
        ...(capabilities.encryption !== undefined ? { encryption: capabilities.encryption } : {}),
      });
      expect(new Date(manifest.createdAt).toISOString()).toBe(manifest.createdAt);
      expect(Date.parse(manifest.createdAt)).toBeGreaterThanOrEqual(before);
      expect(progress.at(-1)).toBe(state.length);
      expect(progress).toEqual([...progress].sort((a, b) => a - b));

      const read: number[] = [];
      const opened = await store.open('s1', 'cp-2', { onProgress: (n) => read.push(n) });
      expect(opened.manifest).toEqual(manifest);
      expect(sha(await readAll(opened.stream))).toBe(sha(state));
      expect(read.at(-1)).toBe(state.length);
      expect(await store.readManifest('s1', 'cp-2')).toEqual(manifest);
      expect(await store.verify('s1', 'cp-2')).toEqual(manifest);
      expect(await store.list('s1')).toEqual([manifest]);
    });

    test('an empty state round-trips, with the digest of nothing', async () => {
      const manifest = await store.write(cp(1), Readable.from([]));
      expect(manifest.size).toBe(0);
      expect(manifest.digest).toBe(`sha256:${sha(Buffer.alloc(0))}`);
      expect(await readAll((await store.open('s1', 'cp-1')).stream)).toEqual(Buffer.alloc(0));
    });

    test('a checkpoint whose fields break the domain rules is refused, creating nothing', async () => {
      for (const bad of [
        { ...cp(1), sequence: 0 },
        { ...cp(1), label: 'two\nlines' },
      ]) {
        await expect(store.write(bad, Readable.from([randomBytes(1000)]))).rejects.toThrow(TypeError);
      }
      expect(await everything()).toEqual([]);
    });

    test('checkpoints are immutable: a second write of an id fails unread and keeps the first', async () => {
      const original = Buffer.from('original');
      const first = await store.write(cp(1), Readable.from([original]));
      const files = await everything();
      let replacementRead = false;
      const replacement = new Readable({
        read() {
          replacementRead = true;
          this.push(null);
        },
      });
      await expect(store.write(cp(1), replacement)).rejects.toThrow(/immutable/);
      expect(replacementRead).toBe(false);
      expect(await readAll((await store.open('s1', 'cp-1')).stream)).toEqual(original);
      expect(await store.readManifest('s1', 'cp-1')).toEqual(first);
      expect(await everything()).toEqual(files);
    });

    test('a source that fails mid-way fails the write with its error; nothing becomes visible', async () => {
      let pushed = 0;
      const failure = new Error('source failed');
      const source = new Readable({
        read() {
          if (pushed++ < 20) this.push(randomBytes(64 * 1024));
          else this.destroy(failure);
        },
      });
      await expect(store.write(cp(1), source)).rejects.toBe(failure);
      expect(await store.list('s1')).toEqual([]);
      if (capabilities.failedWritesLeaveNoFiles) expect(await everything()).toEqual([]);
      await expect(store.readManifest('s1', 'cp-1')).rejects.toBeInstanceOf(SnapshotNotFoundError);
    });

    test('an abort mid-way is an AbortError; the source is released and nothing becomes visible', async () => {
      const controller = new AbortController();
      // 16 MiB, aborted after 1 MiB: if the abort were ignored, the write would complete and the test fail.
      let pushed = 0;
      let written = 0;
      const source = new Readable({
        read() {
          this.push(pushed++ < 256 ? randomBytes(64 * 1024) : null);
        },
      });
      const write = store.write(cp(1), source, {
        signal: controller.signal,
        onProgress: (bytes) => {
          written = bytes;
          if (bytes >= MiB) controller.abort();
        },
      });
      await expect(write).rejects.toMatchObject({ name: 'AbortError' });
      expect(written).toBeLessThan(2 * MiB);
      expect(source.destroyed).toBe(true);
      expect(await store.list('s1')).toEqual([]);
      if (capabilities.failedWritesLeaveNoFiles) expect(await everything()).toEqual([]);
      await expect(store.readManifest('s1', 'cp-1')).rejects.toBeInstanceOf(SnapshotNotFoundError);
    });

    test('an already aborted signal fails the write before anything is created', async () => {
      const controller = new AbortController();
      controller.abort();
      const source = Readable.from([Buffer.from('x')]);
      await expect(store.write(cp(1), source, { signal: controller.signal })).rejects.toMatchObject({
        name: 'AbortError',
      });
      expect(await everything()).toEqual([]);
    });

    test('what does not exist is SnapshotNotFound, path-like ids included', async () => {
      await store.write(cp(1), Readable.from([Buffer.from('one')]));
      for (const [sessionId, checkpointId] of [
        ['s1', 'cp-9'],
        ['never-written', 'cp-1'],
        ['..', 'store'],
        ['s1/../s1', 'cp-1'],
      ] as const) {
        await expect(store.readManifest(sessionId, checkpointId)).rejects.toBeInstanceOf(SnapshotNotFoundError);
        await expect(store.open(sessionId, checkpointId)).rejects.toMatchObject({ code: 'SnapshotNotFound' });
      }
    });

    test('list: in sequence order (not id order), [] for an unknown session or an id that cannot be one', async () => {
      for (const sequence of [10, 2, 9])
        await store.write(cp(sequence), Readable.from([Buffer.from(`state ${sequence}`)]));
      expect((await store.list('s1')).map((m) => m.checkpointId)).toEqual(['cp-2', 'cp-9', 'cp-10']);
      await expect(store.list('never-written')).resolves.toEqual([]);
      await expect(store.list('../x')).resolves.toEqual([]);
    });

    test('delete: the checkpoint goes, the others stay; deleting again or what never was is no error', async () => {
      await store.write(cp(1), Readable.from([Buffer.from('one')]));
      const second = await store.write(cp(2, 'cp-1'), Readable.from([Buffer.from('two')]));
      await store.delete('s1', 'cp-1');
      await store.delete('s1', 'cp-1');
      await store.delete('never-written', 'cp-1');
      expect(await store.list('s1')).toEqual([second]);
      await expect(store.readManifest('s1', 'cp-1')).rejects.toMatchObject({ code: 'SnapshotNotFound' });
      expect((await readAll((await store.open('s1', 'cp-2')).stream)).toString()).toBe('two');
    });

    test('altered bytes fail the stream with a typed error before it ends, and fail verify', async () => {
      await store.write(cp(1), streamOf(seeded(7, MiB)));
      await opened.tamper('s1/');
      const code = capabilities.authenticatesData ? 'SnapshotTampered' : 'SnapshotCorrupt';
      const { stream } = await store.open('s1', 'cp-1');
      const result = await consume(stream);
      expect(result.error).toMatchObject({ code, sessionId: 's1', checkpointId: 'cp-1' });
      expect(result.ended).toBe(false);
      await expect(store.verify('s1', 'cp-1')).rejects.toMatchObject({ code });
    });

    withMaintenance('verifyLineage reports each checkpoint, the altered one by its status', async () => {
      await store.write(cp(1), streamOf(seeded(7, MiB)));
      const maintenance = store as SnapshotStore & TimelineLog & SnapshotMaintenance;
      expect(await maintenance.verifyLineage('s1')).toEqual([
        { checkpointId: 'cp-1', sequence: 1, formatVersion: capabilities.formatVersion, status: 'ok' },
      ]);
      await opened.tamper('s1/');
      expect((await maintenance.verifyLineage('s1'))[0]).toMatchObject({
        checkpointId: 'cp-1',
        status: capabilities.authenticatesData ? 'tampered' : 'corrupt',
      });
    });

    test('a timeline log: pages in index order, a repeat is a no-op, other content at an index is refused', async () => {
      await store.claim('s1', 'run-a');
      const entry = (index: number) => ({ index, kind: 'note', text: `entry ${index}` });
      await store.appendTimeline('s1', [entry(3), entry(1), entry(2)]);
      await store.appendTimeline('s1', [entry(5)]);
      expect(await store.readTimeline('s1', { limit: 3 })).toEqual({ entries: [1, 2, 3].map(entry), next: 5 });
      expect(await store.readTimeline('s1', { from: 4 })).toEqual({ entries: [entry(5)], next: null });
      await store.appendTimeline('s1', [entry(2), entry(5)]);
      await expect(store.appendTimeline('s1', [entry(6), { ...entry(2), text: 'other' }])).rejects.toBeInstanceOf(
        TimelineConflictError,
      );
      expect((await store.readTimeline('s1')).entries.map((e) => e.index)).toEqual([1, 2, 3, 5]);
      expect(await store.readTimeline('s2')).toEqual({ entries: [], next: null });
    });

    describe('claims: a session id is owned once, for good', () => {
      const claim = async (session = 's1') => (await opened.backend.read(`${session}/claim.json`))?.toString('utf8');

      test('the first claim wins; the same owner again is a no-op; another owner is refused', async () => {
        const s = store;
        await s.claim('s1', 'run-a');
        const recorded = (await claim())!;
        expect(JSON.parse(recorded)).toEqual({ owner: 'run-a', claimedAt: expect.any(String) });
        // A retried activity: accepted, and the claim is not rewritten.
        await s.claim('s1', 'run-a');
        expect(await claim()).toBe(recorded);
        const refused = s.claim('s1', 'run-b');
        await expect(refused).rejects.toBeInstanceOf(SessionIdTakenError);
        await expect(refused).rejects.toMatchObject(
          taken(/session id s1 is taken: it was claimed by "run-a", not "run-b"/),
        );
        // A claim is no checkpoint: the session lists none, and its checkpoints are written beside it as usual.
        expect(await s.list('s1')).toEqual([]);
        await s.write(cp(1), Readable.from([randomBytes(10_000)]));
        expect((await s.list('s1')).map((m) => m.checkpointId)).toEqual(['cp-1']);
        await s.claim('s1', 'run-a');
      });

      test('a session with checkpoints from before claims is taken, even for its first claimer', async () => {
        const s = store;
        await s.write(cp(1), Readable.from([randomBytes(10_000)]));
        await expect(s.claim('s1', 'run-a')).rejects.toMatchObject(taken(/taken: the store holds .*cp-1/));
        expect(await claim()).toBeUndefined();
      });

      test('racing claimers: exactly one owner wins, every caller of that owner succeeds', async () => {
        const s = store;
        const owners = ['run-a', 'run-b', 'run-a', 'run-c', 'run-b', 'run-a'];
        const results = await Promise.allSettled(owners.map((owner) => s.claim('s1', owner)));
        const winner = (JSON.parse((await claim())!) as { owner: string }).owner;
        expect(results.map((r) => r.status)).toEqual(owners.map((o) => (o === winner ? 'fulfilled' : 'rejected')));
        expect(await everything()).toEqual(['s1/claim.json']);
      });

      test('the claim outlives every checkpoint of the session: the id stays used', async () => {
        const s = store;
        await s.claim('s1', 'run-a');
        await s.write(cp(1), Readable.from([randomBytes(10_000)]));
        await s.delete('s1', 'cp-1');
        await expect(s.claim('s1', 'run-b')).rejects.toMatchObject(taken(/claimed by "run-a"/));
      });

      test('a claim that cannot be read still takes the id; bad ids and owners are refused before anything', async () => {
        const s = store;
        await opened.backend.put('s1/claim.json', Buffer.from('{"owner":'));
        await expect(s.claim('s1', 'run-a')).rejects.toMatchObject(taken(/its claim is unreadable/));
        await opened.backend.put('s3/claim.json', Buffer.from(`{"owner":"${'x'.repeat(5000)}","claimedAt":""}`));
        await expect(s.claim('s3', 'run-a')).rejects.toMatchObject({
          ...taken(/its claim is unreadable/),
          sessionId: 's3',
        });
        await expect(s.claim('../escape', 'run-a')).rejects.toThrow(TypeError);
        await expect(s.claim('s2', '')).rejects.toThrow(TypeError);
        await expect(s.claim('s2', 'line\nbreak')).rejects.toThrow(TypeError);
        expect(await everything()).toEqual(['s1/claim.json', 's3/claim.json']);
      });
    });
  });
}
