import { readTarHeaderLayout, tarPaddingBytes } from '../runtimes/tar';

const BLOCK = 512;

/**
 * Walks a `tar/1` stream's structure as it goes by, without holding more than one header block: every header's
 * checksum, the records' sizes, and the end-of-archive marker at a record boundary. A state that ends cleanly but cut
 * short (even between two entries, where it would read as a valid shorter archive), or that is no tar at all, is told
 * apart from a whole one before it is kept anywhere. Contents are skipped, not read.
 */
export class TarStreamCheck {
  /** Content and padding bytes of the current record still to pass. */
  private skip = 0;
  private readonly block = Buffer.alloc(BLOCK);
  private filled = 0;
  private zeroBlocks = 0;
  private problem: string | undefined;

  /** Takes the next bytes; returns why the stream is not a tar archive, once that is known. */
  update(chunk: Uint8Array): string | undefined {
    let at = 0;
    while (at < chunk.length && this.problem === undefined) {
      if (this.skip > 0) {
        const passed = Math.min(this.skip, chunk.length - at);
        this.skip -= passed;
        at += passed;
        continue;
      }
      const taken = Math.min(BLOCK - this.filled, chunk.length - at);
      this.block.set(chunk.subarray(at, at + taken), this.filled);
      this.filled += taken;
      at += taken;
      if (this.filled < BLOCK) break;
      this.filled = 0;
      this.header();
    }
    return this.problem;
  }

  /** Whether the bytes so far are a whole archive: they end at a record boundary, after the end-of-archive marker. */
  get ended(): boolean {
    return this.problem === undefined && this.zeroBlocks >= 2 && this.filled === 0 && this.skip === 0;
  }

  private header(): void {
    const sum = byteSum(this.block);
    if (sum === 0) {
      // Two zero blocks end the archive; some writers pad on with more to a record size.
      this.zeroBlocks += 1;
      return;
    }
    if (this.zeroBlocks >= 2) return void (this.problem = 'bytes follow the end-of-archive marker');
    if (this.zeroBlocks === 1) return void (this.problem = 'a lone zero block where a header belongs');
    if (!checksumMatches(this.block, sum)) return void (this.problem = 'a header block whose checksum does not match');
    const layout = readTarHeaderLayout(this.block);
    if (!layout) return void (this.problem = 'a header whose size cannot be read');
    this.skip = layout.size + tarPaddingBytes(layout.size);
  }
}

function byteSum(block: Buffer): number {
  let sum = 0;
  for (let i = 0; i < BLOCK; i++) sum += block[i]!;
  return sum;
}

/** The checksum field (octal) against the sum of the block's bytes, the field itself counted as eight spaces. */
function checksumMatches(block: Buffer, sum: number): boolean {
  let expected = sum + 8 * 0x20;
  for (let i = 148; i < 156; i++) expected -= block[i]!;
  // Octal digits, perhaps led by spaces, ended by a NUL or a space.
  let value = 0;
  let digits = 0;
  let i = 148;
  while (i < 156 && block[i] === 0x20) i++;
  for (; i < 156; i++) {
    const byte = block[i]!;
    if (byte >= 0x30 && byte <= 0x37) {
      value = value * 8 + (byte - 0x30);
      digits += 1;
    } else if (byte === 0 || byte === 0x20) break;
    else return false;
  }
  return digits > 0 && value === expected;
}
