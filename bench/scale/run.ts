/**
 * Scale benchmark: many sessions on one worker or several, each target printed as a ratio against a bare-workflow
 * baseline measured in the same run, on the same Temporal dev server (with as many bare workers). The workers under
 * test run in child processes (bench/scale/worker-process.ts), so the memory, CPU and open files measured are theirs.
 *
 *   npm run bench:scale            # 1,000 sessions, 200 workspace sessions, 30 s idle window
 *   npx tsx bench/scale/run.ts --quick
 *   npx tsx bench/scale/run.ts --sessions 500 --concurrency 25
 *   npx tsx bench/scale/run.ts --workers 2 --store s3   # two workers sharing nothing but Temporal and a bucket
 *   DS_BENCH_CORE_LOG='temporalio_sdk_core::worker::workflow=debug,warn' npx tsx bench/scale/run.ts --quick
 *                                  # the SDK core's log of the worker under test, on stderr
 *
 * Nothing here asserts: it prints (and writes to .bench/scale.md) what it measured, with PASS/MISS beside each target.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { parseArgs } from 'node:util';
import { Client, Connection } from '@temporalio/client';
import { bundleWorkflowCode } from '@temporalio/worker';
import { freePort, startDevServer } from '../../src/dev-server';
import { DEFAULT_MAX_CACHED_WORKFLOWS } from '../../src/worker';
import { SESSION_WORKFLOWS } from '../../src/workflow-bundle';
import { measureContexts } from './workflow-context';
import { startS3Server } from '../../test/helpers/s3-server';
import { runBare } from './bare-scenario';
import { fleetHealth } from './fleet-health';
import { report } from './report';
import type { ScaleContext, ScaleOptions } from './scenario';
import { runSessions } from './session-scenario';
import { stopAllWorkerProcesses } from './worker-handle';

const PROJECT_DIR = path.resolve(__dirname, '..', '..');
const RESULTS_DIR = path.join(PROJECT_DIR, '.bench');

function parseOptions(): ScaleOptions {
  const { values } = parseArgs({
    strict: true,
    options: {
      quick: { type: 'boolean', default: false },
      sessions: { type: 'string' },
      'workspace-sessions': { type: 'string' },
      concurrency: { type: 'string', default: '50' },
      'idle-seconds': { type: 'string' },
      workers: { type: 'string', default: '1' },
      store: { type: 'string', default: 'local' },
      'max-cached': { type: 'string' },
      profile: { type: 'boolean', default: false },
    },
  });
  if (values.store !== 'local' && values.store !== 's3')
    throw new Error(`--store must be local or s3, got ${values.store}`);
  const num = (name: string, raw: string | undefined, fallback: number): number => {
    if (raw === undefined) return fallback;
    const n = Number(raw);
    if (!Number.isInteger(n) || n < 1) throw new Error(`--${name} must be a whole number ≥ 1, got ${raw}`);
    return n;
  };
  const quick = values.quick;
  const sessions = num('sessions', values.sessions, quick ? 100 : 1_000);
  const cacheBound = values['max-cached'];
  return {
    sessions,
    workspaceSessions: num('workspace-sessions', values['workspace-sessions'], quick ? 20 : 200),
    concurrency: num('concurrency', values.concurrency, 50),
    idleSeconds: num('idle-seconds', values['idle-seconds'], quick ? 10 : 30),
    warmup: 10,
    workers: num('workers', values.workers, 1),
    store: values.store,
    // Unless told, a cache of half the sessions (at most the worker's default): the first half's starts then measure
    // what a cached session costs, the second half's what an evicted one does.
    maxCachedWorkflows:
      cacheBound !== undefined
        ? num('max-cached', cacheBound, 0)
        : Math.min(DEFAULT_MAX_CACHED_WORKFLOWS, Math.max(2, Math.floor(sessions / 2))),
    projectedCache: cacheBound !== undefined ? num('max-cached', cacheBound, 0) : DEFAULT_MAX_CACHED_WORKFLOWS,
    ...(values.profile ? { profileDir: path.join(RESULTS_DIR, 'scale-profile') } : {}),
  };
}

const quietBundler = { trace() {}, debug() {}, info() {}, warn: console.warn, error: console.error, log() {} };

async function bundle(options: { workflowsPath: string; preloadModules?: string[] }, file: string): Promise<string> {
  const { code } = await bundleWorkflowCode({ ...options, logger: quietBundler });
  fs.writeFileSync(file, code);
  return file;
}

/** Workflows created per bundle in the context measurement. */
const CONTEXTS_MEASURED = 200;

/** Removed on Ctrl-C too, which skips main's own cleanup. */
let tempDir: string | undefined;

async function main(): Promise<void> {
  const options = parseOptions();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ds-scale-'));
  tempDir = dir;
  const finals: (() => Promise<unknown>)[] = [async () => fs.rmSync(dir, { recursive: true, force: true })];
  try {
    console.log(
      `scale: ${options.sessions} sessions, ${options.workspaceSessions} workspace sessions, ` +
        `${options.concurrency} in flight, idle window ${options.idleSeconds} s, ${options.workers} worker(s), ` +
        `${options.store} store (temp dir ${dir})`,
    );
    const s3 = options.store === 's3' ? await startS3Server({ bucket: 'ds-scale' }) : undefined;
    if (s3) finals.push(() => s3.stop());
    const metricsPort = await freePort();
    const server = await startDevServer({
      port: await freePort(),
      uiPort: null,
      logFile: path.join(dir, 'temporal.log'),
      extraArgs: ['--metrics-port', String(metricsPort)],
    });
    finals.push(() => server.stop());
    const [sessionBundle, unsharedBundle, bareBundle] = await Promise.all([
      bundle(SESSION_WORKFLOWS, path.join(dir, 'sessions-bundle.js')),
      bundle({ workflowsPath: SESSION_WORKFLOWS.workflowsPath }, path.join(dir, 'sessions-unshared-bundle.js')),
      bundle({ workflowsPath: require.resolve('./bare-workflows') }, path.join(dir, 'bare-bundle.js')),
    ]);
    console.log('scale: workflow contexts…');
    const contexts = {
      count: CONTEXTS_MEASURED,
      sessions: await measureContexts(sessionBundle, 'sessionWorkflow', CONTEXTS_MEASURED),
      unshared: await measureContexts(unsharedBundle, 'sessionWorkflow', CONTEXTS_MEASURED),
      bare: await measureContexts(bareBundle, 'bareSessionWorkflow', CONTEXTS_MEASURED),
    };
    const connection = await Connection.connect({ address: server.address });
    finals.push(() => connection.close());
    const ctx: Omit<ScaleContext, 'dir'> = {
      client: new Client({ connection }),
      options,
      serverPid: server.process.pid!,
      metricsUrl: `http://127.0.0.1:${metricsPort}/metrics`,
      address: server.address,
      runId: randomUUID().slice(0, 8),
      masterKey: randomBytes(32).toString('hex'),
      ...(s3
        ? {
            s3: {
              endpoint: s3.endpoint,
              region: s3.region,
              bucket: s3.bucket,
              credentials: s3.credentials,
              forcePathStyle: true,
              prefix: 'scale',
            },
          }
        : {}),
    };

    console.log('scale: baselines (bare workflows)…');
    const bare = await runBare({ ...ctx, dir }, bareBundle);
    console.log('scale: sessions…');
    const sessions = await runSessions({ ...ctx, dir }, sessionBundle);
    const fleet = await fleetHealth(ctx.client, sessions.finishedAt).catch((err: unknown) => String(err));

    const cpu = os.cpus();
    const machine =
      `${cpu[0]?.model ?? 'unknown CPU'} × ${cpu.length}, ${(os.totalmem() / 1024 ** 3).toFixed(0)} GiB, ` +
      `node ${process.version}, load average after ${os
        .loadavg()
        .map((l) => l.toFixed(2))
        .join(' ')}`;
    const markdown = report(options, sessions, bare, machine, contexts, fleet);
    console.log(`\n${markdown}`);
    // One file per shape of run, so that the one-worker run and the fleet run of `npm run bench` keep both.
    const shape = options.workers === 1 && options.store === 'local' ? '' : `-${options.workers}w-${options.store}`;
    const file = path.join(RESULTS_DIR, `scale${shape}.md`);
    fs.mkdirSync(RESULTS_DIR, { recursive: true });
    fs.writeFileSync(file, markdown);
    console.log(`scale: written to ${path.relative(process.cwd(), file)}`);
  } finally {
    for (const step of finals.reverse()) {
      await step().catch((err: unknown) => console.error(`cleanup failed: ${String(err)}`));
    }
  }
}

/** Set on Ctrl-C or SIGTERM: main, failing as its workers go, leaves the exit to the signal's handler. */
let interrupted = false;
// The worker processes are stopped first: until they exit they write into the directory (workspaces, the store). The
// dev server is killed on exit (startDevServer). A Ctrl-C reaches this process twice (from the terminal, and relayed
// by tsx): a second signal must not take the default exit before the directory is gone.
for (const [signal, code] of [
  ['SIGINT', 130],
  ['SIGTERM', 143],
] as const) {
  process.on(signal, () => {
    if (interrupted) return;
    interrupted = true;
    void stopAllWorkerProcesses()
      .catch((err: unknown) => console.error(`stopping the workers failed: ${String(err)}`))
      .finally(() => {
        if (tempDir) fs.rmSync(tempDir, { recursive: true, force: true });
        process.exit(code);
      });
  });
}
main().then(
  // The client's native connection can keep the loop alive after it was closed.
  () => interrupted || process.exit(0),
  (err: unknown) => {
    if (interrupted) return;
    console.error(`scale benchmark failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
    process.exit(1);
  },
);
