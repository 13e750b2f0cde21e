/**
 * Fault injection against real worker processes: kill -9 and SIGTERM of the worker while sessions start, capture,
 * restore and drain; an outage of the Temporal server; many pause/resume cycles; and on a store in an S3 bucket
 * (bench/reliability/s3.ts), faults of the worker, the S3 server and the path between them. Prints one table, and below it what
 * went wrong in full. On remote sessions (bench/reliability/remote.ts): kill -9 of the worker that drives a sandbox and
 * of a sandbox host, hostile providers, and a stale fencing token. Exits 1 when anything was lost, corrupt, stuck, orphaned or leaked.
 *
 *   npm run reliability                 # the full run (≥ 50 kill points in scenario 1; outages of 10, 60, 300 s)
 *   npx tsx bench/reliability/run.ts --quick
 *   npx tsx bench/reliability/run.ts --scenarios outage,cycles
 *   npx tsx bench/reliability/run.ts --quick --scenarios s3
 *   npx tsx bench/reliability/run.ts --quick --scenarios remote
 *   npx tsx bench/reliability/run.ts --quick --keep   # keeps the temp dir: worker logs, server log, data
 *
 * Everything runs on 127.0.0.1: its own dev server (a free port, SQLite in a temp dir) and workers; all of it is
 * killed and removed at the end, on failure and on Ctrl-C too.
 */
import { randomBytes } from 'node:crypto';
import { parseArgs } from 'node:util';
import { Cluster, type Host } from './cluster';
import { Context, markerPrefix, progress } from './context';
import { sessionProcesses } from './host';
import { calibrate, drainRound, FAULT_NAMES, operationsRound, rowNames, type Durations, type Fault } from './crash';
import { cycles, cyclesRow } from './cycles';
import { outage, outageRow } from './outage';
import { remoteRowNames, remoteScenarios, type RemotePlan } from './remote';
import { s3RowNames, s3Scenarios, type S3Plan } from './s3';
import { Tally } from './tally';

const SCENARIOS = ['crash', 'outage', 'cycles', 's3', 'remote'] as const;
const FAULTS: readonly Fault[] = ['kill', 'term'];
type Scenario = (typeof SCENARIOS)[number];
const HOST_SCENARIOS: readonly Scenario[] = ['crash', 'outage', 'cycles'];

interface Plan {
  scenarios: readonly Scenario[];
  /** Rounds of each kind (operations, drain) per fault (kill -9, SIGTERM). */
  rounds: number;
  /** Sessions per operation in a round. */
  perOp: number;
  outagesS: number[];
  cycles: number;
  cycleSessions: number;
  s3: S3Plan;
  remote: RemotePlan;
  /** The whole run stops (and fails) after this long: for crash, outage and cycles; for s3; for remote. */
  budgetMs: [number, number, number];
  /** Keep the temp dir (worker logs, the server's log and SQLite file, the data) for a look afterwards. */
  keep: boolean;
}

const QUICK: Omit<Plan, 'scenarios' | 'keep'> = {
  rounds: 1,
  perOp: 2,
  outagesS: [10],
  cycles: 20,
  cycleSessions: 1,
  s3: { trials: 2, stormMs: 4_000, pastBound: false, cutsS: [10] },
  // One kill -9 of the worker at each kill point.
  remote: { workerKills: 4, hostKills: 1 },
  budgetMs: [4 * 60_000, 7 * 60_000, 12 * 60_000],
};
// Each round kills once, striking `perOp` sessions of each operation (and of the drain) at their own points.
const FULL: Omit<Plan, 'scenarios' | 'keep'> = {
  rounds: 8,
  perOp: 2,
  outagesS: [10, 60, 300],
  cycles: 20,
  cycleSessions: 2,
  s3: { trials: 6, stormMs: 8_000, pastBound: true, cutsS: [10, 60, 300] },
  remote: { workerKills: 12, hostKills: 3 },
  budgetMs: [75 * 60_000, 30 * 60_000, 40 * 60_000],
};

function plan(): Plan {
  const { values } = parseArgs({
    strict: true,
    options: {
      quick: { type: 'boolean', default: false },
      scenarios: { type: 'string', default: SCENARIOS.join(',') },
      keep: { type: 'boolean', default: false },
      help: { type: 'boolean', default: false },
    },
  });
  if (values.help) {
    console.log('usage: tsx bench/reliability/run.ts [--quick] [--scenarios crash,outage,cycles,s3,remote] [--keep]');
    process.exit(0);
  }
  const scenarios = values.scenarios.split(',').map((s) => s.trim());
  const unknown = scenarios.filter((s) => !(SCENARIOS as readonly string[]).includes(s));
  if (unknown.length > 0)
    throw new Error(`unknown scenario(s) ${unknown.join(', ')}: expected ${SCENARIOS.join(', ')}`);
  return { ...(values.quick ? QUICK : FULL), scenarios: scenarios as Scenario[], keep: values.keep };
}

async function runScenarios(cluster: Cluster, tally: Tally, runId: string, p: Plan): Promise<void> {
  const contexts: Context[] = [];
  const contextOf = (host: Host) => {
    const ctx = new Context(cluster, host, tally, runId);
    contexts.push(ctx);
    return ctx;
  };
  const context = (name: string) => contextOf(cluster.host(name));
  if (p.scenarios.some((s) => HOST_SCENARIOS.includes(s))) await hostScenarios(tally, context, p);
  if (p.scenarios.includes('s3')) await s3Scenarios(cluster, contextOf, p.s3);
  if (p.scenarios.includes('remote')) await remoteScenarios(cluster, tally, runId, p.remote);
  // Whatever is still there now was left by some scenario, not by a session still running: there is none.
  for (const ctx of contexts) {
    ctx.orphans(ctx.processes(), 'at the end of the run');
    ctx.leaks([], 'at the end of the run', 'files of no session');
  }
}

/** The scenarios on hosts whose store is a directory: crash, outage, cycles. */
async function hostScenarios(tally: Tally, context: (name: string) => Context, p: Plan): Promise<void> {
  const main = context('a');
  if (p.scenarios.includes('crash')) {
    // kill -9 on one host, SIGTERM on another, at once: each host's rounds wait mostly on its own worker's restart.
    await Promise.all(
      FAULTS.map(async (fault, i) => {
        const ctx = i === 0 ? main : context('b');
        await ctx.host.startWorker();
        const t: Durations = await calibrate(ctx, p.perOp);
        progress(`${ctx.host.name}: fault windows (ms): ${JSON.stringify(t)}`);
        tally.findings.push(
          `NOTE — ${FAULT_NAMES[fault]}: fault windows, measured without a fault (ms): ${JSON.stringify(t)}`,
        );
        for (let round = 1; round <= p.rounds; round++) {
          progress(`${ctx.host.name}: ${fault} round ${round}: start, capture, restore`);
          await operationsRound(ctx, fault, round, p.perOp, t);
          progress(`${ctx.host.name}: ${fault} round ${round}: drain`);
          await drainRound(ctx, fault, round, p.perOp, t);
        }
        if (ctx !== main) await ctx.host.terminateWorker(ctx.host.currentWorker!);
      }),
    );
  }
  if (!main.host.currentWorker) await main.host.startWorker();
  const cycling = () => {
    progress(`${p.cycles} checkpoint/pause/resume cycles`);
    return cycles(main, p.cycles, p.cycleSessions);
  };
  let cycled = !p.scenarios.includes('cycles');
  if (p.scenarios.includes('outage')) {
    for (const seconds of p.outagesS) {
      progress(`server outage of ${seconds} s`);
      // The cycles run while the first outage's sessions are watched: they need the server, not the fault.
      await outage(main, seconds, cycled ? undefined : cycling);
      cycled = true;
    }
  }
  if (!cycled) await cycling();
}

async function main(): Promise<number> {
  const p = plan();
  const tally = new Tally();
  // Rows in a fixed order, so every run's table reads the same.
  if (p.scenarios.includes('crash')) for (const name of FAULTS.flatMap(rowNames)) tally.row(name);
  if (p.scenarios.includes('outage')) for (const s of p.outagesS) tally.row(outageRow(s));
  if (p.scenarios.includes('cycles')) tally.row(cyclesRow(p.cycles));
  if (p.scenarios.includes('s3')) for (const name of s3RowNames(p.s3)) tally.row(name);
  if (p.scenarios.includes('remote')) for (const name of remoteRowNames()) tally.row(name);

  const runId = randomBytes(4).toString('hex');
  const cluster = await Cluster.start();
  // From here on everything started is stopped again, whatever happens.
  const cleanUp = async () => {
    await cluster.close({ keep: p.keep });
    // Then the sessions' processes (no worker is left to start another): a worker killed with -9 leaves them, and so
    // may a failed run. Their marker, or a working directory under the (maybe removed) temp dir, finds them.
    for (const leftover of sessionProcesses(markerPrefix(runId), cluster.dir)) {
      try {
        process.kill(leftover.pid, 'SIGKILL');
      } catch {
        // Gone already.
      }
    }
    if (p.keep) console.error(`kept ${cluster.dir}`);
  };
  const interrupted = () => {
    console.error('interrupted: stopping the workers, the sessions and the server');
    void cleanUp().finally(() => process.exit(130));
  };
  process.once('SIGINT', interrupted);
  process.once('SIGTERM', interrupted);
  let failure: unknown;
  let timer: NodeJS.Timeout | undefined;
  try {
    const [hosts, s3, remote] = p.budgetMs;
    const budgetMs =
      (p.scenarios.some((s) => HOST_SCENARIOS.includes(s)) ? hosts : 0) +
      (p.scenarios.includes('s3') ? s3 : 0) +
      (p.scenarios.includes('remote') ? remote : 0);
    const budget = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`the run took longer than ${budgetMs / 60_000} minutes`)), budgetMs);
    });
    await Promise.race([runScenarios(cluster, tally, runId, p), budget]);
  } catch (error) {
    failure = error;
  } finally {
    clearTimeout(timer);
    await cleanUp();
  }
  console.log(tally.table());
  const underWay = tally.underWay();
  if (underWay)
    console.log(`\nNOTE — faults that came while the operation was under way (it answered after them):\n${underWay}`);
  for (const finding of tally.findings) console.log(`\n${finding}`);
  if (failure) {
    console.log(
      `\nthe run did not finish: ${failure instanceof Error ? (failure.stack ?? failure.message) : String(failure)}`,
    );
    return 1;
  }
  return tally.clean ? 0 : 1;
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    console.error(error instanceof Error ? error.stack : error);
    process.exit(1);
  },
);
