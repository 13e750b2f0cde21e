/** Requests the Temporal server's frontend answered, by operation, from its Prometheus endpoint. */

export type RequestCounts = Map<string, number>;

export async function frontendRequests(metricsUrl: string): Promise<RequestCounts> {
  const text = await (await fetch(metricsUrl)).text();
  const counts: RequestCounts = new Map();
  for (const line of text.split('\n')) {
    if (!line.startsWith('service_requests{') || !line.includes('service_name="frontend"')) continue;
    const operation = /operation="([^"]+)"/.exec(line)?.[1];
    const value = Number(line.slice(line.lastIndexOf(' ') + 1));
    if (operation && Number.isFinite(value)) counts.set(operation, (counts.get(operation) ?? 0) + value);
  }
  return counts;
}

/** Requests per second of each operation between two readings, busiest first. */
export function requestRates(before: RequestCounts, after: RequestCounts, seconds: number): [string, number][] {
  return [...after.entries()]
    .map(([op, n]): [string, number] => [op, (n - (before.get(op) ?? 0)) / seconds])
    .filter(([, rate]) => rate > 0)
    .sort((a, b) => b[1] - a[1]);
}
