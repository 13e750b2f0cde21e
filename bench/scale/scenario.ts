/** What both halves of the run share: the server, the options, a worker of their own, how an idle window is measured. */
import * as path from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import type { Client } from '@temporalio/client';
import { Calls, inPool } from './load';
import { cpuWindow, OpenFilesSampler } from './procfs';
import {
  frontendRequests,
  historyTasksDone,
  historyTaskLag,
  lagBetween,
  requestRates,
  type RequestCounts,
} from './server-metrics';
import { startWorkerProcess, type MemorySample, type WorkerHandle } from './worker-handle';
import type { WorkerProcessConfig } from './worker-process';
import type { S3BlobBackendOptions } from '../../src/snapshots';

export interface ScaleOptions {
  sessions: number;
  workspaceSessions: number;
  concurrency: number;
  idleSeconds: number;
  /** Full lifecycles run (and not measured) before the idle sample: bundles loaded, code paths warm. */
  warmup: number;
  /** Worker processes per scenario, all polling one task queue, each with a host queue and directory of its own. */
  workers: number;
  /** Where the session workers keep checkpoints: one directory they share, or a bucket on a local S3 server. */
  store: 'local' | 's3';
  /** The session workers' workflow cache bound in this run (`--max-cached`; half the sessions, at most 500, unless set). */
  maxCachedWorkflows: number;
  /** The cache bound the RSS at 10,000 sessions is projected for: `--max-cached`, or the worker's default. */
  projectedCache: number;
  /** Where the session workers write their CPU profiles (`--profile`), if anywhere. */
  profileDir?: string;
}

export interface ScaleContext {
  client: Client;
  options: ScaleOptions;
  serverPid: number;
  metricsUrl: string;
  address: string;
  runId: string;
  /** A fresh directory for this scenario's workers. */
  dir: string;
  /** The bucket of `--store s3` (a prefix of its own per run); absent for the local store. */
  s3?: S3BlobBackendOptions;
  /** The master key (hex) the session workers share. */
  masterKey: string;
}

export interface IdleWindow {
  seconds: number;
  /** How long the window waited for the start's stragglers (replays of evicted workflows) to end. */
  settleSeconds: number;
  /** Share of one core, over the window. */
  workerCpu: number;
  serverCpu: number;
  /** Frontend requests per second during the window, busiest first. */
  requests: [string, number][];
}

/** The workers of a scenario sampled together: the sums, and each worker's own. */
export interface FleetSample extends MemorySample {
  perWorker: MemorySample[];
}

/** The workers of one scenario, measured as one: memory summed (each kept), CPU summed, open files the busiest's. */
export class WorkerFleet {
  readonly files: FilesSampler;

  constructor(readonly workers: WorkerHandle[]) {
    const samplers = workers.map((w) => new OpenFilesSampler(w.pid));
    this.files = {
      enter: (phase) => samplers.forEach((s) => s.enter(phase)),
      peak: (phase) => {
        const peaks = samplers.map((s) => s.peak(phase)).filter((p): p is number => p !== undefined);
        return peaks.length ? Math.max(...peaks) : undefined;
      },
      stop: () => samplers.forEach((s) => s.stop()),
    };
  }

  get pids(): number[] {
    return this.workers.map((w) => w.pid);
  }

  async sample(): Promise<FleetSample> {
    const perWorker = await Promise.all(this.workers.map((w) => w.sample()));
    return {
      rss: perWorker.reduce((n, s) => n + s.rss, 0),
      heapUsed: perWorker.reduce((n, s) => n + s.heapUsed, 0),
      loopDelayMaxMs: Math.max(...perWorker.map((s) => s.loopDelayMaxMs)),
      workflowCallMaxMs: Math.max(...perWorker.map((s) => s.workflowCallMaxMs)),
      perWorker,
    };
  }
}

/** Open files of one process or the busiest of several, per phase (OpenFilesSampler's interface). */
export type FilesSampler = Pick<OpenFilesSampler, 'enter' | 'peak' | 'stop'>;

/** The workers driven through N workflows: the lifecycle timed, their memory at rest and loaded, their idle cost. */
export interface ScenarioResult {
  startMs: number;
  controlsMs: number;
  calls: Calls;
  /** With nothing running (after the warm-up), with N/2 and N running and idle, and after all were stopped. */
  memory: { empty: FleetSample; half: FleetSample; loaded: FleetSample; after: FleetSample };
  /** Frontend requests per workflow through its start and controls (not the idle window), busiest first. */
  requestsPerWorkflow: [string, number][];
  /**
   * How far behind the server's history service ran, start of the starts to the last control: the p99 and the
   * highest bucket bound of its tasks' time from due to done. A lease's or a question's timeout fires only that late.
   */
  serverLag: { quantileMs: number; maxMs: number };
  idle: IdleWindow;
  /** Open files of the (busiest) worker: with nothing running, and the peak while the N ran. */
  openFiles: { empty: number; peak: number };
  /**
   * One control (a checkpoint) on each of a few idle workflows, one at a time, after the idle window: the newest
   * started (still in the worker's cache) and the oldest (evicted once more were started than the cache holds).
   */
  probes: { cached: Calls; evicted: Calls; probed: number };
}

/** Workflows of each kind a probe times: few, one at a time, so the row is the cost of one control, not of a queue. */
export const PROBES = 10;

/** Operations that mean a workflow is still working: its tasks answered and its history fetched for a replay. */
const WORKING = ['RespondWorkflowTaskCompleted', 'RespondWorkflowTaskFailed', 'GetWorkflowExecutionHistory'];
/** The working rate (per second, over one slice) below which the workflows count as idle. */
const SETTLED_RATE = 1;
/**
 * The history service's task rate (transfer, timer and visibility tasks done, per second) below which the server
 * counts as idle: a large start leaves it minutes of queued tasks after the last workflow task is answered.
 */
const SETTLED_TASK_RATE = 5;
const SETTLE_SLICE_MS = 5_000;
/** A start of 10,000 leaves the history service about ten minutes of queued tasks on this kind of machine. */
export const SETTLE_LIMIT_MS = 900_000;

/**
 * Waits until the server answers almost no workflow tasks and its history service has worked off its queues: right
 * after a large start, evicted workflows still replay for a minute or more and the start's tasks are still being
 * done, and a window opened then measures the start's tail, not idle workflows.
 */
async function settle(metricsUrl: string): Promise<number> {
  const t0 = performance.now();
  const reading = async () => ({
    requests: await frontendRequests(metricsUrl),
    tasks: await historyTasksDone(metricsUrl),
  });
  let before = await reading();
  while (performance.now() - t0 < SETTLE_LIMIT_MS) {
    await delay(SETTLE_SLICE_MS);
    const after = await reading();
    const rates = new Map(requestRates(before.requests, after.requests, SETTLE_SLICE_MS / 1_000));
    const taskRate = (after.tasks - before.tasks) / (SETTLE_SLICE_MS / 1_000);
    before = after;
    const working = WORKING.reduce((sum, op) => sum + (rates.get(op) ?? 0), 0);
    if (working < SETTLED_RATE && taskRate < SETTLED_TASK_RATE) break;
  }
  return (performance.now() - t0) / 1_000;
}

/** Lets the start's stragglers settle, then measures the workers' and the server's CPU over the idle window. */
export async function measureIdle(ctx: ScaleContext, workerPids: number[]): Promise<IdleWindow> {
  const settleSeconds = await settle(ctx.metricsUrl);
  // Said as it opens: a profiler attached from outside (bench/README.md) can cover the window alone.
  console.log(`scale: settled in ${settleSeconds.toFixed(0)} s; idle window of ${ctx.options.idleSeconds} s…`);
  const before = await frontendRequests(ctx.metricsUrl);
  const window = cpuWindow({
    server: ctx.serverPid,
    ...Object.fromEntries(workerPids.map((pid, i) => [`w${i}`, pid])),
  });
  const t0 = performance.now();
  await delay(ctx.options.idleSeconds * 1_000);
  const { server, ...workers } = window.stop();
  const seconds = (performance.now() - t0) / 1_000;
  const after = await frontendRequests(ctx.metricsUrl);
  const workerCpu = Object.values(workers).reduce((a, b) => a + b, 0);
  return { seconds, settleSeconds, workerCpu, serverCpu: server!, requests: requestRates(before, after, seconds) };
}

/**
 * Starts the workflows in two halves, sampling the worker after each: the second half's growth is what a session
 * costs once the worker's one-off costs (code, arenas, caches warmed by the first ones) are paid.
 */
export async function startInHalves<T>(
  ctx: ScaleContext,
  items: T[],
  start: (item: T) => Promise<unknown>,
  sample: () => Promise<FleetSample>,
): Promise<{ ms: number; half: FleetSample; loaded: FleetSample }> {
  const middle = Math.floor(items.length / 2);
  const first = await inPool(items.slice(0, middle), ctx.options.concurrency, start);
  const half = await sample();
  const second = await inPool(items.slice(middle), ctx.options.concurrency, start);
  return { ms: first + second, half, loaded: await sample() };
}

/** Counts the frontend's requests around `fn`s, per workflow. */
export class RequestCounter {
  private total: RequestCounts = new Map();

  constructor(private readonly ctx: ScaleContext) {}

  async around<T>(fn: () => Promise<T>): Promise<T> {
    const before = await frontendRequests(this.ctx.metricsUrl);
    const result = await fn();
    for (const [op, rate] of requestRates(before, await frontendRequests(this.ctx.metricsUrl), 1)) {
      this.total.set(op, (this.total.get(op) ?? 0) + rate);
    }
    return result;
  }

  perWorkflow(n: number): [string, number][] {
    return [...this.total.entries()]
      .map(([op, count]): [string, number] => [op, count / n])
      .sort((a, b) => b[1] - a[1]);
  }
}

/** A scenario's own worker processes: their task queue, and a sampler of their open files from the start. */
export interface ScenarioWorker {
  fleet: WorkerFleet;
  files: FilesSampler;
  taskQueue: string;
}

/**
 * Starts `--workers` workers of `mode` on a task queue of their own (each with its own host queue and directory; the
 * session workers share the store), runs `fn` with them, then stops them.
 */
export async function withScenarioWorker<T>(
  ctx: ScaleContext,
  config: Pick<WorkerProcessConfig, 'mode' | 'bundlePath' | 'maxSessions'>,
  fn: (scenario: ScenarioWorker) => Promise<T>,
): Promise<T> {
  const taskQueue = `scale-${config.mode}-${ctx.runId}`;
  const dir = path.join(ctx.dir, config.mode);
  const store: WorkerProcessConfig['store'] = ctx.s3
    ? { kind: 's3', s3: { ...ctx.s3, prefix: `${ctx.s3.prefix ?? ''}/${config.mode}-${ctx.runId}` } }
    : { kind: 'local', dir: path.join(dir, 'snapshots') };
  const workers: WorkerHandle[] = [];
  try {
    // One after another: two bundles loading at once on a small machine only make both slower.
    for (let i = 0; i < ctx.options.workers; i++) {
      const sessions = config.mode === 'sessions';
      const { maxCachedWorkflows, profileDir } = ctx.options;
      workers.push(
        await startWorkerProcess(
          {
            ...config,
            address: ctx.address,
            taskQueue,
            dir: path.join(dir, `host-${i + 1}`),
            host: `host-${i + 1}`,
            store,
            masterKey: ctx.masterKey,
            ...(sessions ? { maxCachedWorkflows } : {}),
          },
          sessions ? profileDir : undefined,
        ),
      );
    }
    const fleet = new WorkerFleet(workers);
    try {
      return await fn({ fleet, files: fleet.files, taskQueue });
    } finally {
      fleet.files.stop();
    }
  } finally {
    await Promise.all(workers.map((w) => w.stop()));
  }
}

export function ids(ctx: ScaleContext, prefix: string, count: number): string[] {
  return Array.from({ length: count }, (_, i) => `${prefix}-${ctx.runId}-${i}`);
}

/** How one kind of workflow is started and driven through checkpoint, pause, resume and stop. */
export interface Lifecycle<H> {
  /** The prefix of the measured workflows' ids (the warm-up's is `<prefix>-warm`). */
  prefix: string;
  start(calls: Calls, id: string): Promise<H>;
  run(calls: Calls, handle: H): Promise<void>;
  /** One control that leaves the workflow where it was (a checkpoint), timed as `control`. */
  probe(calls: Calls, handle: H): Promise<void>;
  /** Run after each warm-up lifecycle (the baseline warms its start + signal + complete too). */
  alsoWarm?(calls: Calls, id: string): Promise<void>;
}

/**
 * The warm-up, then N workflows started in halves, the idle window, and every lifecycle: what both the sessions and
 * their bare baseline measure, the same way. Open files peak over the N's run only.
 */
export async function measureLifecycle<H>(
  ctx: ScaleContext,
  worker: WorkerFleet,
  files: FilesSampler,
  kind: Lifecycle<H>,
): Promise<ScenarioResult> {
  const warm = new Calls();
  await inPool(ids(ctx, `${kind.prefix}-warm`, ctx.options.warmup), ctx.options.concurrency, async (id) => {
    await kind.run(warm, await kind.start(warm, id));
    await kind.alsoWarm?.(warm, `${id}-signal`);
  });
  if (warm.errors.length) throw new Error(`the ${kind.prefix} warm-up failed: ${warm.errors[0]}`);
  const empty = await worker.sample();
  const emptyFiles = files.peak('idle')!;

  files.enter('run');
  const calls = new Calls();
  const handles: H[] = [];
  const requests = new RequestCounter(ctx);
  const lagBefore = await historyTaskLag(ctx.metricsUrl);
  const started = await requests.around(() =>
    startInHalves(
      ctx,
      ids(ctx, kind.prefix, ctx.options.sessions),
      async (id) => handles.push(await kind.start(calls, id)),
      () => worker.sample(),
    ),
  );
  const idle = await measureIdle(ctx, worker.pids);
  const probes = await probeCache(kind, handles);
  const controlsMs = await requests.around(() => inPool(handles, ctx.options.concurrency, (h) => kind.run(calls, h)));
  const serverLag = lagBetween(lagBefore, await historyTaskLag(ctx.metricsUrl), 0.99);
  const after = await worker.sample();
  const peak = files.peak('run')!;
  files.enter('after-run');
  return {
    startMs: started.ms,
    controlsMs,
    calls,
    memory: { empty, half: started.half, loaded: started.loaded, after },
    requestsPerWorkflow: requests.perWorkflow(ctx.options.sessions),
    serverLag,
    idle,
    openFiles: { empty: emptyFiles, peak },
    probes,
  };
}

/**
 * Times one control on the newest idle workflows, then on the oldest. Without a cache bound below N (the bare
 * worker's SDK default holds thousands) both are cached: the row then compares like with like.
 */
async function probeCache<H>(kind: Lifecycle<H>, handles: H[]): Promise<ScenarioResult['probes']> {
  const probed = Math.min(PROBES, Math.floor(handles.length / 2));
  const cached = new Calls();
  const evicted = new Calls();
  // Newest first: probing one never evicts another of the newest, and the oldest stay evicted until probed.
  for (const h of handles.slice(-probed).reverse()) await kind.probe(cached, h).catch(() => undefined);
  for (const h of handles.slice(0, probed)) await kind.probe(evicted, h).catch(() => undefined);
  return { cached, evicted, probed };
}
