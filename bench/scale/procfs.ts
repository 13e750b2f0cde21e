/** What /proc says about one process: its resident memory, its CPU time, its open files. Linux only. */
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';

const clockTicksPerSecond = (() => {
  try {
    return Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
  } catch {
    return 100;
  }
})();

/** VmRSS of `pid` in bytes (the kernel's count of resident pages, whatever the runtime inside thinks it uses). */
export function residentBytes(pid: number): number {
  const line = /^VmRSS:\s+(\d+) kB$/m.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
  if (!line) throw new Error(`/proc/${pid}/status has no VmRSS`);
  return Number(line[1]) * 1024;
}

/** User + system CPU time of `pid` (all its threads) in milliseconds, from /proc/<pid>/stat fields 14 and 15. */
export function cpuMs(pid: number): number {
  let stat: string;
  try {
    stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch (err) {
    // A worker that died under load is the finding: say so, not that a file is missing.
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') throw new Error(`process ${pid} is gone: it has exited`);
    throw err;
  }
  // The command name may hold spaces and parentheses: fields are counted from the last ')'.
  const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return ((Number(rest[11]) + Number(rest[12])) * 1000) / clockTicksPerSecond;
}

/** Open file descriptors of `pid`, or undefined once it is gone. */
export function openFiles(pid: number): number | undefined {
  try {
    return fs.readdirSync(`/proc/${pid}/fd`).length;
  } catch {
    return undefined;
  }
}

/** Counts `pid`'s open files every `everyMs` until stopped, keeping the peak (and the phase it was reached in). */
export class OpenFilesSampler {
  private readonly timer: NodeJS.Timeout;
  private readonly peaks = new Map<string, number>();
  private phase = 'idle';

  constructor(
    private readonly pid: number,
    everyMs = 50,
  ) {
    this.timer = setInterval(() => this.sample(), everyMs);
    this.timer.unref();
    this.sample();
  }

  /** Samples from now on count towards `phase`. */
  enter(phase: string): void {
    this.sample();
    this.phase = phase;
    this.sample();
  }

  peak(phase: string): number | undefined {
    return this.peaks.get(phase);
  }

  stop(): void {
    clearInterval(this.timer);
  }

  private sample(): void {
    const n = openFiles(this.pid);
    if (n !== undefined) this.peaks.set(this.phase, Math.max(this.peaks.get(this.phase) ?? 0, n));
  }
}

/** CPU used by each process between two moments, as a share of one core. */
export function cpuWindow(pids: Record<string, number>): { stop(): Record<string, number> } {
  const t0 = performance.now();
  const before = Object.fromEntries(Object.entries(pids).map(([name, pid]) => [name, cpuMs(pid)]));
  return {
    stop() {
      const wallMs = performance.now() - t0;
      return Object.fromEntries(
        Object.entries(pids).map(([name, pid]) => [name, (cpuMs(pid) - before[name]!) / wallMs]),
      );
    },
  };
}
