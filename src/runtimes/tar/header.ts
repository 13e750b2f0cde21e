/**
 * A deterministic tar encoder (ustar, with pax extended headers for what ustar cannot hold). It gives the exact
 * bytes of each record's header, so a caller knows where every record starts in the stream it writes.
 *
 * For ASCII names and link names that fit ustar, its headers are byte for byte those of tar-stream's `pack`,
 * which wrote workspace captures before (field layout, number formats, the checksum's trailing space), so a
 * capture of an unchanged tree keeps its bytes. Where tar-stream was wrong this is not: it wrote mode 0 as 0o644
 * and times after 2038 as garbage. Everything it writes is read back by tar-stream's `extract` (what restore
 * uses) and by GNU tar.
 */

import { createHash } from 'node:crypto';

/** What a record describes. Sizes are content bytes; only files have content. */
export type TarEntryType = 'file' | 'directory' | 'symlink';

export interface TarEntry {
  /** Relative path, '/'-separated, without a trailing '/' (tar-stream wrote directories without one too). */
  readonly name: string;
  readonly type: TarEntryType;
  /** Permission bits; anything above 0o7777 is dropped. */
  readonly mode: number;
  /** Whole seconds since the epoch (`Math.floor(ms / 1000)`). Times before 1970 are written as 1970. */
  readonly mtime: number;
  /** Content bytes: the file's size, 0 for directories and symlinks. */
  readonly size: number;
  /** The target of a symlink; absent for other types. */
  readonly linkname?: string;
}

export const TAR_BLOCK_BYTES = 512;
/** Two zero blocks end an archive. */
export const TAR_TRAILER_BYTES = 2 * TAR_BLOCK_BYTES;

const NAME_BYTES = 100;
const PREFIX_BYTES = 155;
const LINKNAME_BYTES = 100;
/** The largest value an 11-digit octal field holds: sizes and times beyond it are written in base-256. */
const MAX_OCTAL_11 = 8 ** 11 - 1;
/** The name tar-stream gave pax header records; readers ignore it. */
const PAX_HEADER_NAME = 'PaxHeader';

const TYPEFLAGS: Record<TarEntryType | 'pax', number> = {
  file: 0x30, // '0'
  symlink: 0x32, // '2'
  directory: 0x35, // '5'
  pax: 0x78, // 'x'
};

/**
 * The header bytes of `entry`'s record: a pax extended header record first when the name or link name does not
 * fit ustar, then the ustar header. A multiple of 512 bytes; the same entry always gives the same bytes.
 */
export function encodeTarHeader(entry: TarEntry): Buffer {
  validate(entry);
  const name = Buffer.from(entry.name, 'utf8');
  const linkname = Buffer.from(entry.linkname ?? '', 'utf8');
  const split = splitName(name);
  const pax: Array<[string, Buffer]> = [];
  if (!split) pax.push(['path', name]);
  if (linkname.length > LINKNAME_BYTES) pax.push(['linkpath', linkname]);

  const header = ustarHeader({
    name: split?.name ?? truncateUtf8(name, NAME_BYTES),
    prefix: split?.prefix ?? Buffer.alloc(0),
    typeflag: TYPEFLAGS[entry.type],
    mode: entry.mode,
    mtime: entry.mtime,
    size: entry.size,
    linkname: truncateUtf8(linkname, LINKNAME_BYTES),
  });
  if (pax.length === 0) return header;

  const records = encodePaxRecords(pax);
  const paxHeader = ustarHeader({
    name: Buffer.from(PAX_HEADER_NAME),
    prefix: Buffer.alloc(0),
    typeflag: TYPEFLAGS.pax,
    mode: entry.mode,
    mtime: entry.mtime,
    size: records.length,
    linkname: Buffer.alloc(0),
  });
  return Buffer.concat([paxHeader, records, Buffer.alloc(tarPaddingBytes(records.length)), header]);
}

/**
 * What a reader needs from a header block to find the next record: whether it is a pax extended header (its content
 * is the pax text, and the entry's own header follows it) and its content size. The size is read in the forms this
 * encoder writes (octal digits ended by a space or NUL, or base-256 after 0x80); null for any other form. Neither the
 * checksum nor the magic is checked: a caller that relies on the block compares it whole with the header it expects.
 */
export function readTarHeaderLayout(block: Uint8Array): { pax: boolean; size: number } | null {
  if (block.length !== TAR_BLOCK_BYTES) return null;
  const size = readNumber12(block, 124);
  return size === null ? null : { pax: block[156] === TYPEFLAGS.pax, size };
}

/** The bytes of a whole record: its headers, `size` bytes of content and the padding after them. */
export function tarRecordLength(headerLength: number, size: number): number {
  return headerLength + size + tarPaddingBytes(size);
}

/** The zero bytes that follow `size` bytes of content, up to the next 512-byte boundary. */
export function tarPaddingBytes(size: number): number {
  const tail = size % TAR_BLOCK_BYTES;
  return tail === 0 ? 0 : TAR_BLOCK_BYTES - tail;
}

/** The bytes that end an archive. */
export function tarTrailer(): Buffer {
  return Buffer.alloc(TAR_TRAILER_BYTES);
}

/** What records are compared by: the sha256 of their header bytes (pax and ustar), base64. */
export function tarHeaderDigest(header: Uint8Array): string {
  return createHash('sha256').update(header).digest('base64');
}

function validate(entry: TarEntry): void {
  if (entry.name === '' || entry.name.includes('\0')) {
    throw new RangeError(`tar entry name ${JSON.stringify(entry.name)} is empty or holds a NUL`);
  }
  if (!Number.isSafeInteger(entry.size) || entry.size < 0) {
    throw new RangeError(`tar entry ${entry.name} has an invalid size ${entry.size}`);
  }
  if (entry.type !== 'file' && entry.size !== 0) {
    throw new RangeError(`tar entry ${entry.name} is a ${entry.type} and cannot have content`);
  }
  if (!Number.isSafeInteger(entry.mode) || !Number.isSafeInteger(entry.mtime)) {
    throw new RangeError(`tar entry ${entry.name} has an invalid mode or mtime`);
  }
  const { linkname } = entry;
  if (entry.type === 'symlink' ? !linkname || linkname.includes('\0') : linkname !== undefined) {
    throw new RangeError(`tar entry ${entry.name}: only a symlink has a link name, and it is non-empty without NULs`);
  }
}

/**
 * The ustar split of a name into prefix (155 bytes) and name (100 bytes) at a '/', or null when none fits (the
 * path then goes into a pax record). The shortest prefix that leaves a fitting name is taken, as tar-stream did;
 * no longer prefix can fit where it does not. Splitting bytes at 0x2f never cuts a UTF-8 character.
 */
function splitName(name: Buffer): { name: Buffer; prefix: Buffer } | null {
  if (name.length <= NAME_BYTES) return { name, prefix: Buffer.alloc(0) };
  for (let slash = name.indexOf(0x2f); slash !== -1; slash = name.indexOf(0x2f, slash + 1)) {
    const rest = name.length - slash - 1;
    if (rest > NAME_BYTES) continue;
    if (slash === 0 || rest === 0 || slash > PREFIX_BYTES) return null;
    return { name: name.subarray(slash + 1), prefix: name.subarray(0, slash) };
  }
  return null;
}

/**
 * At most `max` bytes of `bytes`, cut at a character boundary: what a reader that ignores pax sees in place of a
 * path or link name too long for ustar.
 */
function truncateUtf8(bytes: Buffer, max: number): Buffer {
  if (bytes.length <= max) return bytes;
  let end = max;
  while (end > 0 && ((bytes[end] ?? 0) & 0xc0) === 0x80) end--;
  return bytes.subarray(0, end);
}

/** pax records, each `<length> <key>=<value>\n` where the length counts the whole record, its own digits too. */
function encodePaxRecords(fields: Array<[string, Buffer]>): Buffer {
  return Buffer.concat(
    fields.map(([key, value]) => {
      const rest = Buffer.byteLength(` ${key}=`) + value.length + 1;
      let length = rest + String(rest).length;
      if (String(length).length > String(rest).length) length = rest + String(length).length;
      return Buffer.concat([Buffer.from(`${length} ${key}=`), value, Buffer.from('\n')]);
    }),
  );
}

interface UstarFields {
  name: Buffer;
  prefix: Buffer;
  typeflag: number;
  mode: number;
  mtime: number;
  size: number;
  linkname: Buffer;
}

function ustarHeader(fields: UstarFields): Buffer {
  const block = Buffer.alloc(TAR_BLOCK_BYTES);
  fields.name.copy(block, 0);
  writeOctal(block, 100, fields.mode & 0o7777, 6); // mode
  writeOctal(block, 108, 0, 6); // uid
  writeOctal(block, 116, 0, 6); // gid
  writeNumber12(block, 124, fields.size);
  // A time before 1970 has no octal form, and tar-stream reads base-256 negatives off by one: 1970 instead.
  writeNumber12(block, 136, Math.max(0, fields.mtime));
  block[156] = fields.typeflag;
  fields.linkname.copy(block, 157);
  block.write('ustar\0', 257, 'latin1'); // magic
  block.write('00', 263, 'latin1'); // version
  // uname and gname stay empty (zeros).
  writeOctal(block, 329, 0, 6); // devmajor
  writeOctal(block, 337, 0, 6); // devminor
  fields.prefix.copy(block, 345);
  writeOctal(block, 148, checksum(block), 6);
  return block;
}

/** `digits` octal digits and a space (the field's last byte, if any, stays NUL), as tar-stream wrote them. */
function writeOctal(block: Buffer, offset: number, value: number, digits: number): void {
  block.write(`${value.toString(8).padStart(digits, '0')} `, offset, 'latin1');
}

/** A 12-byte size or time field: 11 octal digits and a space, or base-256 (0x80, then big-endian) above that. */
function writeNumber12(block: Buffer, offset: number, value: number): void {
  if (value <= MAX_OCTAL_11) return writeOctal(block, offset, value, 11);
  block[offset] = 0x80;
  let rest = value;
  for (let i = 11; i > 0; i--) {
    block[offset + i] = rest % 256;
    rest = Math.floor(rest / 256);
  }
}

/** A 12-byte field as `writeNumber12` writes it, or null when it holds anything else (or more than a safe integer). */
function readNumber12(block: Uint8Array, offset: number): number | null {
  const field = block.subarray(offset, offset + 12);
  let value = 0;
  if (field[0] === 0x80) {
    for (let i = 1; i < 12; i++) value = value * 256 + (field[i] ?? 0);
    return Number.isSafeInteger(value) ? value : null;
  }
  let digits = 0;
  for (; digits < 12; digits++) {
    const byte = field[digits] ?? 0;
    if (byte === 0x20 || byte === 0) break;
    if (byte < 0x30 || byte > 0x37) return null;
    value = value * 8 + (byte - 0x30);
  }
  return digits > 0 && digits < 12 ? value : null;
}

/** The sum of the header's bytes with the checksum field counted as eight spaces. */
function checksum(block: Buffer): number {
  let sum = 8 * 0x20;
  for (let i = 0; i < TAR_BLOCK_BYTES; i++) if (i < 148 || i >= 156) sum += block[i] ?? 0;
  return sum;
}
