/** The command line of the sessions bench: how big the workspace is, and how many rounds. */
import { parseArgs } from 'node:util';

export interface Options {
  sizeMiB: number;
  fileMiB: number;
  rounds: number;
  /** Only the freeze rounds (no Temporal rounds, no direct round): the 1 GiB freeze rows in minutes. */
  freezeOnly: boolean;
  /** No freeze rounds: baselines, the rounds through Temporal and the direct round (the resume rows in minutes). */
  skipFreeze: boolean;
}

export function parseOptions(): Options {
  const { values } = parseArgs({
    options: {
      'size-mb': { type: 'string', default: '100' },
      'file-mb': { type: 'string', default: '5' },
      rounds: { type: 'string', default: '3' },
      'freeze-only': { type: 'boolean', default: false },
      'skip-freeze': { type: 'boolean', default: false },
    },
  });
  const num = (name: string, raw: string | undefined, min: number): number => {
    const n = Number(raw);
    if (!Number.isFinite(n) || n < min) throw new Error(`--${name} must be a number >= ${min}, got ${raw}`);
    return n;
  };
  return {
    sizeMiB: num('size-mb', values['size-mb'], 1),
    fileMiB: num('file-mb', values['file-mb'], 0.001),
    rounds: Math.round(num('rounds', values.rounds, 1)),
    freezeOnly: values['freeze-only'] ?? false,
    skipFreeze: values['skip-freeze'] ?? false,
  };
}
