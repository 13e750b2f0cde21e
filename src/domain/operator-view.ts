/**
 * What an operator reads of a session in the Temporal Web UI: the one-line summaries of its activities. Pure functions
 * of what the workflow holds, so the workflow stays deterministic.
 */

/**
 * `000003-1a2b3c4d` → `000003`. The sequence names a checkpoint within its session (each capture takes the next one);
 * the full id is in the activity's input, one click away.
 */
export function checkpointName(checkpointId: string): string {
  return /^(\d{6,})-[0-9a-f]{8}$/.exec(checkpointId)?.[1] ?? checkpointId;
}

/** 812 → "812 B", 4096 → "4.0 KiB", 1_300_000 → "1.2 MiB". */
export function byteSize(bytes: number): string {
  if (bytes < 1024) return `${bytes} B`;
  const units = ['KiB', 'MiB', 'GiB', 'TiB'];
  let value = bytes / 1024;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return `${value.toFixed(1)} ${units[unit]}`;
}

/** "1 timeline entry", "3 timeline entries". */
export function timelineEntries(n: number): string {
  return `${n} timeline ${n === 1 ? 'entry' : 'entries'}`;
}

/** Text from callers and failures on one line, bounded: a newline would break the markdown it sits in. */
export function oneLine(text: string, max = 200): string {
  const flat = text.replace(/\s+/g, ' ').trim();
  return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat;
}

/** "restore 000002 after fallback from 000003 (resume, 1.2 MiB)": the summary of one restore attempt. */
export function restoreSummary(
  checkpoint: { checkpointId: string; size: number },
  cause: string,
  fallbackFrom: readonly string[] = [],
): string {
  const after = fallbackFrom.length ? ` after fallback from ${fallbackFrom.map(checkpointName).join(', ')}` : '';
  return `restore ${checkpointName(checkpoint.checkpointId)}${after} (${cause}, ${byteSize(checkpoint.size)})`;
}
