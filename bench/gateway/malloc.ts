/**
 * glibc's own account of this process's malloc heaps, read by calling `malloc_info` in it through gdb (Node has no
 * binding for it), and `malloc_trim`, which hands the free pages of every arena back to the kernel. Measurement only;
 * needs gdb and permission to ptrace this process.
 */
import { execFile } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

export interface MallocInfo {
  arenas: number;
  /** Bytes the arenas (brk heap and mmap'd heaps) hold from the kernel, and of those, in free chunks. */
  system: number;
  free: number;
  /** Blocks above the mmap threshold, each its own mapping, returned to the kernel when freed. */
  mmapped: number;
}

async function gdb(...commands: string[]): Promise<void> {
  const args = ['-p', String(process.pid), '-batch', '-nx', ...commands.flatMap((c) => ['-ex', c])];
  await run('gdb', args, { timeout: 60_000 });
}

export async function mallocInfo(): Promise<MallocInfo> {
  const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'malloc-info-')), 'info.xml');
  try {
    await gdb(`set $f = (void *) fopen("${file}", "w")`, 'call (int) malloc_info(0, $f)', 'call (int) fclose($f)');
    const xml = fs.readFileSync(file, 'utf8');
    // The totals follow the last heap's element.
    const totals = xml.slice(xml.lastIndexOf('</heap>'));
    const attr = (type: string, tag: string) =>
      Number(new RegExp(`<${tag} type="${type}"[^>]*size="(\\d+)"`).exec(totals)?.[1] ?? NaN);
    return {
      arenas: (xml.match(/<heap nr=/g) ?? []).length,
      system: attr('current', 'system'),
      free: attr('fast', 'total') + attr('rest', 'total'),
      mmapped: attr('mmap', 'total'),
    };
  } finally {
    fs.rmSync(path.dirname(file), { recursive: true, force: true });
  }
}

export async function mallocTrim(): Promise<void> {
  await gdb('call (int) malloc_trim(0)');
}
