/**
 * Where a Linux process's resident memory is: its mappings (/proc/self/smaps) sorted into what holds them, and the
 * V8 heaps of every isolate in it (the main thread's and, through the inspector, each worker thread's, such as the
 * Temporal SDK's workflow threads). Measurement only: the benches print it, nothing depends on it.
 */
import * as fs from 'node:fs';
import * as inspector from 'node:inspector';
import * as v8 from 'node:v8';

/** glibc's non-main arenas are heaps of at most this size, mapped at addresses aligned to it (HEAP_MAX_SIZE, 64-bit). */
const ARENA_HEAP = 64n * 1024n * 1024n;
const PAGE = 4096n;

export interface MemoryMap {
  /** Resident bytes by kind of mapping. */
  brk: number;
  arenas: number;
  /** glibc heaps found (each ≤ 64 MiB; an arena grows by more of them). */
  arenaHeaps: number;
  stacks: number;
  files: number;
  /** Every other anonymous mapping: V8's heap pages and JIT code, and malloc's blocks above its mmap threshold. */
  otherAnonymous: number;
  total: number;
}

interface Mapping {
  start: bigint;
  end: bigint;
  perms: string;
  path: string;
  rss: number;
}

function readMappings(): Mapping[] {
  const out: Mapping[] = [];
  let current: Mapping | undefined;
  for (const line of fs.readFileSync('/proc/self/smaps', 'utf8').split('\n')) {
    const header = /^([0-9a-f]+)-([0-9a-f]+) (\S+) \S+ \S+ \S+\s*(.*)$/.exec(line);
    if (header) {
      const [, start = '0', end = '0', perms = '', path = ''] = header;
      current = { start: BigInt(`0x${start}`), end: BigInt(`0x${end}`), perms, path, rss: 0 };
      out.push(current);
    } else if (current && line.startsWith('Rss:')) {
      current.rss = Number(/(\d+)/.exec(line)?.[1]) * 1024;
    }
  }
  return out;
}

/**
 * Sorts the resident memory by mapping. A glibc arena heap starts on a 64 MiB boundary and is no larger (its unused
 * tail mapped without access); a thread stack has a one-page guard below it. Both are told by shape, which an
 * anonymous V8 mapping matches only by chance.
 */
export function memoryMap(): MemoryMap {
  const maps = readMappings();
  const m: MemoryMap = { brk: 0, arenas: 0, arenaHeaps: 0, stacks: 0, files: 0, otherAnonymous: 0, total: 0 };
  maps.forEach(({ start, end, perms, path, rss }, i) => {
    const below = maps[i - 1];
    m.total += rss;
    if (path === '[heap]') m.brk += rss;
    else if (path === '[stack]') m.stacks += rss;
    else if (path.startsWith('/') || path.startsWith('[v')) m.files += rss;
    else if (path !== '') m.otherAnonymous += rss;
    else if (start % ARENA_HEAP === 0n && perms.startsWith('rw') && arenaEnd(maps, i, end) - start <= ARENA_HEAP) {
      m.arenas += rss;
      m.arenaHeaps++;
    } else if (
      perms.startsWith('rw') &&
      end - start >= 256n * PAGE &&
      below?.end === start &&
      below.perms.startsWith('---') &&
      below.end - below.start === PAGE
    ) {
      m.stacks += rss;
    } else m.otherAnonymous += rss;
  });
  return m;
}

/** An arena heap's end, counting the inaccessible rest of its reservation that follows it. */
function arenaEnd(maps: Mapping[], i: number, end: bigint): bigint {
  const next = maps[i + 1];
  return next && next.start === end && next.perms.startsWith('---') && next.path === '' ? next.end : end;
}

export interface IsolateHeap {
  thread: string;
  /** The thread's id in the kernel (the main thread's is the process id). */
  tid: number;
  /** Pages the heap holds (V8's total_physical_size), used bytes in them, and malloc'd memory V8 accounts for. */
  physical: number;
  used: number;
  malloced: number;
}

/**
 * Every isolate's heap after a full collection in each: the main thread's directly, the worker threads' through an
 * inspector session (a worker's own heap is invisible to the main thread's `v8` module).
 */
export async function isolateHeaps(): Promise<IsolateHeap[]> {
  const main = v8.getHeapStatistics();
  const heaps: IsolateHeap[] = [
    {
      thread: 'main',
      tid: process.pid,
      physical: main.total_physical_size,
      used: main.used_heap_size,
      malloced: main.malloced_memory,
    },
  ];
  const session = new inspector.Session();
  session.connect();
  try {
    const post = (method: string, params?: object) =>
      new Promise<unknown>((resolve, reject) =>
        session.post(method, params, (error, result) => (error ? reject(error) : resolve(result))),
      );
    const workers: { sessionId: string; title: string }[] = [];
    session.on('NodeWorker.attachedToWorker', (event) => {
      const { sessionId, workerInfo } = event.params as { sessionId: string; workerInfo: { title: string } };
      workers.push({ sessionId, title: workerInfo.title });
    });
    const replies = new Map<number, (message: { result?: unknown; error?: unknown }) => void>();
    session.on('NodeWorker.receivedMessageFromWorker', (event) => {
      const message = JSON.parse((event.params as { message: string }).message) as {
        id?: number;
        result?: unknown;
        error?: unknown;
      };
      if (message.id !== undefined) replies.get(message.id)?.(message);
    });
    await post('NodeWorker.enable', { waitForDebuggerOnStart: false });
    let id = 0;
    const inWorker = (sessionId: string, method: string, params: object = {}) =>
      new Promise<unknown>((resolve, reject) => {
        const messageId = ++id;
        replies.set(messageId, (reply) =>
          reply.error ? reject(new Error(JSON.stringify(reply.error))) : resolve(reply.result),
        );
        void post('NodeWorker.sendMessageToWorker', {
          sessionId,
          message: JSON.stringify({ id: messageId, method, params }),
        }).catch(reject);
      });
    for (const worker of workers) {
      await inWorker(worker.sessionId, 'HeapProfiler.enable');
      await inWorker(worker.sessionId, 'HeapProfiler.collectGarbage');
      const reply = (await inWorker(worker.sessionId, 'Runtime.evaluate', {
        // The thread's id (its task under /proc) names it in glibc's account of arenas by thread.
        expression:
          'JSON.stringify({ ...require("v8").getHeapStatistics(), tid: require("fs").readlinkSync("/proc/thread-self").split("/").pop() })',
        includeCommandLineAPI: true,
        returnByValue: true,
      })) as { result: { value?: string }; exceptionDetails?: unknown };
      if (reply.exceptionDetails || reply.result.value === undefined) {
        throw new Error(`heap statistics of ${worker.title}: ${JSON.stringify(reply)}`);
      }
      const s = JSON.parse(reply.result.value) as v8.HeapInfo & { tid: string };
      heaps.push({
        thread: worker.title,
        tid: Number(s.tid),
        physical: s.total_physical_size,
        used: s.used_heap_size,
        malloced: s.malloced_memory,
      });
      await inWorker(worker.sessionId, 'HeapProfiler.disable');
    }
    await post('NodeWorker.disable');
  } finally {
    session.disconnect();
  }
  return heaps;
}
