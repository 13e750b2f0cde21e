/** Driving many workflows at a fixed concurrency, with every call timed. */
import { performance } from 'node:perf_hooks';

/** Latencies of each kind of call, and the errors of a phase. */
export class Calls {
  readonly latencies = new Map<string, number[]>();
  readonly errors: string[] = [];

  /** Times `fn` under `name`; a failure is counted (and rethrown, so the item's later steps do not run). */
  async time<T>(name: string, fn: () => Promise<T>): Promise<T> {
    const t0 = performance.now();
    try {
      const result = await fn();
      const list = this.latencies.get(name) ?? [];
      list.push(performance.now() - t0);
      this.latencies.set(name, list);
      return result;
    } catch (err) {
      this.errors.push(`${name}: ${describeError(err)}`);
      throw err;
    }
  }

  /** Every latency of the named calls (all of them without names). */
  all(names?: string[]): number[] {
    return [...this.latencies.entries()].filter(([n]) => !names || names.includes(n)).flatMap(([, l]) => l);
  }
}

/**
 * Runs `fn` on every item, `concurrency` at a time (a new one starts as soon as one ends), and returns the wall time.
 * An item that fails is counted by its Calls and does not stop the others.
 */
export async function inPool<T>(items: T[], concurrency: number, fn: (item: T) => Promise<unknown>): Promise<number> {
  const t0 = performance.now();
  let next = 0;
  const lane = async (): Promise<void> => {
    while (next < items.length) {
      const item = items[next++]!;
      await fn(item).catch(() => undefined);
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, items.length) }, lane));
  return performance.now() - t0;
}

/** The p-th percentile (0–100) by nearest rank; NaN for no values. */
export function percentile(values: number[], p: number): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}

/** An error and its causes, one message each: "Workflow Update failed" alone says nothing of why. */
function describeError(err: unknown): string {
  const messages: string[] = [];
  for (let e: unknown = err, depth = 0; e !== undefined && depth < 5; depth++) {
    messages.push(e instanceof Error ? e.message : String(e));
    e = e instanceof Error ? e.cause : undefined;
  }
  return messages.join(' ← ');
}
