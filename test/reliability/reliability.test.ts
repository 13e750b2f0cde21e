import { findingsOf, runReliability, tableOf, type ReliabilityRow as Row } from '../helpers/reliability-run';

/**
 * The quick reliability run (`npx tsx bench/reliability/run.ts --quick`), as an operator runs it: its own dev server
 * and real worker processes, killed (-9) and stopped (SIGTERM) while sessions start, capture, restore and drain; a
 * server outage; pause/resume cycles. What it prints is what is asserted: its table, and the findings below it.
 */
/** The quick run gives up after 4 minutes by itself (and prints what it has); this is the backstop. */
const RUN_MS = 4 * 60_000 + 20_000;

/**
 * Rows where a known product defect loses sessions some of the time (it depends on where the fault lands), and the
 * failure such a loss shows. Any other loss in them fails the test, as does anything corrupt or stuck. None now: a
 * session killed before its first checkpoint starts again from its spec.
 */
const KNOWN_LOSSES: Record<string, RegExp> = {};

/**
 * What a kill -9 may leave: a killed writer's temp file in the snapshot store (a pack, a manifest, a timeline entry
 * being written), which cleanAbandoned removes only once untouched for ABANDONED_AFTER_MS, since another worker may
 * still be writing it (bench/README.md, Reliability). Where the kill lands decides whether one is left, so any kill -9
 * row may show one; nothing else may leak anywhere (a workspace directory, a log, a record).
 */
const killedWritersTemp = (path: string) => /\/snapshots\/.*\/\.[^/]+\.tmp(-[0-9a-f]+)?$/.test(path);
const byKill = (scenario: string) => scenario.startsWith('kill -9');

let run: { code: number | null; stdout: string };
let rows: Row[];

beforeAll(async () => {
  run = await runReliability(['--quick', '--scenarios', 'crash,outage,cycles'], RUN_MS);
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
  const leaked = (r: Row) => (byKill(r.scenario) ? 0 : r.leakedBytes);
  const bad = rows.filter((r) => r.corrupt + r.stuck + r.orphans + leaked(r) > 0);
  expect({ bad, findings: bad.length > 0 ? findingsOf(run.stdout) : [] }).toEqual({ bad: [], findings: [] });
  // Each file a kill -9 row leaked, by path: only the snapshot store's temp files pass.
  const files = findingsOf(run.stdout)
    .filter((f) => f.startsWith('LEAKED — kill -9'))
    .flatMap((f) => f.split('\n').slice(1))
    .map((line) => line.trim().replace(/^\d+ bytes /, ''));
  expect(files.filter((file) => !killedWritersTemp(file))).toEqual([]);
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
