import { spawn } from 'node:child_process';
import path from 'node:path';

/** One row of the table a reliability run prints. */
export interface ReliabilityRow {
  scenario: string;
  trials: number;
  survived: number;
  lost: number;
  corrupt: number;
  stuck: number;
  orphans: number;
  leakedBytes: number;
  leakedObjects: number;
  /** Trials in which two copies of one session ran at once. */
  twoCopies: number;
}

const root = path.resolve(__dirname, '..', '..');

/**
 * Runs `bench/reliability/run.ts` with `args` as an operator does, and resolves with its exit code and what it printed
 * on stdout (the table and the findings). Past `ms` the run is stopped with everything it started.
 */
export function runReliability(args: string[], ms: number): Promise<{ code: number | null; stdout: string }> {
  return new Promise((resolve, reject) => {
    // Its own process group: if the run outlasts its time, it is stopped with everything it started.
    const child = spawn('npx', ['tsx', 'bench/reliability/run.ts', ...args], {
      cwd: root,
      detached: true,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.resume();
    const timer = setTimeout(() => {
      // SIGTERM first: the run stops its workers, sessions and servers; then whatever is left.
      process.kill(-child.pid!, 'SIGTERM');
      setTimeout(() => child.exitCode === null && process.kill(-child.pid!, 'SIGKILL'), 20_000).unref();
    }, ms);
    child.once('error', reject);
    child.once('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout });
    });
  });
}

/** The rows of the table the run prints: `| scenario | trials | survived | … |`. */
export function tableOf(stdout: string): ReliabilityRow[] {
  return stdout
    .split('\n')
    .filter((line) => /^\| .* \| +\d+ \|/.test(line))
    .map((line) => {
      const [scenario, ...counts] = line
        .split('|')
        .slice(1, -1)
        .map((cell) => cell.trim());
      const [trials, survived, lost, corrupt, stuck, orphans, leakedBytes, leakedObjects, twoCopies] =
        counts.map(Number);
      return {
        scenario: scenario!,
        trials,
        survived,
        lost,
        corrupt,
        stuck,
        orphans,
        leakedBytes,
        leakedObjects,
        twoCopies,
      } as ReliabilityRow;
    });
}

/** The findings below the table: blocks that start with `LOST —`, `CORRUPT —`, `STUCK —`, `ORPHANS —`, `LEAKED —`. */
export function findingsOf(stdout: string): string[] {
  return stdout.split('\n\n').filter((block) => /^(LOST|CORRUPT|STUCK|ORPHANS|LEAKED) — /.test(block));
}

/** The notes below the table (`NOTE — …`). */
export function notesOf(stdout: string): string[] {
  return stdout.split('\n\n').filter((block) => block.startsWith('NOTE — '));
}
