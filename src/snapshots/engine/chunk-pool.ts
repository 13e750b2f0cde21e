/**
 * Seals chunks (chunk-work.ts: id, compress, AES-GCM) on worker threads, so that a checkpoint uses more than one core
 * while the calling thread reads, chunks and writes; and opens restored batches (authenticate, decrypt, decompress)
 * beside the calling thread, which reads and feeds the consumer and opens the batches the threads have no room for.
 * With size 0 the same work runs on the calling thread.
 *
 * Key material crosses to the threads (the process's own memory; never further): once per write for sealing, with
 * each batch for opening.
 *
 * Threads start on first use, are unref'd while idle (an idle pool never keeps a process alive) and exit after
 * IDLE_EXIT_MS without work. A thread that dies fails the batches it had and is replaced by the next batch.
 */
import { availableParallelism } from 'node:os';
import { extname, join } from 'node:path';
import { Worker } from 'node:worker_threads';
import {
  openBatch,
  sealBatch,
  type ChunkContext,
  type OpenEntry,
  type OpenBatchResult,
  type SealBatchResult,
  type SealContext,
} from './chunk-work';
import { toBuffer, toWireKey, transferList, type PoolReply, type PoolRequest, type WireContext } from './chunk-wire';

/**
 * Threads of the shared pool: one per core but the one the calling thread reads, chunks and writes on; at least one,
 * at most 3 (beyond that the calling thread limits). On 2 cores, two threads checkpoint a little faster than one but
 * take memory the 256 MiB bound cannot spare: compare `npx tsx bench/bounded.ts 1024 /tmp random 1` with `... 2`.
 */
const DEFAULT_CHUNK_THREADS = Math.max(1, Math.min(availableParallelism() - 1, 3));

/** A write's context, registered with the pool; release it when done. */
export interface PoolContext {
  readonly id: number;
  readonly value: SealContext;
  /** The ids this thread has stored or seen sealed so far, for its own seals (built on first use; threads keep theirs). */
  known: Set<string> | null;
  /** Threads that hold this context. */
  readonly sentTo: Set<Thread>;
}

interface Thread {
  worker: Worker;
  pending: Map<number, { resolve: (reply: PoolReply) => void; reject: (err: Error) => void }>;
  dead: boolean;
  idle: NodeJS.Timeout | null;
}

/**
 * A thread with nothing to do exits after this long. An idle isolate is never garbage-collected, so a thread kept
 * between checkpoints would hold its last checkpoint's garbage until the next one; starting a thread again is small
 * next to a checkpoint.
 */
const IDLE_EXIT_MS = 1_000;

/**
 * A thread's young generation, in MiB. Each chunk a thread seals or decodes leaves buffers behind (Node's cipher and
 * decoder outputs) whose memory goes back only when a collection finds them dead; a small young generation collects
 * them every few MiB of work instead of every few tens. `npx tsx bench/bounded.ts 2048 /tmp text` shows the peak.
 */
const THREAD_YOUNG_GENERATION_MB = 8;

/** Batches waiting on a thread before the calling thread takes the next one itself. */
const THREAD_QUEUE = 2;

let nextContextId = 1;
let nextJob = 1;

export class ChunkPool {
  private readonly threads: (Thread | null)[];
  private turn = 0;

  constructor(readonly size: number = DEFAULT_CHUNK_THREADS) {
    if (!Number.isInteger(size) || size < 0 || size > 64)
      throw new RangeError(`chunk threads must be 0..64, not ${size}`);
    this.threads = Array.from({ length: size }, () => null);
  }

  /**
   * How many batches a caller should keep in flight: THREAD_QUEUE for each thread, and two more that the calling
   * thread may take itself while the threads are busy.
   */
  get window(): number {
    return this.size * THREAD_QUEUE + 2;
  }

  /**
   * Whether work should stay on the calling thread: there are no threads, or every one has THREAD_QUEUE batches
   * waiting (of any caller), so that the calling thread's time between reads is not spent waiting.
   */
  private busy(): boolean {
    return this.threads.every((t) => t !== null && !t.dead && t.pending.size >= THREAD_QUEUE);
  }

  context(value: SealContext): PoolContext {
    return { id: nextContextId++, value, known: null, sentTo: new Set() };
  }

  /** Forgets a context on every thread that has it. */
  release(context: PoolContext): void {
    for (const thread of context.sentTo) {
      if (!thread.dead) thread.worker.postMessage({ type: 'release', contextId: context.id } satisfies PoolRequest);
    }
    context.sentTo.clear();
    context.known = null;
  }

  /**
   * Seals the chunks of `data` cut at `sizes`, into `spare` when it is large enough. `data` and `spare` are moved to
   * the thread: do not use them afterwards; `data` comes back with the result, for the next batch. While every thread
   * has THREAD_QUEUE batches waiting, the batch is sealed on the calling thread instead (whose known ids are its own:
   * a chunk new to both sides in one write is sealed twice).
   */
  async seal(
    context: PoolContext,
    data: Buffer,
    sizes: number[],
    spare: Buffer | null = null,
  ): Promise<SealBatchResult & { data: Buffer }> {
    if (this.busy()) {
      return {
        ...sealBatch(context.value, (context.known ??= new Set(context.value.known)), data, sizes, spare),
        data,
      };
    }
    const reply = await this.run(context, (job, wire) => ({
      type: 'seal',
      job,
      contextId: context.id,
      ...(wire ? { context: wire } : {}),
      data,
      sizes,
      ...(spare ? { spare } : {}),
    }));
    if (reply.type !== 'seal') throw new Error(`chunk worker answered ${reply.type} to a seal`);
    // What a thread sealed, the calling thread's own seals of this write skip from now on.
    for (const entry of reply.result.entries) if (!('known' in entry)) context.known?.add(entry.id);
    return { sealed: toBuffer(reply.result.sealed), entries: reply.result.entries, data: toBuffer(reply.data) };
  }

  /**
   * Opens a read batch (openBatch: authenticate, decrypt, decompress, in plaintext mode check ids) on a thread.
   * `sealed` is moved to the thread (copied first if it does not fill its memory, unless `move` says that memory is
   * all the batch's) and comes back with the result: plaintext chunks are views of it. Opened on the calling thread
   * while every thread has THREAD_QUEUE batches waiting.
   */
  async open(
    context: ChunkContext & { dataKeyId: string | null },
    sealed: Buffer,
    entries: OpenEntry[],
    options: { move?: boolean } = {},
  ): Promise<{ result: OpenBatchResult; sealed: Buffer }> {
    if (this.busy()) return { result: openBatch(context, sealed, entries), sealed };
    // The batch's memory moves to the thread. Unless the caller says all of it is the batch's (`move`: a read buffer
    // with headroom), bytes that do not fill their memory are copied first, so that nothing else moves with them.
    const fills = sealed.byteOffset === 0 && sealed.byteLength === sealed.buffer.byteLength;
    if (!fills && !(options.move && sealed.byteOffset === 0)) {
      const own = Buffer.allocUnsafeSlow(sealed.length);
      sealed.copy(own);
      sealed = own;
    }
    const reply = await this.run(null, (job) => ({
      type: 'open',
      job,
      context: {
        tenant: context.tenant,
        lineage: context.lineage,
        formatVersion: context.formatVersion,
        dataKeyId: context.dataKeyId,
        key: context.key ? toWireKey(context.key) : null,
      },
      sealed,
      entries,
    }));
    if (reply.type !== 'open') throw new Error(`chunk worker answered ${reply.type} to an open`);
    const result: OpenBatchResult = reply.result.ok
      ? { ok: true, chunks: reply.result.chunks.map(toBuffer) }
      : reply.result;
    return { result, sealed: toBuffer(reply.sealed) };
  }

  /**
   * Starts any thread that is not running, so that its start-up overlaps with what the caller does before its first
   * batch (reading manifests); a thread that is then not used exits after the idle time like any other.
   */
  warm(): void {
    for (let i = 0; i < this.size; i++) {
      const thread = this.threads[i];
      if (!thread || thread.dead) idleExit((this.threads[i] = startThread()));
      else if (thread.idle) thread.idle.refresh();
    }
  }

  /** Stops every thread (batches in flight fail). */
  async close(): Promise<void> {
    const running = this.threads.filter((t): t is Thread => t !== null);
    this.threads.fill(null);
    await Promise.all(running.map((t) => t.worker.terminate()));
  }

  private async run(
    context: PoolContext | null,
    build: (job: number, wire: WireContext | undefined) => PoolRequest,
  ): Promise<PoolReply> {
    const thread = this.pick();
    const job = nextJob++;
    const wire = !context || context.sentTo.has(thread) ? undefined : toWire(context);
    const request = build(job, wire);
    const reply = await new Promise<PoolReply>((resolve, reject) => {
      // Posted first: a message that cannot be sent (a buffer that cannot be cloned) leaves the thread as it was.
      this.post(thread.worker, request);
      thread.pending.set(job, { resolve, reject });
      if (thread.idle) clearTimeout(thread.idle);
      thread.idle = null;
      if (thread.pending.size === 1) thread.worker.ref();
      context?.sentTo.add(thread);
    });
    if (reply.type === 'error') throw new Error(`chunk worker failed: ${reply.message}`);
    return reply;
  }

  /** Hands a request to a thread (a seam: tests slow a thread down here). */
  protected post(worker: Worker, request: PoolRequest): void {
    worker.postMessage(request, transferList(request));
  }

  /** The thread with the fewest batches in flight (started if needed), taking turns among equals. */
  private pick(): Thread {
    let best: Thread | null = null;
    for (let i = 0; i < this.size; i++) {
      const index = (this.turn + i) % this.size;
      let thread = this.threads[index];
      if (!thread || thread.dead) thread = this.threads[index] = startThread();
      if (!best || thread.pending.size < best.pending.size) best = thread;
      if (thread.pending.size === 0) break;
    }
    this.turn = (this.turn + 1) % this.size;
    return best!;
  }
}

function toWire(context: PoolContext): WireContext {
  const { value } = context;
  return {
    tenant: value.tenant,
    lineage: value.lineage,
    formatVersion: value.formatVersion,
    key: value.key ? toWireKey(value.key) : null,
    known: value.known,
    ...(value.codec !== undefined ? { codec: value.codec } : {}),
  };
}

function startThread(): Thread {
  // From source (tests, tsx) the worker is TypeScript too: load it through tsx's require hook.
  const fromSource = extname(__filename) === '.ts';
  const worker = new Worker(join(__dirname, `chunk-worker${extname(__filename)}`), {
    ...(fromSource ? { execArgv: ['--require', require.resolve('tsx/cjs')] } : {}),
    resourceLimits: { maxYoungGenerationSizeMb: THREAD_YOUNG_GENERATION_MB },
  });
  const thread: Thread = { worker, pending: new Map(), dead: false, idle: null };
  worker.unref();
  worker.on('message', (reply: PoolReply) => {
    const waiter = thread.pending.get(reply.job);
    if (!waiter) return;
    thread.pending.delete(reply.job);
    if (thread.pending.size === 0) {
      worker.unref();
      idleExit(thread);
    }
    waiter.resolve(reply);
  });
  const fail = (err: Error) => {
    thread.dead = true;
    for (const waiter of thread.pending.values()) waiter.reject(err);
    thread.pending.clear();
  };
  worker.on('error', (err) => fail(new Error(`chunk worker thread failed: ${err.message}`, { cause: err })));
  worker.on('exit', (code) => fail(new Error(`chunk worker thread exited with code ${code}`)));
  return thread;
}

/** Ends the thread once it has been idle for IDLE_EXIT_MS (a new batch cancels this). */
function idleExit(thread: Thread): void {
  thread.idle = setTimeout(() => {
    thread.dead = true;
    void thread.worker.terminate();
  }, IDLE_EXIT_MS).unref();
}

let shared: ChunkPool | null = null;

/** The process-wide pool every store uses unless given its own. */
export function sharedChunkPool(): ChunkPool {
  shared ??= new ChunkPool();
  return shared;
}
