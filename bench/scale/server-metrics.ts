/** Requests the Temporal server's frontend answered, by operation, from its Prometheus endpoint. */

export type RequestCounts = Map<string, number>;

export async function frontendRequests(metricsUrl: string): Promise<RequestCounts> {
  return summed(metricsUrl, 'service_requests', 'frontend', 'operation', (operation) => operation);
}

/** Requests per second of each operation between two readings, busiest first. */
export function requestRates(before: RequestCounts, after: RequestCounts, seconds: number): [string, number][] {
  return [...after.entries()]
    .map(([op, n]): [string, number] => [op, (n - (before.get(op) ?? 0)) / seconds])
    .filter(([, rate]) => rate > 0)
    .sort((a, b) => b[1] - a[1]);
}

/**
 * The history service's task queue latency (`task_latency_queue`: from when a task was due — created, or a timer's
 * fire time — to when the service had done it, retries included), as cumulative counts by bucket bound in seconds,
 * over every task type.
 */
export type TaskLag = Map<number, number>;

export async function historyTaskLag(metricsUrl: string): Promise<TaskLag> {
  return summed(metricsUrl, 'task_latency_queue_bucket', 'history', 'le', (le) =>
    le === '+Inf' ? Infinity : Number(le),
  );
}

/** How many tasks the history service has done (every queue, every task type). */
export async function historyTasksDone(metricsUrl: string): Promise<number> {
  return (await historyTaskLag(metricsUrl)).get(Infinity) ?? 0;
}

/**
 * Of the tasks done between two readings: the bound of the bucket that holds the q-quantile, and of the highest
 * bucket any reached (in ms; Infinity past the last bound; 0 when none were).
 */
export function lagBetween(before: TaskLag, after: TaskLag, q: number): { quantileMs: number; maxMs: number } {
  const bounds = [...after.keys()].sort((a, b) => a - b);
  const counts = bounds.map((b) => (after.get(b) ?? 0) - (before.get(b) ?? 0));
  const total = counts.at(-1) ?? 0;
  if (total <= 0) return { quantileMs: 0, maxMs: 0 };
  const at = (i: number) => bounds[i]! * 1_000;
  const quantile = counts.findIndex((c) => c >= q * total);
  const max = counts.findIndex((c) => c >= total);
  return { quantileMs: at(quantile), maxMs: at(max) };
}

/** One metric of one service from the Prometheus endpoint, its samples summed by the value of one label. */
async function summed<K>(
  metricsUrl: string,
  metric: string,
  service: string,
  label: string,
  key: (value: string) => K,
): Promise<Map<K, number>> {
  const text = await (await fetch(metricsUrl)).text();
  const sums = new Map<K, number>();
  const labelValue = new RegExp(`${label}="([^"]+)"`);
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${metric}{`) || !line.includes(`service_name="${service}"`)) continue;
    const by = labelValue.exec(line)?.[1];
    const value = Number(line.slice(line.lastIndexOf(' ') + 1));
    if (by === undefined || !Number.isFinite(value)) continue;
    const k = key(by);
    sums.set(k, (sums.get(k) ?? 0) + value);
  }
  return sums;
}
