/**
 * Benchmark of checkpoint / pause / resume of a workspace session through the real system: a Temporal dev
 * server, the project's workers (in this process), the default ChunkedSnapshotStore and a WorkspaceRuntime on a local file
 * system, driven by the SessionClient. Physical baselines (write+fsync, read, SHA-256, tar) are measured on the
 * same file system with the same bytes, so the engine's numbers can be read as "how far from the hardware".
 *
 *   npm run bench:sessions
 *   npx tsx bench/sessions/run.ts --size-mb 100 --file-mb 5 --rounds 3
 *   npx tsx bench/sessions/run.ts --size-mb 1024 --rounds 1 --freeze-only   # the freeze rows alone
 *   npx tsx bench/sessions/run.ts --rounds 2 --skip-freeze                  # the checkpoint and resume rows alone
 *
 * Nothing here asserts on time: it prints (and writes to .bench/results.md) what it measured.
 */
import * as fs from 'node:fs';
import * as fsp from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import { DefaultLogger, Runtime } from '@temporalio/worker';
import { measureBaselines } from './baselines';
import { runWithCleanup, type Cleanup } from './cleanup';
import { directRound } from './direct-round';
import { fmtMs } from './format';
import { freezeRound } from './freeze-round';
import { chooseTempBase, describeMachine, loadAverage, RESULTS_DIR } from './machine';
import { parseOptions } from './options';
import { freezeReport, report } from './report';
import { sessionRound, type RoundCheck } from './session-round';
import { startSystem } from './system';
import { blobSizes, writeSeed } from './workload';

async function main(cleanup: Cleanup): Promise<void> {
  const options = parseOptions();
  const loadBefore = loadAverage();
  // The bench handles SIGINT/SIGTERM itself (cleanup stops sessions through the workers, so they must still run).
  Runtime.install({ logger: new DefaultLogger('WARN'), shutdownSignals: [] });

  const { base, why } = chooseTempBase();
  const root = fs.mkdtempSync(path.join(base, 'ds-bench-'));
  cleanup.add('temp dir', () => fsp.rm(root, { recursive: true, force: true }));
  const sizes = blobSizes(options);
  const totalBytes = sizes.reduce((a, b) => a + b, 0);
  console.log(
    `bench: ${options.sizeMiB} MiB in ${sizes.length} files, ${options.rounds} rounds, temp dir ${root} (${why})`,
  );
  const [load1 = 0] = os.loadavg();
  if (load1 > os.cpus().length / 2) {
    console.warn(
      `bench: warning: load average ${load1.toFixed(2)} on ${os.cpus().length} cores: other work is running, ` +
        'expect noisy numbers (see the "everything else" CPU row)',
    );
  }

  const seed = writeSeed(path.join(root, 'seed'), sizes);
  // The freeze rows are read against a capture of the same runtime without pre-copy, not against these.
  const baselines = options.freezeOnly
    ? null
    : (console.log('bench: measuring baselines…'),
      await measureBaselines(path.join(root, 'baseline'), seed.dir, totalBytes, options.rounds));

  console.log('bench: starting the Temporal dev server and the workers…');
  const system = await startSystem(root, seed, totalBytes, cleanup);
  const checks: RoundCheck[] = [];
  for (let round = 1; round <= options.rounds; round++) {
    if (!options.freezeOnly) {
      checks.push(await sessionRound(system.session, round));
      await directRound(system.direct, round);
    }
    if (!options.skipFreeze) await freezeRound(system.freeze, round);
    const line = system.recorder.records
      .filter((rec) => rec.round === round)
      .map((rec) => `${rec.op} ${fmtMs(rec.ms)}`)
      .join(', ');
    console.log(`bench: round ${round}/${options.rounds}: ${line}`);
  }

  const machine = describeMachine({ root, why }, loadBefore);
  const markdown = baselines
    ? report(options, machine, baselines, system.recorder.records, checks)
    : freezeReport(options, machine, system.recorder.records);
  console.log(`\n${markdown}`);
  fs.mkdirSync(RESULTS_DIR, { recursive: true });
  fs.writeFileSync(path.join(RESULTS_DIR, 'results.md'), markdown);
  console.log(`bench: written to ${path.relative(process.cwd(), path.join(RESULTS_DIR, 'results.md'))}`);
}

runWithCleanup('bench', main);
