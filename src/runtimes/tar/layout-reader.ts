import { readTarHeaderLayout, TAR_BLOCK_BYTES, TAR_TRAILER_BYTES, tarHeaderDigest, tarPaddingBytes } from './header';

/** The most pax text one record may hold for the layout to be followed: more than any path a capture writes. */
const MAX_PAX_BYTES = 1024 * 1024;

/** One entry's record in a state stream. */
export interface LaidOutRecord {
  readonly offset: number;
  /** The length and sha256 of everything before the content: the pax record, if any, and the ustar header. */
  readonly headerLength: number;
  readonly headerDigest: string;
  /** Content bytes, before padding. */
  readonly size: number;
}

/** A whole archive: its entry records in stream order, then two zero blocks that end the stream. */
export interface TarLayout {
  readonly records: readonly LaidOutRecord[];
  readonly trailerOffset: number;
}

/**
 * Follows the record layout of a state stream as `readTarStream` feeds it to the reader: where each entry's record
 * starts, its header bytes, its content size, and where the trailer starts. It knows only the layout a capture
 * writes (ustar headers, each after at most one pax record; content padded with zeros; exactly two zero blocks at the
 * end) and gives up on anything else, which costs the restored instance its base and nothing more. It never throws;
 * of each record it keeps the digest of the header, as the index does, not the bytes.
 */
export class TarLayoutReader {
  private failed = false;
  private phase: 'header' | 'pax' | 'content' | 'padding' | 'trailer' = 'header';
  /** Bytes of the stream seen. */
  private offset = 0;
  /** Bytes the current phase still takes; the trailer takes all that come. */
  private wanted = TAR_BLOCK_BYTES;
  /** The header block or pax text being gathered. */
  private gathered: Buffer[] = [];
  /** The current record's header bytes so far: a pax record waiting for its entry's ustar header. */
  private header: Buffer[] = [];
  private recordStart = 0;
  private size = 0;
  private trailerStart = 0;
  private readonly records: LaidOutRecord[] = [];

  push(chunk: unknown): void {
    if (this.failed) return;
    if (!(chunk instanceof Uint8Array)) return this.fail();
    for (let at = 0; at < chunk.length && !this.failed;) {
      const part = chunk.subarray(at, at + Math.min(this.wanted, chunk.length - at));
      at += part.length;
      this.offset += part.length;
      this.wanted -= part.length;
      if (this.phase === 'header' || this.phase === 'pax') this.gathered.push(Buffer.from(part));
      else if ((this.phase === 'padding' || this.phase === 'trailer') && !isAllZero(part)) this.fail();
      while (this.wanted === 0 && !this.failed) this.next();
    }
  }

  /** The layout, or undefined unless every byte was understood and the stream ended with the trailer's last byte. */
  finish(): TarLayout | undefined {
    if (this.failed || this.phase !== 'trailer' || this.offset - this.trailerStart !== TAR_TRAILER_BYTES) {
      return undefined;
    }
    return { records: this.records, trailerOffset: this.trailerStart };
  }

  /** Moves on once the current phase has all its bytes. */
  private next(): void {
    switch (this.phase) {
      case 'header':
        return this.headerBlock(Buffer.concat(this.gathered));
      case 'pax':
        this.header.push(Buffer.concat(this.gathered));
        return this.expect('header', TAR_BLOCK_BYTES);
      case 'content':
        return this.expect('padding', tarPaddingBytes(this.size));
      case 'padding':
        return this.expect('header', TAR_BLOCK_BYTES);
      case 'trailer':
        return this.fail(); // never: the trailer takes all that come
    }
  }

  private headerBlock(block: Buffer): void {
    const start = this.offset - TAR_BLOCK_BYTES;
    if (isAllZero(block)) {
      // The end of the archive, unless a pax record is still waiting for its entry. The extractor skips zero blocks
      // and reads on, so anything but zeros from here on fails the layout.
      if (this.header.length > 0) return this.fail();
      this.trailerStart = start;
      return this.expect('trailer', Infinity);
    }
    const layout = readTarHeaderLayout(block);
    if (!layout) return this.fail();
    if (this.header.length === 0) this.recordStart = start;
    this.header.push(block);
    if (layout.pax) {
      // One pax record per entry, as `encodeTarHeader` writes; its text and padding belong to the entry's header.
      if (this.header.length > 1 || layout.size > MAX_PAX_BYTES) return this.fail();
      return this.expect('pax', layout.size + tarPaddingBytes(layout.size));
    }
    const header = Buffer.concat(this.header);
    const { recordStart: offset } = this;
    this.records.push({
      offset,
      headerLength: header.length,
      headerDigest: tarHeaderDigest(header),
      size: layout.size,
    });
    this.header = [];
    this.size = layout.size;
    this.expect('content', layout.size);
  }

  private expect(phase: TarLayoutReader['phase'], bytes: number): void {
    this.phase = phase;
    this.wanted = bytes;
    this.gathered = [];
  }

  private fail(): void {
    this.failed = true;
    this.gathered = [];
    this.header = [];
  }
}

function isAllZero(bytes: Uint8Array): boolean {
  for (const byte of bytes) if (byte !== 0) return false;
  return true;
}
