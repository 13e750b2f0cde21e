/** Units, medians and the report's number formats. */

export const MiB = 1024 * 1024;

export function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

export const mibps = (bytes: number, ms: number): number => bytes / MiB / (ms / 1000);
export const fmtMiBps = (v: number): string => `${v.toFixed(v >= 100 ? 0 : 1)} MiB/s`;
export const fmtMs = (ms: number): string =>
  ms >= 1000 ? `${(ms / 1000).toFixed(2)} s` : `${ms.toFixed(ms >= 10 ? 0 : 1)} ms`;
export const fmtMiB = (bytes: number): string => `${(bytes / MiB).toFixed(1)} MiB`;
export const fmtSigned = (bytes: number): string => `${bytes >= 0 ? '+' : '−'}${fmtMiB(Math.abs(bytes))}`;

/** "median (min–max)" of durations. */
export function spread(ms: number[]): string {
  if (ms.length === 1) return fmtMs(ms[0]!);
  return `${fmtMs(median(ms))} (${fmtMs(Math.min(...ms))}–${fmtMs(Math.max(...ms))})`;
}

/** Throughput of the median time, with the range of times. */
export function throughput(bytes: number, ms: number[]): string {
  return `${fmtMiBps(mibps(bytes, median(ms)))} · ${spread(ms)}`;
}

export function ratio(engineMs: number, baselineMs: number): string {
  return `${(baselineMs / engineMs).toFixed(2)}×`;
}
