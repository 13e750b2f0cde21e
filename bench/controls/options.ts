/** The command line of the controls bench. */
import { parseArgs } from 'node:util';

export interface ControlsOptions {
  quick: boolean;
  /** Timed round trips of each control (and of the bare update). */
  runs: number;
  /** Times each control is counted in the history. */
  historyTimes: number;
  /** The large session forked into ten. */
  largeMiB: number;
  /** Checkpoints of the long session. */
  checkpoints: number;
  /** The server's `limit.historyCount.suggestContinueAsNew`. */
  suggestAt: number;
}

export function parseOptions(): ControlsOptions {
  const { values } = parseArgs({
    strict: true,
    options: {
      quick: { type: 'boolean', default: false },
      runs: { type: 'string' },
      'large-mb': { type: 'string' },
      checkpoints: { type: 'string' },
      'suggest-at': { type: 'string', default: '4096' },
    },
  });
  const num = (name: string, raw: string | undefined, fallback: number, min: number): number => {
    if (raw === undefined) return fallback;
    const n = Number(raw);
    if (!Number.isInteger(n) || n < min) throw new Error(`--${name} must be a whole number ≥ ${min}, got ${raw}`);
    return n;
  };
  const quick = values.quick;
  return {
    quick,
    runs: num('runs', values.runs, quick ? 50 : 200, 10),
    historyTimes: quick ? 10 : 20,
    largeMiB: num('large-mb', values['large-mb'], quick ? 256 : 1024, 1),
    checkpoints: num('checkpoints', values.checkpoints, quick ? 500 : 2_000, 4),
    suggestAt: num('suggest-at', values['suggest-at'], 4096, 100),
  };
}
