import { spawn } from 'node:child_process';
import path from 'node:path';

/**
 * The quick reliability run (`npx tsx bench/reliability/run.ts --quick`), as an operator runs it: its own dev server
 * and real worker processes, killed (-9) and stopped (SIGTERM) while sessions start, capture, restore and drain; a
 * server outage; pause/resume cycles. What it prints is what is asserted: its table, and the findings below it.
 */
const root = path.resolve(__dirname, '..', '..');
/** The quick run gives up after 4 minutes by itself (and prints what it has); this is the backstop. */
const RUN_MS = 4 * 60_000 + 20_000;

/**
 * Rows where a known product defect loses sessions some of the time (it depends on where the fault lands), and the
 * failure such a loss shows. Any other loss in them fails the test, as does anything corrupt or stuck. None now: a
 * session killed before its first checkpoint starts again from its spec.
 */
const KNOWN_LOSSES: Record<string, RegExp> = {};

/**
 * Rows where a killed writer's temp file stays behind: cleanAbandoned removes temp files only once untouched for
 * ABANDONED_AFTER_MS, since another worker may still be writing them (bench/README.md, Reliability).
 */
const KNOWN_LEAKS = ['kill -9 during start', 'kill -9 during capture', 'kill -9 during drain'];

interface Row {
  scenario: string;
  trials: number;
  survived: number;
  lost: number;
  corrupt: number;
  stuck: number;
  orphans: number;
  leakedBytes: number;
}

let run: { code: number | null; stdout: string };
let rows: Row[];

beforeAll(async () => {
  run = await runQuick();
  rows = tableOf(run.stdout);
}, RUN_MS + 20_000);

test('the run finishes and every scenario has trials', () => {
  expect(run.stdout).not.toContain('the run did not finish');
  expect(rows.map((r) => r.scenario)).toEqual(
    expect.arrayContaining([
      'kill -9 during start',
      'kill -9 during capture',
      'kill -9 during restore',
      'kill -9 during drain',
      'kill -9: memory sessions beside',
      'SIGTERM during start',
      'SIGTERM during capture',
      'SIGTERM during restore',
      'SIGTERM during drain',
      'SIGTERM: memory sessions beside',
      'server outage 10 s',
      '20 checkpoint/pause/resume cycles',
    ]),
  );
  expect(rows.filter((r) => r.trials === 0)).toEqual([]);
});

test('nothing is corrupt, stuck or orphaned, and nothing leaked but where a killed writer leaves its temp file', () => {
  const leaked = (r: Row) => (KNOWN_LEAKS.includes(r.scenario) ? 0 : r.leakedBytes);
  const bad = rows.filter((r) => r.corrupt + r.stuck + r.orphans + leaked(r) > 0);
  expect({ bad, findings: bad.length > 0 ? findingsOf(run.stdout) : [] }).toEqual({ bad: [], findings: [] });
});

test('no session is lost, but for the known defects, and those only as they are known', () => {
  const lostElsewhere = rows.filter((r) => r.lost > 0 && !(r.scenario in KNOWN_LOSSES));
  expect({ lostElsewhere, findings: lostElsewhere.length > 0 ? findingsOf(run.stdout) : [] }).toEqual({
    lostElsewhere: [],
    findings: [],
  });
  const unlike = findingsOf(run.stdout).filter((f) => {
    const [, scenario, detail] = /^LOST — (.+?) — session \S+: (.*)$/m.exec(f) ?? [];
    return scenario !== undefined && !(KNOWN_LOSSES[scenario]?.test(detail ?? '') ?? false);
  });
  expect(unlike).toEqual([]);
});

function runQuick(): Promise<{ code: number | null; stdout: string }> {
  return new Promise((resolve, reject) => {
    // Its own process group: if the run outlasts its time, it is stopped with everything it started.
    const child = spawn('npx', ['tsx', 'bench/reliability/run.ts', '--quick'], {
      cwd: root,
      detached: true,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.resume();
    const timer = setTimeout(() => {
      // SIGTERM first: the run stops its workers, sessions and server; then whatever is left.
      process.kill(-child.pid!, 'SIGTERM');
      setTimeout(() => child.exitCode === null && process.kill(-child.pid!, 'SIGKILL'), 20_000).unref();
    }, RUN_MS);
    child.once('error', reject);
    child.once('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout });
    });
  });
}

/** The rows of the table the run prints: `| scenario | trials | survived | … |`. */
function tableOf(stdout: string): Row[] {
  return stdout
    .split('\n')
    .filter((line) => /^\| .* \| +\d+ \|/.test(line))
    .map((line) => {
      const [scenario, ...counts] = line
        .split('|')
        .slice(1, -1)
        .map((cell) => cell.trim());
      const [trials, survived, lost, corrupt, stuck, orphans, leakedBytes] = counts.map(Number);
      return { scenario: scenario!, trials, survived, lost, corrupt, stuck, orphans, leakedBytes } as Row;
    });
}

/** The findings below the table: blocks that start with `LOST —`, `CORRUPT —`, `STUCK —`, `ORPHANS —`, `LEAKED —`. */
function findingsOf(stdout: string): string[] {
  return stdout.split('\n\n').filter((block) => /^(LOST|CORRUPT|STUCK|ORPHANS|LEAKED) — /.test(block));
}
