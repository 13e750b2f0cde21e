/** The machine the bench runs on: where its files go, and what the report says about it. */
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { DEFAULT_TEMPORAL_BIN } from '../../src/dev-server';

export const RESULTS_DIR = path.resolve(__dirname, '..', '..', '.bench');

export interface Machine {
  cpu: string;
  cores: number;
  memory: string;
  node: string;
  kernel: string;
  temporal: string;
  tempRoot: string;
  tempWhy: string;
  df: string;
  loadBefore: string;
  loadAfter: string;
}

export function loadAverage(): string {
  return os
    .loadavg()
    .map((l) => l.toFixed(2))
    .join(' ');
}

function dfLine(dir: string): { type: string; text: string } {
  const text = execFileSync('df', ['-T', '-P', dir], { encoding: 'utf8' }).trim();
  const fields = (text.split('\n')[1] ?? '').trim().split(/\s+/);
  return { type: fields[1] ?? 'unknown', text };
}

/** os.tmpdir() unless it is memory-backed (then the numbers would say nothing about a disk): .bench/ instead. */
export function chooseTempBase(): { base: string; why: string } {
  const tmp = os.tmpdir();
  const { type } = dfLine(tmp);
  if (type === 'tmpfs' || type === 'ramfs') {
    fs.mkdirSync(RESULTS_DIR, { recursive: true });
    return { base: RESULTS_DIR, why: `${tmp} is ${type}: using the project's .bench/ instead` };
  }
  return { base: tmp, why: `os.tmpdir() (${tmp}) is ${type}` };
}

/** Read once the rounds are done: the load average after, and the temp dir's file system as it was used. */
export function describeMachine(temp: { root: string; why: string }, loadBefore: string): Machine {
  let temporal = 'unknown';
  try {
    temporal = execFileSync(DEFAULT_TEMPORAL_BIN, ['--version'], { encoding: 'utf8' }).trim();
  } catch {
    // only for the report
  }
  return {
    cpu: os.cpus()[0]?.model ?? 'unknown',
    cores: os.cpus().length,
    memory: `${(os.totalmem() / 1024 ** 3).toFixed(1)} GiB`,
    node: process.version,
    kernel: `${os.type()} ${os.release()}`,
    temporal,
    tempRoot: temp.root,
    tempWhy: temp.why,
    df: dfLine(temp.root).text,
    loadBefore,
    loadAfter: loadAverage(),
  };
}
