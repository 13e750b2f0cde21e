import { findingsOf, notesOf, runReliability, tableOf, type ReliabilityRow as Row } from '../helpers/reliability-run';

/**
 * The quick S3 reliability run (`npx tsx bench/reliability/run.ts --quick --scenarios s3`), as an operator runs it:
 * real worker processes whose snapshot store is a bucket on a real S3 server (versitygw), reached through a
 * fault-injecting proxy — a worker killed (-9) mid multipart capture, the S3 server killed mid-restore, 503s and slow
 * answers, the worker cut off from the server, objects tampered with and swapped in the bucket. What it prints is what
 * is asserted: its table, and the findings below it.
 */
/** The quick S3 run gives up after 7 minutes by itself (and prints what it has); this is the backstop. */
const RUN_MS = 7 * 60_000 + 20_000;

/** A worker killed mid-upload leaves the upload open until gc, past the leftover age, aborts it. */
const KNOWN_LEAKS = ['S3: kill -9 during multipart capture'];

let run: { code: number | null; stdout: string };
let rows: Row[];

beforeAll(async () => {
  run = await runReliability(['--quick', '--scenarios', 's3'], RUN_MS);
  rows = tableOf(run.stdout);
}, RUN_MS + 20_000);

test('the run finishes and every S3 row has trials', () => {
  expect(run.stdout).not.toContain('the run did not finish');
  expect(rows.map((r) => r.scenario)).toEqual([
    'S3: kill -9 during multipart capture',
    'S3: server killed during restore',
    'S3: 503s, then slow answers',
    'S3: worker cut off from S3 10 s',
    'S3: tampered or swapped object',
  ]);
  expect(rows.filter((r) => r.trials === 0)).toEqual([]);
});

test('nothing is lost, corrupt, stuck or orphaned', () => {
  const bad = rows.filter((r) => r.lost + r.corrupt + r.stuck + r.orphans > 0);
  expect({ bad, findings: bad.length > 0 ? findingsOf(run.stdout) : [] }).toEqual({ bad: [], findings: [] });
});

test('nothing leaks but the uploads of a killed worker, and gc past the leftover age aborts those', () => {
  const leaked = rows.filter((r) => !KNOWN_LEAKS.includes(r.scenario) && r.leakedObjects + r.leakedBytes > 0);
  expect(leaked).toEqual([]);
  expect(findingsOf(run.stdout).filter((f) => f.includes('still open after gc'))).toEqual([]);
  const gc = notesOf(run.stdout).find((n) => n.startsWith('NOTE — S3: gc an hour after the run'));
  const [, aborted, open] = /aborted (\d+) of (\d+) unfinished/.exec(gc ?? '') ?? [];
  expect(aborted).toBe(open);
});

test('a tampered or swapped object is refused typed, or the newest checkpoint that verifies is restored', () => {
  const tampers = notesOf(run.stdout).filter((n) => n.startsWith('NOTE — S3: tampered or swapped object:'));
  expect(tampers).toHaveLength(4);
  for (const note of tampers) expect(note).toMatch(/refused: Snapshot(Tampered|Corrupt)$|the resume restored /);
});
