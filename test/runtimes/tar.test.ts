import { execFile } from 'node:child_process';
import * as fsp from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import { promisify } from 'node:util';
import { extract as tarExtract, pack as tarPack } from 'tar-stream';
import {
  encodeTarHeader,
  readTarHeaderLayout,
  TAR_BLOCK_BYTES,
  tarPaddingBytes,
  tarTrailer,
  type TarEntry,
} from '../../src/runtimes/tar';

const run = promisify(execFile);

interface Extracted {
  name: string;
  type: string;
  mode: number;
  mtime: Date;
  size: number;
  linkname: string | null;
  data: Buffer;
}

let tmp: string;

beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'tar-writer-'));
});

afterAll(async () => {
  await fsp.rm(tmp, { recursive: true, force: true });
});

const file = (name: string, data: string | Buffer, extra: Partial<TarEntry> = {}): [TarEntry, Buffer] => {
  const bytes = Buffer.from(data);
  return [{ name, type: 'file', mode: 0o644, mtime: 1_700_000_000, size: bytes.length, ...extra }, bytes];
};
const directory = (name: string, extra: Partial<TarEntry> = {}): [TarEntry, Buffer] => [
  { name, type: 'directory', mode: 0o755, mtime: 1_700_000_000, size: 0, ...extra },
  Buffer.alloc(0),
];
const symlink = (name: string, linkname: string): [TarEntry, Buffer] => [
  { name, type: 'symlink', mode: 0o777, mtime: 1_700_000_000, size: 0, linkname },
  Buffer.alloc(0),
];

/** An archive of the entries as the writer lays it out: header, content, padding per record, then the trailer. */
function archiveOf(entries: Array<[TarEntry, Buffer]>): Buffer {
  const parts: Buffer[] = [];
  for (const [entry, data] of entries) {
    parts.push(encodeTarHeader(entry), data, Buffer.alloc(tarPaddingBytes(data.length)));
  }
  parts.push(tarTrailer());
  return Buffer.concat(parts);
}

async function untar(archive: Buffer): Promise<Extracted[]> {
  const entries: Extracted[] = [];
  const extract = tarExtract();
  extract.end(archive);
  for await (const entry of extract) {
    const chunks: Buffer[] = [];
    for await (const chunk of entry) chunks.push(chunk as Buffer);
    const { name, type, mode, mtime, size, linkname } = entry.header;
    entries.push({ name, type, mode, mtime, size: size ?? 0, linkname, data: Buffer.concat(chunks) });
  }
  return entries;
}

async function packWithTarStream(entries: Array<[TarEntry, Buffer]>): Promise<Buffer> {
  const pack = tarPack();
  for (const [entry, data] of entries) {
    pack.entry({ ...entry, mtime: new Date(entry.mtime * 1000) }, data);
  }
  pack.finalize();
  const chunks: Buffer[] = [];
  for await (const chunk of pack) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

/** GNU tar's listing of an archive: one line per entry, names as they are (UTF-8). */
async function gnuTarList(archive: Buffer, verbose: boolean): Promise<string[]> {
  const file = path.join(tmp, `archive-${Math.random().toString(36).slice(2)}.tar`);
  await fsp.writeFile(file, archive);
  const flags = [verbose ? '-tvf' : '-tf', file, '--quoting-style=literal', '--numeric-owner', '--full-time'];
  const { stdout } = await run('tar', flags, { env: { ...process.env, LC_ALL: 'C.UTF-8', TZ: 'UTC' } });
  return stdout.split('\n').filter((line) => line !== '');
}

const LONG_DIR = 'd'.repeat(60);
const ENTRIES: Array<[TarEntry, Buffer]> = [
  directory('bin'),
  file('bin/run.sh', '#!/bin/sh\necho run\n', { mode: 0o750 }),
  file('empty', ''),
  file('block', 'x'.repeat(TAR_BLOCK_BYTES)),
  file('setuid', 'y', { mode: 0o4755 }),
  file('no-permissions', 'z', { mode: 0 }),
  file('epoch', 'e', { mtime: 0 }),
  // After 2038, past a signed 32-bit count of seconds; then past 11 octal digits (base-256).
  file('after-2038', 'f', { mtime: 2 ** 32 }),
  file('far-future', 'g', { mtime: 2 ** 33 + 1 }),
  symlink('bin/link', '../empty'),
  // Longer than the 100-byte name field: split into prefix and name at a '/'.
  directory(`${LONG_DIR}/${LONG_DIR}`),
  file(`${LONG_DIR}/${LONG_DIR}/${'n'.repeat(90)}.txt`, 'split'),
  // No '/' leaves a name that fits, or the prefix is too long: a pax path.
  file('a'.repeat(100), 'fills the name field'),
  file(`${'b'.repeat(155)}/${'c'.repeat(100)}`, 'fills prefix and name'),
  file('s'.repeat(150), 'one long segment'),
  file(`${LONG_DIR}/${LONG_DIR}/${LONG_DIR}/${LONG_DIR}/${LONG_DIR}`, 'prefix too long'),
  file(`${'p/'.repeat(300)}deep`, 'very long'),
  symlink('long-link', `${'../'.repeat(10)}${'t'.repeat(120)}`),
  // UTF-8 names: in ustar while they fit, split at a '/' or in pax when they do not.
  file('héllo wörld ✓.txt', 'unicode'),
  directory('日本語'),
  file(`日本語/${'字'.repeat(40)}`, 'split unicode'),
  file('é'.repeat(60), 'pax unicode'),
  symlink('to-unicode', '日本語/名前'),
  symlink('long-unicode-link', `${'é'.repeat(30)}/${'ü'.repeat(30)}`),
];

describe('encodeTarHeader', () => {
  test('tar-stream extracts every entry as it was written: names, types, modes, mtimes, link targets, contents', async () => {
    const extracted = await untar(archiveOf(ENTRIES));
    expect(extracted.map((e) => e.name)).toEqual(ENTRIES.map(([entry]) => entry.name));
    ENTRIES.forEach(([entry, data], i) => {
      expect(extracted[i]).toEqual({
        name: entry.name,
        type: entry.type,
        mode: entry.mode,
        mtime: new Date(entry.mtime * 1000),
        size: entry.size,
        linkname: entry.linkname ?? null,
        data,
      });
    });
  });

  test('GNU tar lists the same entries, with their types, modes, sizes and link targets', async () => {
    const archive = archiveOf(ENTRIES);
    expect(await gnuTarList(archive, false)).toEqual(ENTRIES.map(([entry]) => entry.name));
    const lines = await gnuTarList(archive, true);
    expect(lines).toHaveLength(ENTRIES.length);
    expect(lines[0]).toMatch(/^drwxr-xr-x 0\/0 +0 2023-11-14 22:13:20 bin$/);
    const line = (name: string): string => lines[ENTRIES.findIndex(([entry]) => entry.name === name)]!;
    expect(line('bin/run.sh')).toMatch(/^-rwxr-x--- 0\/0 +19 2023-11-14 22:13:20 bin\/run.sh$/);
    expect(line('setuid')).toMatch(/^-rwsr-xr-x 0\/0 +1 /);
    expect(line('no-permissions')).toMatch(/^---------- 0\/0 +1 /);
    expect(line('block')).toMatch(/^-rw-r--r-- 0\/0 +512 /);
    expect(line('epoch')).toMatch(/ 1970-01-01 00:00:00 epoch$/);
    expect(line('after-2038')).toMatch(/ 2106-02-07 06:28:16 after-2038$/);
    expect(line('far-future')).toMatch(/ 2242-03-16 12:56:33 far-future$/);
    expect(line('bin/link')).toMatch(/^lrwxrwxrwx 0\/0 +0 .* bin\/link -> \.\.\/empty$/);
    expect(line('long-link')).toContain(`long-link -> ${'../'.repeat(10)}${'t'.repeat(120)}`);
    expect(line('to-unicode')).toContain('to-unicode -> 日本語/名前');
  });

  test('for ASCII entries that fit ustar the bytes are those tar-stream wrote', async () => {
    const fitting = ENTRIES.filter(([entry]) => {
      const ascii = /^[\x20-\x7e]*$/.test(entry.name + (entry.linkname ?? ''));
      const fits = entry.name.length <= 100 && (entry.linkname ?? '').length <= 100;
      // tar-stream wrote mode 0 as 0o644 and lost times past 2038 (`| 0`): there the bytes differ on purpose.
      return ascii && fits && entry.mode !== 0 && entry.mtime < 2 ** 31;
    });
    expect(fitting.length).toBeGreaterThan(5);
    expect(archiveOf(fitting)).toEqual(await packWithTarStream(fitting));
  });

  test('pax record lengths are right where the length gains a digit', async () => {
    // Records of 95 to 1105 bytes: around 100 and 1000 the length counts its own extra digit.
    const entries = Array.from({ length: 1010 }, (_, i) => file(`${i}-`.padEnd(90 + i, 'x'), ''));
    const archive = archiveOf(entries);
    expect((await untar(archive)).map((e) => e.name)).toEqual(entries.map(([entry]) => entry.name));
    expect(await gnuTarList(archive, false)).toEqual(entries.map(([entry]) => entry.name));
  });

  test('a size of 8 GiB or more is written in base-256, which tar-stream and GNU tar read', async () => {
    const size = 10 * 1024 ** 3 + 3;
    const header = encodeTarHeader({ name: 'huge.bin', type: 'file', mode: 0o644, mtime: 1_700_000_000, size });
    expect(header).toHaveLength(TAR_BLOCK_BYTES);
    expect(header[124]).toBe(0x80);

    // The header alone: tar-stream reports the entry before it reads any content.
    const extract = tarExtract();
    extract.write(header);
    const iterator = extract[Symbol.asyncIterator]();
    const first = await iterator.next();
    expect(first.done).toBe(false);
    expect((first.value as { header: { name: string; size: number } }).header).toMatchObject({
      name: 'huge.bin',
      size,
    });
    extract.destroy();

    const file = path.join(tmp, 'huge-header.tar');
    await fsp.writeFile(file, header);
    // GNU tar lists the entry, then fails for the missing content.
    const listing = await run('tar', ['-tvf', file]).catch((error: { stdout: string }) => error);
    expect(listing.stdout).toContain(` ${size} `);
  });

  test('headers are a whole number of blocks with valid checksums', () => {
    for (const [entry] of ENTRIES) {
      const header = encodeTarHeader(entry);
      expect(header.length % TAR_BLOCK_BYTES).toBe(0);
      // A pax header block and its data blocks, then the entry's own header block: every header sums right.
      const blocks = [header.subarray(0, TAR_BLOCK_BYTES), header.subarray(header.length - TAR_BLOCK_BYTES)];
      for (const block of header.length > TAR_BLOCK_BYTES ? blocks : blocks.slice(1)) {
        let sum = 8 * 0x20;
        block.forEach((byte, i) => (sum += i >= 148 && i < 156 ? 0 : byte));
        expect(parseInt(block.subarray(148, 154).toString('latin1'), 8)).toBe(sum);
      }
    }
    // The end of an archive is two zero blocks (POSIX ustar).
    expect(tarTrailer()).toEqual(Buffer.alloc(2 * 512));
    expect([0, 1, 511, 512, 513].map(tarPaddingBytes)).toEqual([0, 511, 1, 0, 511]);
  });

  test.each<[string, TarEntry]>([
    ['an empty name', { name: '', type: 'file', mode: 0o644, mtime: 0, size: 0 }],
    ['a NUL in the name', { name: 'a\0b', type: 'file', mode: 0o644, mtime: 0, size: 0 }],
    ['a negative size', { name: 'a', type: 'file', mode: 0o644, mtime: 0, size: -1 }],
    ['a directory with content', { name: 'a', type: 'directory', mode: 0o755, mtime: 0, size: 1 }],
    ['a symlink without a target', { name: 'a', type: 'symlink', mode: 0o777, mtime: 0, size: 0 }],
    ['a file with a link name', { name: 'a', type: 'file', mode: 0o644, mtime: 0, size: 0, linkname: 'b' }],
    ['a fractional mtime', { name: 'a', type: 'file', mode: 0o644, mtime: 1.5, size: 0 }],
  ])('refuses %s', (_, entry) => {
    expect(() => encodeTarHeader(entry)).toThrow(RangeError);
  });
});

describe('readTarHeaderLayout', () => {
  test('reads back the size and the pax flag this encoder writes, octal and base-256', () => {
    const file = encodeTarHeader({ name: 'a.txt', type: 'file', mode: 0o644, mtime: 1_700_000_000, size: 1234 });
    expect(readTarHeaderLayout(file)).toEqual({ pax: false, size: 1234 });
    const huge = 10 * 1024 ** 3 + 3;
    const big = encodeTarHeader({ name: 'huge.bin', type: 'file', mode: 0o644, mtime: 1_700_000_000, size: huge });
    expect(readTarHeaderLayout(big)).toEqual({ pax: false, size: huge });
    // A name too long for ustar: a pax record first, whose content is the pax text; the entry's header follows.
    const long = encodeTarHeader({ name: 'x'.repeat(300), type: 'file', mode: 0o644, mtime: 1_700_000_000, size: 5 });
    const pax = readTarHeaderLayout(long.subarray(0, TAR_BLOCK_BYTES));
    expect(pax?.pax).toBe(true);
    const paxBlocks = Math.ceil(pax!.size / TAR_BLOCK_BYTES);
    const own = long.subarray(TAR_BLOCK_BYTES * (1 + paxBlocks), TAR_BLOCK_BYTES * (2 + paxBlocks));
    expect(readTarHeaderLayout(own)).toEqual({ pax: false, size: 5 });
  });

  test('anything else is null: a short block, a size field that is not octal digits', () => {
    expect(readTarHeaderLayout(Buffer.alloc(100))).toBeNull();
    const bad = encodeTarHeader({ name: 'a', type: 'file', mode: 0o644, mtime: 0, size: 1 });
    bad.write('9', 124);
    expect(readTarHeaderLayout(bad)).toBeNull();
  });
});
