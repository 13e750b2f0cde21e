/** What both halves of the run share: the server, the options, and how an idle window is measured. */
import { setTimeout as delay } from 'node:timers/promises';
import type { Client } from '@temporalio/client';
import { inPool, type Calls } from './load';
import { cpuWindow } from './procfs';
import { frontendRequests, requestRates, type RequestCounts } from './server-metrics';
import type { MemorySample } from './worker-handle';

export interface ScaleOptions {
  sessions: number;
  workspaceSessions: number;
  concurrency: number;
  idleSeconds: number;
  /** Full lifecycles run (and not measured) before the idle sample: bundles loaded, code paths warm. */
  warmup: number;
}

export interface ScaleContext {
  client: Client;
  options: ScaleOptions;
  serverPid: number;
  metricsUrl: string;
  address: string;
  runId: string;
  /** A fresh directory for this scenario's worker. */
  dir: string;
}

export interface IdleWindow {
  seconds: number;
  /** Share of one core, over the window. */
  workerCpu: number;
  serverCpu: number;
  /** Frontend requests per second during the window, busiest first. */
  requests: [string, number][];
}

/** One worker driven through N workflows: the lifecycle timed, its memory at rest and loaded, its idle cost. */
export interface ScenarioResult {
  startMs: number;
  controlsMs: number;
  calls: Calls;
  /** With nothing running (after the warm-up), with N/2 and N running and idle, and after all were stopped. */
  memory: { empty: MemorySample; half: MemorySample; loaded: MemorySample; after: MemorySample };
  /** Frontend requests per workflow through its start and controls (not the idle window), busiest first. */
  requestsPerWorkflow: [string, number][];
  idle: IdleWindow;
  /** Open files of the worker: with nothing running, and the peak while the N ran. */
  openFiles: { empty: number; peak: number };
}

/** Lets the start's stragglers settle, then measures the worker's and the server's CPU over the idle window. */
export async function measureIdle(ctx: ScaleContext, workerPid: number): Promise<IdleWindow> {
  await delay(3_000);
  const before = await frontendRequests(ctx.metricsUrl);
  const window = cpuWindow({ worker: workerPid, server: ctx.serverPid });
  const t0 = performance.now();
  await delay(ctx.options.idleSeconds * 1_000);
  const cpu = window.stop();
  const seconds = (performance.now() - t0) / 1_000;
  const after = await frontendRequests(ctx.metricsUrl);
  return { seconds, workerCpu: cpu.worker!, serverCpu: cpu.server!, requests: requestRates(before, after, seconds) };
}

/**
 * Starts the workflows in two halves, sampling the worker after each: the second half's growth is what a session
 * costs once the worker's one-off costs (code, arenas, caches warmed by the first ones) are paid.
 */
export async function startInHalves<T>(
  ctx: ScaleContext,
  items: T[],
  start: (item: T) => Promise<unknown>,
  sample: () => Promise<MemorySample>,
): Promise<{ ms: number; half: MemorySample; loaded: MemorySample }> {
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

export function ids(ctx: ScaleContext, prefix: string, count: number): string[] {
  return Array.from({ length: count }, (_, i) => `${prefix}-${ctx.runId}-${i}`);
}
