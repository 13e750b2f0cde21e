/** What an operation costs besides its time: memory, CPU (ours, the server's, everyone's), GC, event-loop delay. */
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import { constants as perfConstants, monitorEventLoopDelay, performance, PerformanceObserver } from 'node:perf_hooks';
import { setTimeout as delay } from 'node:timers/promises';
import * as v8 from 'node:v8';
import * as vm from 'node:vm';
import { withTimeout } from './cleanup';

/** Generous: a hung operation should fail the run (and clean up), not block it forever. */
const OP_TIMEOUT_MS = 10 * 60_000;

/** `global.gc` without --expose-gc on the command line (npm run bench passes no node flags). */
const collectGarbage: () => void = (() => {
  try {
    v8.setFlagsFromString('--expose-gc');
    const gc = vm.runInNewContext('typeof gc === "function" ? gc : undefined') as (() => void) | undefined;
    return gc ?? (() => {});
  } catch {
    return () => {};
  }
})();

/** What one call cost this process and the machine, beside its wall time. */
export interface Measurement {
  ms: number;
  rssBefore: number;
  rssPeak: number;
  samples: number;
  maxRssBefore: number;
  maxRssAfter: number;
  /** CPU time of this process (all its threads: event loop, libuv pool, Temporal core) during the call. */
  cpuUserMs: number;
  cpuSystemMs: number;
  /** Event-loop delay of this process during the call, max (a blocked loop stalls every stream). */
  loopDelayMaxMs: number;
  machineBusyMs: number;
  serverCpuMs: number;
  gcMajor: number;
  gcMajorMs: number;
  gcOtherMs: number;
}

interface Measured<T> extends Measurement {
  result: T;
  t0: number;
}

/** CPU time (ms) of the whole machine (busy, not idle or iowait) and of the Temporal server process. */
interface CpuTicks {
  machineBusyMs: number;
  serverMs: number;
}

const clockTicksPerSecond = (() => {
  try {
    return Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
  } catch {
    return 100;
  }
})();
/** `serverPid`: the dev server's, so its CPU can be told apart from this process's and everyone else's. */
function cpuTicks(serverPid: number | undefined): CpuTicks {
  const toMs = (ticks: number) => (ticks * 1000) / clockTicksPerSecond;
  let machineBusyMs = 0;
  let serverMs = 0;
  try {
    // cpu  user nice system idle iowait irq softirq steal …
    const fields = fs.readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number);
    machineBusyMs = toMs(fields.reduce((a, b, i) => (i === 3 || i === 4 ? a : a + b), 0));
    if (serverPid !== undefined) {
      const stat = fs.readFileSync(`/proc/${serverPid}/stat`, 'utf8');
      const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      serverMs = toMs(Number(rest[11]) + Number(rest[12])); // utime, stime (fields 14 and 15)
    }
  } catch {
    // not Linux: the report shows zeros
  }
  return { machineBusyMs, serverMs };
}

/** GC pauses of this process's main isolate, as the perf_hooks 'gc' entries report them. */
const gcPauses: { start: number; duration: number; major: boolean }[] = [];
new PerformanceObserver((list) => {
  for (const entry of list.getEntries()) {
    const kind = (entry as { detail?: { kind?: number } }).detail?.kind;
    gcPauses.push({
      start: entry.startTime,
      duration: entry.duration,
      major: kind === perfConstants.NODE_PERFORMANCE_GC_MAJOR,
    });
  }
}).observe({ entryTypes: ['gc'] });

/** Times `fn` while sampling RSS every 50 ms; a GC first, so the baseline RSS is not inflated by garbage. */
export async function measure<T>(fn: () => Promise<T>, serverPid: number | undefined): Promise<Measured<T>> {
  collectGarbage();
  const maxRssBefore = process.resourceUsage().maxRSS * 1024;
  const rssBefore = process.memoryUsage().rss;
  let rssPeak = rssBefore;
  let samples = 0;
  const sample = (): void => {
    samples++;
    rssPeak = Math.max(rssPeak, process.memoryUsage().rss);
  };
  const timer = setInterval(sample, 50);
  const loop = monitorEventLoopDelay({ resolution: 10 });
  loop.enable();
  const cpu = process.cpuUsage();
  const ticks = cpuTicks(serverPid);
  const t0 = performance.now();
  try {
    const result = await withTimeout(fn(), OP_TIMEOUT_MS, 'operation');
    const t1 = performance.now();
    const cpuUsed = process.cpuUsage(cpu);
    const ticksAfter = cpuTicks(serverPid);
    sample();
    await delay(0); // the gc entries of the call reach the observer on a later tick
    const pauses = gcPauses.filter((p) => p.start >= t0 && p.start <= t1);
    const majors = pauses.filter((p) => p.major);
    return {
      result,
      ms: t1 - t0,
      t0,
      rssBefore,
      rssPeak,
      samples,
      maxRssBefore,
      maxRssAfter: process.resourceUsage().maxRSS * 1024,
      cpuUserMs: cpuUsed.user / 1000,
      cpuSystemMs: cpuUsed.system / 1000,
      loopDelayMaxMs: loop.max / 1e6,
      machineBusyMs: ticksAfter.machineBusyMs - ticks.machineBusyMs,
      serverCpuMs: ticksAfter.serverMs - ticks.serverMs,
      gcMajor: majors.length,
      gcMajorMs: majors.reduce((a, p) => a + p.duration, 0),
      gcOtherMs: pauses.reduce((a, p) => a + (p.major ? 0 : p.duration), 0),
    };
  } finally {
    clearInterval(timer);
    loop.disable();
  }
}
