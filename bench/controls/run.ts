/**
 * Controls benchmark: the round trip of each session control on a small memory session against a bare no-op Update
 * on the same dev server, the history events each adds, fork into 10 of a large session, and a long session of
 * fire-and-forget checkpoints across continue-as-new.
 *
 *   npx tsx bench/controls/run.ts                 # 200 runs each, 1 GiB fork, 2,000 checkpoints
 *   npx tsx bench/controls/run.ts --quick         # 50 runs each, 256 MiB fork, 500 checkpoints
 *   npx tsx bench/controls/run.ts --large-mb 512 --checkpoints 100000 --runs 500
 *
 * Nothing here asserts a time: it prints (and writes to .bench/controls.md) what it measured, PASS/MISS beside targets.
 */
import * as fs from 'node:fs';
import * as fsp from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import { performance } from 'node:perf_hooks';
import { DefaultLogger, Runtime } from '@temporalio/worker';
import { runWithCleanup, type Cleanup } from '../sessions/cleanup';
import { measureHistory } from './history';
import { measureLargeFork } from './large-fork';
import { measureBare, measureControls } from './latency';
import { measureLongSession } from './long-session';
import { parseOptions } from './options';
import { report } from './report';
import { startControlsSystem } from './system';

const RESULTS_FILE = path.resolve(__dirname, '..', '..', '.bench', 'controls.md');
/** The size the large fork is compared with. */
const SMALL_FORK_MIB = 16;

async function main(cleanup: Cleanup): Promise<void> {
  const started = performance.now();
  const options = parseOptions();
  // The bench handles SIGINT/SIGTERM itself: cleanup stops the workers, then the server.
  Runtime.install({ logger: new DefaultLogger('WARN'), shutdownSignals: [] });
  // In memory when it can be: the bench is about the controls, not the disk's fsync rate.
  const shm = fs.existsSync('/dev/shm');
  const base = shm ? '/dev/shm' : os.tmpdir();
  const root = fs.mkdtempSync(path.join(base, 'ds-controls-'));
  cleanup.add('temp dir', () => fsp.rm(root, { recursive: true, force: true }));
  // And if the process dies before cleanup reaches it (a call in flight at Ctrl-C can throw once its channel closes).
  process.once('exit', () => fs.rmSync(root, { recursive: true, force: true }));
  const storeDir = `${root} (${shm ? 'tmpfs, /dev/shm' : 'os.tmpdir(): /dev/shm does not exist'})`;
  console.log(`controls: ${JSON.stringify(options)}, store under ${storeDir}`);

  const sys = await startControlsSystem(root, options.suggestAt, cleanup);
  console.log('controls: bare update…');
  const bare = await measureBare(sys, options.runs);
  console.log(
    `controls: bare p50 ${bare.bare.p50.toFixed(1)} ms, with an activity ${bare.bareActivity.p50.toFixed(1)} ms; ` +
      'controls of a small session…',
  );
  const controls = await measureControls(sys, options.runs);
  console.log('controls: history events…');
  const history = await measureHistory(sys, options.historyTimes);
  console.log(`controls: fork into 10 at ${SMALL_FORK_MIB} MiB and ${options.largeMiB} MiB…`);
  const large = [];
  for (const mib of [SMALL_FORK_MIB, options.largeMiB]) large.push(await measureLargeFork(sys, mib));
  console.log(`controls: long session, ${options.checkpoints} checkpoints…`);
  const long = await measureLongSession(sys, options.checkpoints);

  const cpu = os.cpus();
  const machine =
    `${cpu[0]?.model ?? 'unknown CPU'} × ${cpu.length}, ${(os.totalmem() / 1024 ** 3).toFixed(0)} GiB, ` +
    `node ${process.version}, load average at the end ${os
      .loadavg()
      .map((l) => l.toFixed(2))
      .join(' ')}`;
  const markdown = report({
    options,
    machine,
    storeDir,
    latency: { ...bare, ...controls },
    history,
    large,
    long,
    totalMs: performance.now() - started,
  });
  console.log(`\n${markdown}`);
  fs.mkdirSync(path.dirname(RESULTS_FILE), { recursive: true });
  fs.writeFileSync(RESULTS_FILE, markdown);
  console.log(`controls: written to ${path.relative(process.cwd(), RESULTS_FILE)}`);
}

runWithCleanup('controls', main);
