import { findingsOf, notesOf, runReliability, tableOf, type ReliabilityRow as Row } from '../helpers/reliability-run';

/**
 * The quick remote reliability run (`npx tsx bench/reliability/run.ts --quick --scenarios remote`), as an operator
 * runs it: two reference sandbox hosts and two workers as separate processes — the worker that drives a sandbox
 * killed (-9) idle and mid checkpoint, pause and resume; a sandbox host killed (-9); providers that answer slowly,
 * drop, truncate or inflate an export, or send garbage; a worker the session moved past. What it prints is what is
 * asserted: its table, and the findings below it.
 */
/** The quick remote run gives up after 12 minutes by itself (and prints what it has); this is the backstop. */
const RUN_MS = 12 * 60_000 + 20_000;

let run: { code: number | null; stdout: string };
let rows: Row[];

beforeAll(async () => {
  run = await runReliability(['--quick', '--scenarios', 'remote'], RUN_MS);
  rows = tableOf(run.stdout);
}, RUN_MS + 20_000);

test('the run finishes and every remote row has trials', () => {
  expect(run.stdout).not.toContain('the run did not finish');
  expect(rows.map((r) => [r.scenario, r.trials])).toEqual([
    ['remote: kill -9 of the driving worker', 4],
    ['remote: kill -9 of a sandbox host', 1],
    ['remote: hostile provider', 9],
    ['remote: stale fencing token', 2],
  ]);
});

// A pause whose worker died once its checkpoint was written left the sandbox running (stuck, orphaned, leaked):
// another worker now stops it.
test('nothing is lost, corrupt, stuck, orphaned or run twice; nothing leaks', () => {
  const bad = rows.filter(
    (r) => r.survived !== r.trials || r.orphans + r.leakedBytes + r.leakedObjects + r.twoCopies > 0,
  );
  expect({ bad, findings: bad.length > 0 ? findingsOf(run.stdout) : [] }).toEqual({ bad: [], findings: [] });
  expect(run.code).toBe(0);
});

test('each hostile export failed typed, with the store listing only the checkpoint before it', () => {
  const hostile = notesOf(run.stdout).filter((n) => n.startsWith('NOTE — remote: hostile provider:'));
  expect(hostile).toHaveLength(9);
  for (const note of hostile) expect(note).toMatch(/: Runtime(Busy|Failed)Error: .*; store lists cp-1\s*$/);
});
