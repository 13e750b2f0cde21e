/**
 * How long one CLI command takes, as a shell runs it: `durable-sessions status` of a running session against
 * `npm start` (its own data directory and free ports), beside `node -e ''` (starting Node at all) and the same command
 * run from the sources through tsx (what the bin did before it ran dist/). The three are taken in turn, so each sees
 * the same machine at the same moment, and beside the floor of any CLI on the Temporal SDK: a script that loads
 * `@temporalio/client`, connects, sends one query and closes (most of it is building the SDK's protobuf root). It builds dist/ first when src/ is newer (the bin would run the sources then).
 *
 *   npx tsx bench/cli.ts            # 20 rounds
 *   npx tsx bench/cli.ts --quick    # 8 rounds
 *
 * Prints medians and PASS or MISS against the target (status ≤ 300 ms); asserts nothing.
 */
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { devStackEnv } from '../src/dev-server';

const { values } = parseArgs({ options: { quick: { type: 'boolean', default: false } }, strict: true });
const ROUNDS = values.quick ? 8 : 20;
const TARGET_MS = 300;
const root = path.resolve(__dirname, '..');
const bin = path.join(root, 'bin', 'durable-sessions.js');

function ms(argv: string[], env: NodeJS.ProcessEnv): number {
  const t0 = process.hrtime.bigint();
  const run = spawnSync(process.execPath, argv, { cwd: root, env, encoding: 'utf8' });
  const elapsed = Number(process.hrtime.bigint() - t0) / 1e6;
  if (run.status !== 0) throw new Error(`${argv.join(' ')} exited ${run.status}: ${run.stderr}`);
  return elapsed;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

function newestMtime(dir: string): number {
  return Math.max(
    ...fs.readdirSync(dir, { withFileTypes: true }).map((e) => {
      const p = path.join(dir, e.name);
      return e.isDirectory() ? newestMtime(p) : fs.statSync(p).mtimeMs;
    }),
  );
}

async function main(): Promise<void> {
  const compiled = path.join(root, 'dist', 'cli', 'main.js');
  if (!fs.existsSync(compiled) || fs.statSync(compiled).mtimeMs < newestMtime(path.join(root, 'src'))) {
    console.log('building dist/ (src/ is newer)');
    const build = spawnSync('npm', ['run', 'build'], { cwd: root, stdio: 'inherit' });
    if (build.status !== 0) throw new Error('npm run build failed');
  }
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'ds-bench-cli-'));
  const { env } = await devStackEnv(dataDir);
  const server = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts'], {
    cwd: root,
    env,
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  server.stdout.on('data', (d: Buffer) => (output += d.toString()));
  server.stderr.on('data', (d: Buffer) => (output += d.toString()));
  try {
    for (let waited = 0; !output.includes(' polling '); waited += 200) {
      if (server.exitCode !== null || waited > 120_000) throw new Error(`npm start did not come up:\n${output}`);
      await new Promise((r) => setTimeout(r, 200));
    }
    ms([bin, 'start', 'bench-cli', '--memory', '--', 'state'], env);

    // The floor of any CLI built on the Temporal SDK: load @temporalio/client, connect, one query, close.
    // The result stays encrypted: the floor decodes no payload.
    const bareQuery = `const { Connection } = require('@temporalio/client');
      (async () => {
        const connection = await Connection.connect({ address: '127.0.0.1:${env.DS_DEV_SERVER_PORT}' });
        await connection.workflowService.queryWorkflow({
          namespace: 'default',
          execution: { workflowId: 'session-bench-cli' },
          query: { queryType: 'status' },
        });
        await connection.close();
      })().catch((err) => { console.error(err); process.exit(1); });`;
    const paths = {
      "node -e ''": ['-e', ''],
      'bare SDK query (floor)': ['-e', bareQuery],
      'status (dist/)': [bin, 'status', 'bench-cli'],
      'status (sources through tsx)': [
        '-e',
        "require('tsx/cjs'); require('./src/cli/main.ts').cliMain(['status', 'bench-cli']).then(process.exit)",
      ],
    };
    const times = Object.fromEntries(Object.keys(paths).map((k) => [k, [] as number[]]));
    for (const argv of Object.values(paths)) ms(argv, env); // warm the file cache
    for (let round = 0; round < ROUNDS; round++) {
      for (const [name, argv] of Object.entries(paths)) times[name]!.push(ms(argv, env));
    }

    const rows = Object.entries(times).map(([name, xs]) => {
      const verdict = name === 'status (dist/)' ? (median(xs) <= TARGET_MS ? 'PASS' : 'MISS') : '';
      return `| ${name.padEnd(28)} | ${median(xs).toFixed(0).padStart(9)} | ${Math.max(...xs)
        .toFixed(0)
        .padStart(6)} | ${verdict.padEnd(7)} |`;
    });
    console.log(`\nCLI start-up: ${ROUNDS} rounds, ${os.cpus().length} cores, load ${os.loadavg()[0]!.toFixed(2)}`);
    console.log(`| ${'command'.padEnd(28)} | median ms | max ms | ≤ ${TARGET_MS} ms |`);
    console.log(`| ${'-'.repeat(28)} | --------: | -----: | ------- |`);
    for (const row of rows) console.log(row);
  } finally {
    process.kill(-server.pid!, 'SIGTERM');
    await new Promise((r) => server.once('exit', r));
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
