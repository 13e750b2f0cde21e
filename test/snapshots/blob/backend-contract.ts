import { createHash, randomBytes } from 'node:crypto';
import type { Readable } from 'node:stream';
import type { BlobBackend } from '../../../src/snapshots/blob/backend';

export interface BlobBackendFixture {
  backend: BlobBackend;
  cleanup(): Promise<void>;
}

export interface BlobBackendContractOptions {
  /**
   * Size of the streamed bodies that must cross the backend's internal boundaries (S3: a few multipart parts); its
   * tests send it in odd-sized chunks.
   */
  largeBodyBytes?: number;
}

const sha256 = (bytes: Buffer) => createHash('sha256').update(bytes).digest('hex');

async function readAll(stream: Readable): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

/** A valid Date, from whichever realm made it (fs's Dates are not jest's: `expect.any(Date)` says no). */
const isDate = (value: unknown) =>
  Object.prototype.toString.call(value) === '[object Date]' && !Number.isNaN((value as Date).getTime());

async function collect<T>(items: AsyncIterable<T>): Promise<T[]> {
  const all: T[] = [];
  for await (const item of items) all.push(item);
  return all;
}

/** `bytes` as a stream of chunks of an awkward size, as a pack writer would produce them. */
async function* chunked(bytes: Buffer, size = 64 * 1024 + 7): AsyncIterable<Buffer> {
  for (let at = 0; at < bytes.length; at += size) yield bytes.subarray(at, at + size);
}

/** Runs `fn` over `items` with at most `limit` at once. */
async function eachLimited<T>(items: T[], limit: number, fn: (item: T) => Promise<unknown>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: limit }, async () => {
      while (next < items.length) await fn(items[next++]!);
    }),
  );
}

/**
 * The promises of `BlobBackend` (src/snapshots/blob/backend.ts) that the snapshot store rests on, run unchanged against
 * every backend: `factory` makes a fresh, empty backend per test, `cleanup` releases it.
 */
export function describeBlobBackendContract(
  name: string,
  factory: () => Promise<BlobBackendFixture>,
  options: BlobBackendContractOptions = {},
): void {
  const largeBodyBytes = options.largeBodyBytes ?? 12 * 1024 * 1024 + 12_345;

  describe(`blob backend contract: ${name}`, () => {
    let fixture: BlobBackendFixture;
    let backend: BlobBackend;
    beforeEach(async () => {
      fixture = await factory();
      backend = fixture.backend;
    });
    afterEach(async () => {
      await fixture?.cleanup();
    });

    test('create writes a new key once; a second create is refused and stores nothing', async () => {
      expect(await backend.create('s/a.manifest', Buffer.from('first'))).toBe(true);
      expect(await backend.create('s/a.manifest', Buffer.from('second'))).toBe(false);
      expect((await backend.read('s/a.manifest'))?.toString()).toBe('first');
    });

    test('of 20 concurrent creates of one key exactly one wins, and the stored bytes are the winner’s', async () => {
      const bodies = Array.from({ length: 20 }, (_, i) => Buffer.from(`writer ${i} ${randomBytes(8).toString('hex')}`));
      const results = await Promise.all(bodies.map((body) => backend.create('race/claim.json', body)));
      expect(results.filter(Boolean)).toHaveLength(1);
      const winner = bodies[results.indexOf(true)]!;
      expect(await backend.read('race/claim.json')).toEqual(winner);
    });

    test('put writes, and replaces what a key held', async () => {
      await backend.put('p/k', Buffer.from('one'));
      await backend.put('p/k', Buffer.from('two, longer'));
      expect((await backend.read('p/k'))?.toString()).toBe('two, longer');
      expect((await backend.stat('p/k'))?.size).toBe(11);
    });

    test('read: whole, ranges (cut short at the end), nothing for a missing key, maxBytes refuses larger objects', async () => {
      const bytes = Buffer.from('0123456789');
      await backend.put('r/ten', bytes);
      expect(await backend.read('r/missing')).toBeNull();
      expect(await backend.read('r/missing', { range: { offset: 0, length: 4 } })).toBeNull();
      expect(await backend.read('r/ten')).toEqual(bytes);
      expect((await backend.read('r/ten', { range: { offset: 2, length: 3 } }))?.toString()).toBe('234');
      expect((await backend.read('r/ten', { range: { offset: 7, length: 10 } }))?.toString()).toBe('789');
      expect(await backend.read('r/ten', { range: { offset: 10, length: 5 } })).toEqual(Buffer.alloc(0));
      expect(await backend.read('r/ten', { range: { offset: 3, length: 0 } })).toEqual(Buffer.alloc(0));
      expect(await backend.read('r/ten', { maxBytes: 10 })).toEqual(bytes);
      await expect(backend.read('r/ten', { maxBytes: 9 })).rejects.toThrow();
      // maxBytes bounds what one read returns: a range that fits is read.
      expect((await backend.read('r/ten', { range: { offset: 8, length: 5 }, maxBytes: 2 }))?.toString()).toBe('89');
      await expect(backend.read('r/ten', { range: { offset: 0, length: 5 }, maxBytes: 4 })).rejects.toThrow();
      await backend.put('r/empty', Buffer.alloc(0));
      expect(await backend.read('r/empty')).toEqual(Buffer.alloc(0));
      // Sizes about a first read's (a backend may read small objects in one call before asking their size).
      for (const size of [16 * 1024 - 1, 16 * 1024, 16 * 1024 + 1, 100_003]) {
        const body = randomBytes(size);
        await backend.put(`r/sized-${size}`, body);
        expect(sha256((await backend.read(`r/sized-${size}`))!)).toBe(sha256(body));
        expect(sha256((await backend.read(`r/sized-${size}`, { maxBytes: size }))!)).toBe(sha256(body));
        await expect(backend.read(`r/sized-${size}`, { maxBytes: size - 1 })).rejects.toThrow(/more than/);
      }
    });

    test('stream: whole and ranged, null for a missing key', async () => {
      const bytes = randomBytes(300_000);
      await backend.put('st/obj', bytes);
      expect(await backend.stream('st/missing')).toBeNull();
      expect(sha256(await readAll((await backend.stream('st/obj'))!))).toBe(sha256(bytes));
      const range = { offset: 100_001, length: 50_000 };
      const middle = await readAll((await backend.stream('st/obj', { range }))!);
      expect(sha256(middle)).toBe(sha256(bytes.subarray(100_001, 150_001)));
      const tail = await readAll((await backend.stream('st/obj', { range: { offset: 299_990, length: 100 } }))!);
      expect(tail).toEqual(bytes.subarray(299_990));
    });

    test('stat: size and the backend’s modification time; null for a missing key', async () => {
      await backend.put('sz/five', Buffer.from('12345'));
      const info = await backend.stat('sz/five');
      expect(info && { key: info.key, size: info.size }).toEqual({ key: 'sz/five', size: 5 });
      expect(isDate(info?.modifiedAt)).toBe(true);
      expect(await backend.stat('sz/none')).toBeNull();
    });

    test('list: every key under a prefix, in key order, with sizes; a prefix may end mid-segment', async () => {
      // No key is also another's folder ('l/a' beside 'l/a/b'): a filesystem cannot hold both, so no store writes both.
      const keys = ['l/a-b', 'l/a.c', 'l/a/b', 'l/a/c/d', 'l/b', 'l/ab', 'm/x', 'l0'];
      await Promise.all(keys.map((k, i) => backend.put(k, Buffer.alloc(i))));
      const under = async (prefix: string) => {
        const listed = (await collect(backend.list(prefix))).map((i) => i.key);
        // The keys alone are the same keys, in the same order.
        expect(await collect(backend.listKeys(prefix))).toEqual(listed);
        return listed;
      };
      // Byte order, as S3 lists: '-' (0x2d) < '.' (0x2e) < '/' (0x2f) < letters.
      expect(await under('l/')).toEqual(['l/a-b', 'l/a.c', 'l/a/b', 'l/a/c/d', 'l/ab', 'l/b']);
      expect(await under('l/a/')).toEqual(['l/a/b', 'l/a/c/d']);
      expect(await under('l/a')).toEqual(['l/a-b', 'l/a.c', 'l/a/b', 'l/a/c/d', 'l/ab']);
      expect(await under('l')).toEqual(['l/a-b', 'l/a.c', 'l/a/b', 'l/a/c/d', 'l/ab', 'l/b', 'l0']);
      expect(await under('nothing/')).toEqual([]);
      const all = await collect(backend.list(''));
      expect(all.map((i) => i.key)).toEqual([...keys].sort());
      const b = all.find((i) => i.key === 'l/b');
      expect(b?.size).toBe(4);
      expect(isDate(b?.modifiedAt)).toBe(true);
    });

    test('list pages through more than a thousand keys', async () => {
      const keys = Array.from({ length: 1_100 }, (_, i) => `many/${String(i).padStart(5, '0')}`);
      await eachLimited(keys, 32, (key) => backend.put(key, Buffer.from(key)));
      const listed = await collect(backend.list('many/'));
      expect(listed.map((i) => i.key)).toEqual(keys);
      expect(await collect(backend.listKeys('many/'))).toEqual(keys);
    });

    test('delete removes a key; deleting a missing key is not an error; the key can be created again', async () => {
      await backend.put('d/k', Buffer.from('x'));
      await backend.delete('d/k');
      expect(await backend.stat('d/k')).toBeNull();
      expect(await backend.read('d/k')).toBeNull();
      await backend.delete('d/k');
      await backend.delete('d/never');
      expect(await backend.create('d/k', Buffer.from('again'))).toBe(true);
      expect(await collect(backend.list('d/'))).toHaveLength(1);
    });

    test('keys that could name something outside the store are refused with TypeError, and nothing is written', async () => {
      for (const key of ['../x', '', 'a//b', '/a', 'a/', 'a/../b', '.', 'a/./b', 'a b', 'a\\b']) {
        await expect(backend.create(key, Buffer.from('x'))).rejects.toThrow(TypeError);
        await expect(backend.put(key, Buffer.from('x'))).rejects.toThrow(TypeError);
        await expect(backend.read(key)).rejects.toThrow(TypeError);
        await expect(backend.stream(key)).rejects.toThrow(TypeError);
        await expect(backend.stat(key)).rejects.toThrow(TypeError);
        await expect(backend.delete(key)).rejects.toThrow(TypeError);
      }
      await expect(collect(backend.list('../'))).rejects.toThrow(TypeError);
      await expect(collect(backend.list('a//'))).rejects.toThrow(TypeError);
      expect(await collect(backend.list(''))).toEqual([]);
    });

    test('streamed bodies: empty, small, and larger than the backend’s parts, read back whole and in ranges', async () => {
      const large = randomBytes(largeBodyBytes);
      expect(await backend.create('big/pack', chunked(large))).toBe(true);
      expect((await backend.stat('big/pack'))?.size).toBe(large.length);
      expect(sha256((await backend.read('big/pack'))!)).toBe(sha256(large));
      expect(sha256(await readAll((await backend.stream('big/pack'))!))).toBe(sha256(large));
      // A range across the boundaries of any power-of-two part size.
      const range = { offset: 5 * 1024 * 1024 - 1000, length: 4 * 1024 * 1024 };
      const part = await readAll((await backend.stream('big/pack', { range }))!);
      // Digests, not toEqual: jest compares buffers byte by byte as objects, seconds per megabyte.
      expect(sha256(part)).toBe(sha256(large.subarray(range.offset, range.offset + range.length)));

      await backend.put('big/empty', chunked(Buffer.alloc(0)));
      expect(await backend.read('big/empty')).toEqual(Buffer.alloc(0));
      await backend.put('big/small', chunked(Buffer.from('small'), 2));
      expect((await backend.read('big/small'))?.toString()).toBe('small');
    });

    test('a streamed create of a key that exists is refused and leaves the object as it was', async () => {
      expect(await backend.create('big/taken', Buffer.from('kept'))).toBe(true);
      expect(await backend.create('big/taken', chunked(randomBytes(largeBodyBytes)))).toBe(false);
      expect((await backend.read('big/taken'))?.toString()).toBe('kept');
    });

    test('of concurrent streamed creates of one key exactly one wins, whole', async () => {
      const bodies = Array.from({ length: 3 }, () => randomBytes(largeBodyBytes));
      const results = await Promise.all(bodies.map((body) => backend.create('big/race', chunked(body))));
      expect(results.filter(Boolean)).toHaveLength(1);
      expect(sha256((await backend.read('big/race'))!)).toBe(sha256(bodies[results.indexOf(true)]!));
    });

    test('a streamed body that fails part-way fails the write and leaves no object', async () => {
      const large = randomBytes(largeBodyBytes);
      async function* failing(): AsyncIterable<Buffer> {
        yield* chunked(large.subarray(0, large.length - 1000));
        throw new Error('the source broke');
      }
      await expect(backend.create('big/broken', failing())).rejects.toThrow('the source broke');
      await expect(backend.put('big/broken-put', failing())).rejects.toThrow('the source broke');
      expect(await backend.stat('big/broken')).toBeNull();
      expect(await collect(backend.list('big/broken'))).toEqual([]);
    });

    test('now() is the clock modifiedAt is on', async () => {
      await backend.put('clock/fresh', Buffer.from('x'));
      const { modifiedAt } = (await backend.stat('clock/fresh'))!;
      const now = await backend.now();
      // Seconds apart at most: S3 reports both to the second; a backend on another clock would be minutes or hours off.
      expect(Math.abs(now.getTime() - modifiedAt.getTime())).toBeLessThan(5_000);
    });
  });
}
