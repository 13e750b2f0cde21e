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

export interface ArenaInfo {
  system: number;
  free: number;
  /** The threads whose allocations go to this arena, by name (Node's own are all "node" unless labelled). */
  threads: string[];
}

export interface MallocInfo {
  arenas: number;
  perArena: ArenaInfo[];
  /** Bytes the arenas (brk heap and mmap'd heaps) hold from the kernel, and of those, in free chunks. */
  system: number;
  free: number;
  /** Blocks above the mmap threshold, each its own mapping, returned to the kernel when freed. */
  mmapped: number;
}

async function gdb(...commands: string[]): Promise<string> {
  const args = ['-p', String(process.pid), '-batch', '-nx', ...commands.flatMap((c) => ['-ex', c])];
  return (await run('gdb', args, { timeout: 60_000, maxBuffer: 16 * 1024 * 1024 })).stdout;
}

/**
 * Lists the arenas in malloc_info's order (the main arena, then its `next` chain) and the arena each thread
 * allocates from, as `arena <n> <address>` and `uses <address>` lines under gdb's thread headers.
 */
const ARENAS_AND_THREADS = `set pagination off
set $a = &main_arena
set $i = 0
while $i >= 0
  printf "arena %d %lx\\n", $i, (unsigned long) $a
  set $a = $a->next
  set $i = $i + 1
  if $a == &main_arena
    set $i = -1
  end
end
thread apply all printf "uses %lx\\n", (unsigned long) thread_arena
`;

/** `names` labels threads by id (e.g. the worker threads'); the others go by their own name. */
export async function mallocInfo(names: Map<number, string>): Promise<MallocInfo> {
  const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'malloc-info-')), 'info.xml');
  try {
    const script = path.join(path.dirname(file), 'arenas.gdb');
    fs.writeFileSync(script, ARENAS_AND_THREADS);
    const out = await gdb(
      `source ${script}`,
      `set $f = (void *) fopen("${file}", "w")`,
      'call (int) malloc_info(0, $f)',
      'call (int) fclose($f)',
    );
    const xml = fs.readFileSync(file, 'utf8');
    // The totals follow the last heap's element.
    const totals = xml.slice(xml.lastIndexOf('</heap>'));
    const attr = (type: string, tag: string) =>
      Number(new RegExp(`<${tag} type="${type}"[^>]*size="(\\d+)"`).exec(totals)?.[1] ?? NaN);
    const arenaAt = new Map<string, number>();
    for (const [, nr = '', address = ''] of out.matchAll(/^arena (\d+) ([0-9a-f]+)$/gm))
      arenaAt.set(address, Number(nr));
    const threadsOf = new Map<number, string[]>();
    for (const [, lwp = '', name = '', address = ''] of out.matchAll(/\(LWP (\d+)\) "([^"]*)"\):\nuses ([0-9a-f]+)/g)) {
      const nr = arenaAt.get(address);
      if (nr === undefined) continue;
      threadsOf.set(nr, [...(threadsOf.get(nr) ?? []), names.get(Number(lwp)) ?? name]);
    }
    const perArena = [...xml.matchAll(/<heap nr="(\d+)">([\s\S]*?)<\/heap>/g)].map(([, nr = '', body = '']) => {
      const size = (type: string, tag: string) =>
        Number(new RegExp(`<${tag} type="${type}"[^>]*size="(\\d+)"`).exec(body)?.[1] ?? 0);
      return {
        system: size('current', 'system'),
        free: size('fast', 'total') + size('rest', 'total'),
        threads: threadsOf.get(Number(nr)) ?? [],
      };
    });
    return {
      arenas: perArena.length,
      perArena,
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
