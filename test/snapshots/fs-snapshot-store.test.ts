import { createHash, randomBytes } from 'node:crypto';
import * as fs from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { Readable } from 'node:stream';
import {
  FsSnapshotStore,
  SnapshotCorruptError,
  SnapshotIncompatibleError,
  SnapshotNotFoundError,
  type CheckpointManifest,
  type NewCheckpoint,
} from '../../src/snapshots';
import { consume } from '../helpers/checkpoints';

const MiB = 1024 * 1024;
const SESSION = 'sess-1';

let tmp: string;
let root: string;
let store: FsSnapshotStore;

beforeEach(async () => {
  tmp = await fs.mkdtemp(join(tmpdir(), 'fs-snapshot-store-'));
  root = join(tmp, 'store');
  store = new FsSnapshotStore(root);
});

afterEach(async () => {
  await fs.rm(tmp, { recursive: true, force: true });
});

function checkpoint(sequence: number, overrides: Partial<NewCheckpoint> = {}): NewCheckpoint {
  return {
    checkpointId: `${SESSION}.${sequence}`,
    sessionId: SESSION,
    sequence,
    parentId: sequence > 1 ? `${SESSION}.${sequence - 1}` : null,
    runtime: { kind: 'memory', version: '1.2.3' },
    trigger: 'manual',
    ...overrides,
  };
}

/** A stream of `bytes` in 64 KiB chunks, so writes and reads span many chunks. */
function streamOf(bytes: Buffer): Readable {
  const chunks: Buffer[] = [];
  for (let at = 0; at < bytes.length; at += 64 * 1024) chunks.push(bytes.subarray(at, at + 64 * 1024));
  return Readable.from(chunks);
}

function sha256(bytes: Buffer): string {
  return `sha256:${createHash('sha256').update(bytes).digest('hex')}`;
}

/** Compares by length and digest: jest's element-wise Buffer diff takes minutes on megabytes. */
function expectSameBytes(actual: Buffer, expected: Buffer): void {
  expect({ length: actual.length, digest: sha256(actual) }).toEqual({
    length: expected.length,
    digest: sha256(expected),
  });
}

async function readBack(sessionId: string, checkpointId: string): Promise<Buffer> {
  const { stream } = await store.open(sessionId, checkpointId);
  const result = await consume(stream);
  if (result.error) throw result.error;
  expect(result.ended).toBe(true);
  return result.bytes;
}

/** Relative paths of all files (not directories) under `dir`. */
async function filesUnder(dir: string): Promise<string[]> {
  const entries = await fs.readdir(dir, { recursive: true, withFileTypes: true }).catch(() => []);
  return entries
    .filter((entry) => entry.isFile())
    .map((entry) => relative(dir, join(entry.parentPath, entry.name)))
    .sort();
}

function dataPath(sessionId: string, checkpointId: string): string {
  return join(root, sessionId, `${checkpointId}.data`);
}

function manifestPath(sessionId: string, checkpointId: string): string {
  return join(root, sessionId, `${checkpointId}.manifest.json`);
}

async function rewriteManifest(edit: (json: Record<string, unknown>) => void): Promise<void> {
  const path = manifestPath(SESSION, `${SESSION}.1`);
  const json = JSON.parse(await fs.readFile(path, 'utf8')) as Record<string, unknown>;
  edit(json);
  await fs.writeFile(path, JSON.stringify(json));
}

describe('FsSnapshotStore', () => {
  describe('write and read back', () => {
    it('round-trips 5 MiB of random bytes through the files it describes', async () => {
      const bytes = randomBytes(5 * MiB);
      const progress: number[] = [];
      const manifest = await store.write(checkpoint(1), streamOf(bytes), { onProgress: (n) => progress.push(n) });

      expectSameBytes(await readBack(SESSION, `${SESSION}.1`), bytes);
      expectSameBytes(await fs.readFile(dataPath(SESSION, `${SESSION}.1`)), bytes);
      expect(await filesUnder(root)).toEqual([`${SESSION}/${SESSION}.1.data`, `${SESSION}/${SESSION}.1.manifest.json`]);
      expect(manifest.size).toBe(bytes.length);
      expect(progress.at(-1)).toBe(bytes.length);
      expect(progress).toEqual([...progress].sort((a, b) => a - b));
    });

    it('records every manifest field, on disk and as returned', async () => {
      const bytes = Buffer.from('state of the session');
      const before = Date.now();
      const manifest = await store.write(
        checkpoint(2, { label: 'before upgrade', trigger: 'pause' }),
        Readable.from([bytes]),
      );
      const after = Date.now();

      expect(manifest).toEqual({
        formatVersion: 1,
        checkpointId: `${SESSION}.2`,
        sessionId: SESSION,
        sequence: 2,
        parentId: `${SESSION}.1`,
        runtime: { kind: 'memory', version: '1.2.3' },
        size: bytes.length,
        digest: sha256(bytes),
        createdAt: expect.any(String),
        label: 'before upgrade',
        trigger: 'pause',
      });
      const createdAt = Date.parse(manifest.createdAt);
      expect(new Date(createdAt).toISOString()).toBe(manifest.createdAt);
      expect(createdAt).toBeGreaterThanOrEqual(before);
      expect(createdAt).toBeLessThanOrEqual(after);
      expect(JSON.parse(await fs.readFile(manifestPath(SESSION, `${SESSION}.2`), 'utf8'))).toEqual(manifest);
      expect(await store.readManifest(SESSION, `${SESSION}.2`)).toEqual(manifest);
    });
  });

  describe('list', () => {
    it('returns manifests in sequence order, skipping temp files, orphans and unreadable manifests', async () => {
      // Written out of order, and with ids whose alphabetical order ("….10" < "….2") is not the sequence order.
      for (const sequence of [10, 2, 9]) await store.write(checkpoint(sequence), Readable.from([`state ${sequence}`]));
      const dir = join(root, SESSION);
      await fs.writeFile(join(dir, `.${SESSION}.4.manifest.json.tmp-0123abcd`), '{');
      await fs.copyFile(join(dir, `${SESSION}.2.manifest.json`), join(dir, `.${SESSION}.2.manifest.json`));
      await fs.writeFile(join(dir, `${SESSION}.5.data`), 'orphaned data');
      await fs.writeFile(join(dir, `${SESSION}.6.manifest.json`), 'not json');

      const listed = await store.list(SESSION);

      expect(listed.map((m) => m.sequence)).toEqual([2, 9, 10]);
      expect(listed.map((m) => m.checkpointId)).toEqual([`${SESSION}.2`, `${SESSION}.9`, `${SESSION}.10`]);
    });
  });

  describe('damaged data', () => {
    const bytes = randomBytes(3 * MiB);

    beforeEach(async () => {
      await store.write(checkpoint(1), streamOf(bytes));
    });

    async function expectCorruptStream(): Promise<Buffer> {
      const { stream } = await store.open(SESSION, `${SESSION}.1`);
      const result = await consume(stream);
      expect(result.error).toBeInstanceOf(SnapshotCorruptError);
      expect(result.error).toMatchObject({ code: 'SnapshotCorrupt', sessionId: SESSION, checkpointId: `${SESSION}.1` });
      expect(result.ended).toBe(false);
      await expect(store.verify(SESSION, `${SESSION}.1`)).rejects.toMatchObject({ code: 'SnapshotCorrupt' });
      return result.bytes;
    }

    it('one flipped byte fails the stream with SnapshotCorruptError and never ends it', async () => {
      const damaged = Buffer.from(bytes);
      damaged[2 * MiB] = damaged[2 * MiB]! ^ 0x01;
      await fs.writeFile(dataPath(SESSION, `${SESSION}.1`), damaged);

      const seen = await expectCorruptStream();
      expect(seen.length).toBe(bytes.length);
    });

    it('truncated data fails with SnapshotCorruptError', async () => {
      await fs.truncate(dataPath(SESSION, `${SESSION}.1`), bytes.length - 1);

      await expectCorruptStream();
    });

    it('appended bytes fail with SnapshotCorruptError, without handing out the extra bytes', async () => {
      await fs.appendFile(dataPath(SESSION, `${SESSION}.1`), 'trailing garbage');

      const seen = await expectCorruptStream();
      expect(seen.length).toBeLessThanOrEqual(bytes.length);
    });

    it('deleted data makes open() throw SnapshotNotFoundError', async () => {
      await fs.rm(dataPath(SESSION, `${SESSION}.1`));

      const error = await store.open(SESSION, `${SESSION}.1`).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(SnapshotNotFoundError);
      expect(error).toMatchObject({ code: 'SnapshotNotFound', sessionId: SESSION, checkpointId: `${SESSION}.1` });
      await expect(store.verify(SESSION, `${SESSION}.1`)).rejects.toMatchObject({ code: 'SnapshotNotFound' });
    });

    it('an abort while reading destroys the stream', async () => {
      const controller = new AbortController();
      const { stream } = await store.open(SESSION, `${SESSION}.1`, {
        signal: controller.signal,
        onProgress: (n) => {
          if (n >= MiB) controller.abort();
        },
      });

      const result = await consume(stream);

      expect(result.error).toMatchObject({ name: 'AbortError' });
      expect(result.ended).toBe(false);
    });
  });

  describe('damaged manifests', () => {
    beforeEach(async () => {
      await store.write(checkpoint(1), Readable.from(['some state']));
    });

    async function expectManifestError(errorClass: new (...args: never[]) => Error, code: string): Promise<Error> {
      const error = await store.readManifest(SESSION, `${SESSION}.1`).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(errorClass);
      expect(error).toMatchObject({ code, sessionId: SESSION, checkpointId: `${SESSION}.1` });
      await expect(store.open(SESSION, `${SESSION}.1`)).rejects.toMatchObject({ code });
      await expect(store.list(SESSION)).resolves.toEqual([]);
      return error as Error;
    }

    it('a missing manifest is SnapshotNotFoundError, even though the data is there', async () => {
      await fs.rm(manifestPath(SESSION, `${SESSION}.1`));

      await expectManifestError(SnapshotNotFoundError, 'SnapshotNotFound');
    });

    it('a manifest that is not JSON is SnapshotCorruptError', async () => {
      await fs.writeFile(manifestPath(SESSION, `${SESSION}.1`), '{"formatVersion": 1, "checkpo');

      await expectManifestError(SnapshotCorruptError, 'SnapshotCorrupt');
    });

    it('a manifest that does not match the schema is SnapshotCorruptError', async () => {
      await rewriteManifest((json) => (json.digest = 'md5:abc'));

      await expectManifestError(SnapshotCorruptError, 'SnapshotCorrupt');
    });

    it('an unsupported format version is SnapshotIncompatibleError naming both versions', async () => {
      await rewriteManifest((json) => (json.formatVersion = 99));

      const error = await expectManifestError(SnapshotIncompatibleError, 'SnapshotIncompatible');
      expect(error.message).toBe('checkpoint format version 99 is not supported by this reader (supports 1)');
    });

    it("another session's checkpoint copied into this session is SnapshotCorruptError", async () => {
      const other = await store.write(
        checkpoint(1, { sessionId: 'other-session', checkpointId: `${SESSION}.1` }),
        Readable.from(['other state']),
      );
      expect(other.sessionId).toBe('other-session');
      await fs.copyFile(manifestPath('other-session', `${SESSION}.1`), manifestPath(SESSION, `${SESSION}.1`));
      await fs.copyFile(dataPath('other-session', `${SESSION}.1`), dataPath(SESSION, `${SESSION}.1`));

      await expectManifestError(SnapshotCorruptError, 'SnapshotCorrupt');
    });

    it('a checkpoint renamed to another id is SnapshotCorruptError under the new id', async () => {
      await fs.rename(manifestPath(SESSION, `${SESSION}.1`), manifestPath(SESSION, `${SESSION}.7`));
      await fs.rename(dataPath(SESSION, `${SESSION}.1`), dataPath(SESSION, `${SESSION}.7`));

      await expect(store.readManifest(SESSION, `${SESSION}.7`)).rejects.toMatchObject({ code: 'SnapshotCorrupt' });
    });
  });

  describe('ids', () => {
    const badIds = ['../x', 'a/b', '.hidden', '..', '', 'a\\b', '/etc'];

    it.each(badIds)('refuses to write session id %j, creating nothing', async (sessionId) => {
      await expect(store.write(checkpoint(1, { sessionId }), Readable.from(['x']))).rejects.toThrow(TypeError);
      expect(await fs.readdir(tmp, { recursive: true })).toEqual([]);
    });

    it.each(badIds)('refuses to write checkpoint id %j, creating nothing', async (checkpointId) => {
      await expect(store.write(checkpoint(1, { checkpointId }), Readable.from(['x']))).rejects.toThrow(TypeError);
      expect(await fs.readdir(tmp, { recursive: true })).toEqual([]);
    });

    it('reads of path-like ids are not found, even when a checkpoint exists at the path they name', async () => {
      // A valid checkpoint of session "x", reachable from the store's root as "../store/x".
      await store.write(checkpoint(1, { sessionId: 'x', checkpointId: 'c.1' }), Readable.from(['x state']));
      const escapes: [string, string][] = [
        ['../store/x', 'c.1'],
        ['x', '../x/c.1'],
        ['a/b', 'c.1'],
        ['.hidden', 'c.1'],
      ];

      for (const [sessionId, checkpointId] of escapes) {
        for (const read of [
          () => store.readManifest(sessionId, checkpointId),
          () => store.open(sessionId, checkpointId),
          () => store.verify(sessionId, checkpointId),
        ]) {
          const error = await read().catch((e: unknown) => e);
          expect(error).toBeInstanceOf(SnapshotNotFoundError);
          expect(error).toMatchObject({ code: 'SnapshotNotFound' });
        }
      }
    });

    it('refuses to delete path-like ids, removing nothing', async () => {
      await store.write(checkpoint(1, { sessionId: 'x', checkpointId: 'c.1' }), Readable.from(['x state']));

      await expect(store.delete('../store/x', 'c.1')).rejects.toThrow(TypeError);
      await expect(store.delete('x', '../x/c.1')).rejects.toThrow(TypeError);

      expect(await filesUnder(tmp)).toEqual(['store/x/c.1.data', 'store/x/c.1.manifest.json']);
    });
  });

  describe('delete', () => {
    it('removes the checkpoint, then the empty session directory, and is idempotent', async () => {
      await store.write(checkpoint(1), Readable.from(['one']));

      await store.delete(SESSION, `${SESSION}.1`);
      await store.delete(SESSION, `${SESSION}.1`);
      await store.delete('never-written', 'nothing.1');

      await expect(fs.readdir(root)).resolves.toEqual([]);
      await expect(store.list(SESSION)).resolves.toEqual([]);
      await expect(store.readManifest(SESSION, `${SESSION}.1`)).rejects.toMatchObject({ code: 'SnapshotNotFound' });
    });

    it('keeps the other checkpoints of the session', async () => {
      await store.write(checkpoint(1), Readable.from(['one']));
      const second: CheckpointManifest = await store.write(checkpoint(2), Readable.from(['two']));

      await store.delete(SESSION, `${SESSION}.1`);

      await expect(store.list(SESSION)).resolves.toEqual([second]);
      expect((await readBack(SESSION, `${SESSION}.2`)).toString()).toBe('two');
      expect(await filesUnder(root)).toEqual([`${SESSION}/${SESSION}.2.data`, `${SESSION}/${SESSION}.2.manifest.json`]);
    });
  });
});
