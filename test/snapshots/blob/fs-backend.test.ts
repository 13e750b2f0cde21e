import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { FsBlobBackend } from '../../../src/snapshots/blob/fs-backend';
import { PrefixedBlobBackend } from '../../../src/snapshots/blob/prefixed';

/** The blob backend on a real directory: what a store on one host relies on. */
describe('FsBlobBackend', () => {
  let dir: string;
  let backend: FsBlobBackend;

  beforeEach(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ds-blob-fs-'));
    backend = new FsBlobBackend(dir);
  });
  afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

  async function* pieces(...parts: string[]): AsyncIterable<Buffer> {
    for (const part of parts) yield Buffer.from(part);
  }

  test('of concurrent creates of one key exactly one wins, and its bytes are what is stored', async () => {
    const results = await Promise.all(
      Array.from({ length: 20 }, (_, i) => backend.create('s1/cp.manifest', Buffer.from(`writer ${i}`))),
    );
    expect(results.filter(Boolean)).toHaveLength(1);
    const winner = results.indexOf(true);
    expect((await backend.read('s1/cp.manifest'))?.toString()).toBe(`writer ${winner}`);
    expect(fs.readdirSync(path.join(dir, 's1'))).toEqual(['cp.manifest']); // no temp file left
  });

  test('put replaces; a streamed body is stored whole', async () => {
    await backend.put('a/b', Buffer.from('one'));
    await backend.put('a/b', pieces('tw', 'o'));
    expect((await backend.read('a/b'))?.toString()).toBe('two');
    expect(await backend.create('a/b', Buffer.from('three'))).toBe(false);
    expect((await backend.read('a/b'))?.toString()).toBe('two');
  });

  test('reads ranges, refuses objects over maxBytes, answers null for what is not there', async () => {
    await backend.put('k', Buffer.from('0123456789'));
    expect((await backend.read('k', { range: { offset: 2, length: 3 } }))?.toString()).toBe('234');
    expect((await backend.read('k', { range: { offset: 8, length: 5 } }))?.toString()).toBe('89');
    await expect(backend.read('k', { maxBytes: 4 })).rejects.toThrow('more than the 4');
    expect(await backend.read('missing')).toBeNull();
    expect(await backend.read('k/under-a-file')).toBeNull();
    expect(await backend.stat('missing')).toBeNull();
    expect(await backend.stream('missing')).toBeNull();
    const chunks: Buffer[] = [];
    for await (const c of (await backend.stream('k', { range: { offset: 5, length: 5 } }))!) chunks.push(c as Buffer);
    expect(Buffer.concat(chunks).toString()).toBe('56789');
  });

  test("openRanges reads at any offset into the caller's buffer, short at the end, through a prefixed view too", async () => {
    await backend.put('t/k', Buffer.from('0123456789'));
    const into = Buffer.alloc(8, '.');
    const reader = (await backend.openRanges('t/k'))!;
    try {
      expect(await reader.readInto(into, 1, 3, 4)).toBe(3);
      expect(await reader.readInto(into, 5, 3, 8)).toBe(2); // the object ends first
      expect(into.toString()).toBe('.456.89.');
    } finally {
      await reader.close();
    }
    const view = new PrefixedBlobBackend(backend, 't');
    const viewed = (await view.openRanges!('k'))!;
    try {
      expect(await viewed.readInto(into, 0, 2, 0)).toBe(2);
      expect(into.toString()).toBe('0156.89.');
    } finally {
      await viewed.close();
    }
    expect(await backend.openRanges('missing')).toBeNull();
    expect(await view.openRanges!('missing')).toBeNull();
  });

  test('lists by prefix in key order, across folders, never a temp file', async () => {
    for (const key of ['s/timeline/000002', 's/timeline/000010', 's/claim.json', 's2/x', 'sa']) {
      await backend.put(key, Buffer.from(key));
    }
    fs.writeFileSync(path.join(dir, 's', 'timeline', '.0123456789abcdef.tmp'), 'half');
    const keys = async (prefix: string) => {
      const out: string[] = [];
      for await (const info of backend.list(prefix)) out.push(info.key);
      return out;
    };
    expect(await keys('s/')).toEqual(['s/claim.json', 's/timeline/000002', 's/timeline/000010']);
    expect(await keys('s')).toEqual(['s/claim.json', 's/timeline/000002', 's/timeline/000010', 's2/x', 'sa']);
    expect(await keys('s/timeline/0000')).toEqual(['s/timeline/000002', 's/timeline/000010']);
    expect(await keys('nothing/')).toEqual([]);
    const [info] = await (async () => {
      const out = [];
      for await (const i of backend.list('sa')) out.push(i);
      return out;
    })();
    expect(info).toMatchObject({ key: 'sa', size: 2 });
    expect(Math.abs(info!.modifiedAt.getTime() - (await backend.now()).getTime())).toBeLessThan(60_000);
  });

  test('delete is idempotent', async () => {
    await backend.put('d/x', Buffer.from('x'));
    await backend.delete('d/x');
    await backend.delete('d/x');
    expect(await backend.stat('d/x')).toBeNull();
  });

  test.each(['', '../x', 'a/../b', 'a//b', '/abs', 'a/.hidden', '.', 'a/', 'sp ace'])(
    'refuses the key %j before touching the disk',
    async (key) => {
      await expect(backend.put(key, Buffer.from('x'))).rejects.toThrow(TypeError);
      await expect(backend.create(key, Buffer.from('x'))).rejects.toThrow(TypeError);
      await expect(backend.read(key)).rejects.toThrow(TypeError);
      await expect(backend.delete(key)).rejects.toThrow(TypeError);
      expect(fs.readdirSync(dir)).toEqual([]);
      expect(fs.existsSync(path.join(dir, '..', 'x'))).toBe(false);
    },
  );

  test('a write that fails midway leaves no object and no temp file', async () => {
    async function* failing(): AsyncIterable<Buffer> {
      yield Buffer.from('part');
      throw new Error('source died');
    }
    await expect(backend.create('f/obj', failing())).rejects.toThrow('source died');
    expect(await backend.stat('f/obj')).toBeNull();
    expect(fs.readdirSync(path.join(dir, 'f'))).toEqual([]);
  });
});
