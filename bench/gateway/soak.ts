/**
 * Gateway soak: starts, checkpoints and stops many memory sessions through the HTTP gateway (loopback only, in this
 * process beside the workers and the dev server, as `npm start` runs them) and prints the process's RSS and V8 heap
 * before, at the peak and after, the "after" once the sessions have stopped and a full GC ran. It stops by itself.
 *
 *   npx tsx bench/gateway/soak.ts                  # 1,000 sessions, 20 at a time
 *   npx tsx bench/gateway/soak.ts --count 200      # fewer
 *   npx tsx bench/gateway/soak.ts --rounds 2       # the same again after the first "after": a leak grows each round
 *   npx tsx bench/gateway/soak.ts --heap           # also writes heap snapshots before and after (.bench/soak-*.heapsnapshot)
 *   npx tsx bench/gateway/soak.ts --malloc         # also glibc's own account before and after, and RSS after malloc_trim (gdb)
 *
 * Nothing here asserts: it prints (and writes to .bench/gateway-soak.md) what it measured.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import * as v8 from 'node:v8';
import * as vm from 'node:vm';
import { startBenchGateway } from './bench-gateway';
import { isolateHeaps, memoryMap, type IsolateHeap, type MemoryMap } from './memory-map';
import { mallocInfo, mallocTrim, type MallocInfo } from './malloc';
import { table } from '../markdown';
import { runWithCleanup, type Cleanup } from '../sessions/cleanup';

const RESULTS_DIR = path.resolve(__dirname, '..', '..', '.bench');
const MiB = 1024 * 1024;

function arg(name: string, fallback: number): number {
  const i = process.argv.indexOf(name);
  return i >= 0 ? Number(process.argv[i + 1]) : fallback;
}

/** A full collection, as far as this process can ask for one. */
function collect(): void {
  v8.setFlagsFromString('--expose-gc');
  (vm.runInNewContext('gc') as () => void)();
}

interface Sample {
  rss: number;
  heapUsed: number;
  heapTotal: number;
  external: number;
}
const sample = (): Sample => {
  const m = process.memoryUsage();
  return { rss: m.rss, heapUsed: m.heapUsed, heapTotal: m.heapTotal, external: m.external };
};

/** What one moment of the soak looked like: the full account at "before" and "after", a cheaper one at the peak. */
interface Point {
  what: string;
  m: Sample;
  map: MemoryMap;
  heaps?: IsolateHeap[];
  malloc?: MallocInfo;
}

async function main(cleanup: Cleanup): Promise<void> {
  const count = arg('--count', 1_000);
  const rounds = arg('--rounds', 1);
  const concurrency = arg('--concurrency', 20);
  const heap = process.argv.includes('--heap');
  const malloc = process.argv.includes('--malloc');
  const { sys, key, gateway } = await startBenchGateway(cleanup, 'ds-soak-');
  fs.mkdirSync(RESULTS_DIR, { recursive: true });

  const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
  const post = async (route: string, body: unknown) => {
    const res = await fetch(`${gateway.url}${route}`, { method: 'POST', headers, body: JSON.stringify(body) });
    if (!res.ok) throw new Error(`POST ${route}: ${res.status} ${await res.text()}`);
    return res.json();
  };
  /** The full account: every isolate collected first, so that what stays is what is held. */
  const settled = async (what: string): Promise<Point> => {
    collect();
    const heaps = await isolateHeaps();
    const names = new Map(heaps.map((h) => [h.tid, h.thread === 'main' ? 'main' : 'worker thread']));
    return { what, m: sample(), map: memoryMap(), heaps, ...(malloc ? { malloc: await mallocInfo(names) } : {}) };
  };
  // One session first, so that "before" holds what any use of the stack loads (bundles, connections, caches).
  const warm = `soak-${sys.runId}-warm`;
  await post('/v1/sessions', { sessionId: warm, runtime: { kind: 'memory' } });
  await post(`/v1/sessions/${warm}/stop`, { checkpoint: false });
  const before = await settled('before');
  console.log(summary(before));
  const points: Point[] = [before];
  if (heap) v8.writeHeapSnapshot(path.join(RESULTS_DIR, 'soak-before.heapsnapshot'));
  let peak: Point = before;
  let mapRead = 0;
  const sampler = setInterval(() => {
    const now = sample();
    if (now.rss <= peak.m.rss) return;
    // The mappings are read at most every 2 s: reading them is not free, and a peak lasts longer than that.
    if (Date.now() - mapRead > 2_000) {
      peak = { what: peak.what, m: now, map: memoryMap() };
      mapRead = Date.now();
    } else peak = { ...peak, m: now };
  }, 200);

  let seconds = 0;
  let after = before;
  for (let round = 1; round <= rounds; round++) {
    peak = { what: `peak, round ${round}`, m: sample(), map: memoryMap() };
    const started = Date.now();
    let next = 0;
    let done = 0;
    await Promise.all(
      Array.from({ length: concurrency }, async () => {
        while (next < count) {
          const sessionId = `soak-${sys.runId}-${round}-${next++}`;
          await post('/v1/sessions', { sessionId, runtime: { kind: 'memory', initialState: 'x'.repeat(1024) } });
          await post(`/v1/sessions/${sessionId}/checkpoint`, { label: 'soak' });
          await post(`/v1/sessions/${sessionId}/stop`, { checkpoint: false });
          if (++done % 100 === 0) console.log(`${done}/${count} sessions (${Math.round(sample().rss / MiB)} MiB RSS)`);
        }
      }),
    );
    seconds += (Date.now() - started) / 1000;
    // The workers finish what the stops left (workflow tasks, cache evictions) before "after" is read.
    await new Promise((r) => setTimeout(r, 5_000));
    after = await settled(`after round ${round}`);
    points.push(peak, after);
    console.log(`${summary(after)} (load ${loadavg()})`);
  }
  clearInterval(sampler);
  if (heap) v8.writeHeapSnapshot(path.join(RESULTS_DIR, 'soak-after.heapsnapshot'));
  let trimmed: Sample | undefined;
  if (malloc) {
    await mallocTrim();
    trimmed = sample();
  }

  const workflowThreads = (p: Point) =>
    p.heaps ? mib(p.heaps.filter((h) => h.thread !== 'main').reduce((n, h) => n + h.physical, 0)) : '–';
  const mainPhysical = (p: Point) => (p.heaps ? mib(p.heaps.find((h) => h.thread === 'main')?.physical ?? 0) : '–');
  const report = [
    `# Gateway soak (${new Date().toISOString().slice(0, 16)}Z, ${os.cpus().length} cores, load ${loadavg()})`,
    '',
    `${rounds} × ${count} memory sessions started, checkpointed and stopped through the gateway, ${concurrency} at a time, in ${seconds.toFixed(0)} s${process.env.MALLOC_ARENA_MAX ? `, MALLOC_ARENA_MAX=${process.env.MALLOC_ARENA_MAX}` : ''}.`,
    '',
    table(
      ['', 'RSS', 'main heap used', 'main heap committed', 'external (array buffers included)'],
      points.map(({ what, m }) => [what, mib(m.rss), mib(m.heapUsed), mib(m.heapTotal), mib(m.external)]),
    ),
    '',
    'Resident memory by mapping (/proc/self/smaps) and the V8 heaps resident in it (after a full GC in every isolate):',
    '',
    table(
      ['', 'brk + glibc arenas', 'other anonymous', 'V8 main', 'V8 worker threads', 'thread stacks', 'files'],
      points.map((p) => [
        p.what,
        `${mib(p.map.brk + p.map.arenas)} (${p.map.arenaHeaps} heaps)`,
        mib(p.map.otherAnonymous),
        mainPhysical(p),
        workflowThreads(p),
        mib(p.map.stacks),
        mib(p.map.files),
      ]),
    ),
    '',
    ...(malloc
      ? [
          "glibc's account (malloc_info): bytes its arenas hold, of those free, and blocks mmap'd apart:",
          '',
          table(
            ['', 'arenas', 'held', 'free in them', 'in use', "mmap'd blocks"],
            points
              .filter((p) => p.malloc)
              .map(({ what, malloc: i }) => [
                what,
                String(i!.arenas),
                mib(i!.system),
                mib(i!.free),
                mib(i!.system - i!.free),
                mib(i!.mmapped),
              ]),
          ),
          '',
          'The same by the threads that allocate from each arena (bytes in use, and free but kept):',
          '',
          table(
            ['threads', ...points.filter((p) => p.malloc).flatMap((p) => [`${p.what}: in use`, 'free'])],
            byThreads(points.flatMap((p) => (p.malloc ? [p.malloc] : []))),
          ),
          '',
          `RSS after malloc_trim(0): ${mib(trimmed!.rss)} (from ${mib(after.m.rss)}).`,
          '',
        ]
      : []),
  ].join('\n');
  console.log(report);
  fs.writeFileSync(path.join(RESULTS_DIR, 'gateway-soak.md'), report);
}

/**
 * Arenas grouped by the kinds of thread that allocate from them: the main thread, the workflow worker threads,
 * Node's other threads (V8's platform, libuv's pool) and the Temporal core's (Rust) threads, which go by their names.
 */
function byThreads(infos: MallocInfo[]): string[][] {
  const kind = (name: string) =>
    ['main', 'worker thread'].includes(name) ? name : name === 'node' ? 'other Node' : 'Temporal core';
  const keyOf = (threads: string[]) => [...new Set(threads.map(kind))].sort().join(' + ') || 'none now';
  const keys = [...new Set(infos.flatMap((i) => i.perArena.map((a) => keyOf(a.threads))))].sort();
  return keys.map((key) => [
    key,
    ...infos.flatMap((i) => {
      const arenas = i.perArena.filter((a) => keyOf(a.threads) === key);
      const free = arenas.reduce((n, a) => n + a.free, 0);
      const tenth = (n: number) => `${(n / MiB).toFixed(1)} MiB`;
      return [tenth(arenas.reduce((n, a) => n + a.system, 0) - free), tenth(free)];
    }),
  ]);
}

/** One line per full account, printed as it is taken: a run cut short still tells what it saw. */
function summary(p: Point): string {
  const v8Workers = (p.heaps ?? []).filter((h) => h.thread !== 'main').reduce((n, h) => n + h.physical, 0);
  const v8Main = p.heaps?.find((h) => h.thread === 'main')?.physical ?? 0;
  const v8Malloced = (p.heaps ?? []).reduce((n, h) => n + h.malloced, 0);
  const glibc = p.malloc ? `, glibc holds ${mib(p.malloc.system)} of which ${mib(p.malloc.free)} free` : '';
  return (
    `${p.what}: RSS ${mib(p.m.rss)}, brk + arenas ${mib(p.map.brk + p.map.arenas)}, other anonymous ` +
    `${mib(p.map.otherAnonymous)} (V8 main ${mib(v8Main)}, worker threads ${mib(v8Workers)}), V8's own malloc'd ${mib(v8Malloced)}${glibc}`
  );
}

const mib = (n: number) => `${(n / MiB).toFixed(0)} MiB`;
const loadavg = () =>
  os
    .loadavg()
    .map((l) => l.toFixed(1))
    .join(' ');

runWithCleanup('gateway soak', main);
