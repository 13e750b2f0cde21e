/**
 * The package as a service installs it: `npm pack` (whose `prepare` compiles dist/), the tarball installed into a
 * scratch project outside the repository, and README.md's "From TypeScript" example — taken from the README itself,
 * so the two cannot drift — type-checked against the installed types and run as JavaScript against `npm start`.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { devStackEnv } from '../../src/dev-server';
import { eventually } from '../helpers/temporal';

const root = path.resolve(__dirname, '..', '..');
const exec = promisify(execFile);

let tmp: string;
let scratch: string;
let npmStartEnv: NodeJS.ProcessEnv;
let npm: ChildProcess | undefined;
let output = '';

/** The first ```ts block under the README's "### From TypeScript" heading. */
function readmeExample(): string {
  const readme = fs.readFileSync(path.join(root, 'README.md'), 'utf8');
  const section = readme.slice(readme.indexOf('\n### From TypeScript\n'));
  const match = /```ts\n([\s\S]*?)```/.exec(section);
  if (!match) throw new Error('README.md has no ```ts block under "### From TypeScript"');
  return match[1]!;
}

/**
 * The tarball `npm pack` makes, packed from a copy of the package's files beside the repository's node_modules: the
 * `prepare` it runs compiles into that copy, not into the dist/ that other tests' CLI runs from.
 */
async function pack(): Promise<string> {
  const staging = path.join(tmp, 'staging');
  fs.mkdirSync(staging);
  for (const entry of [
    'package.json',
    'package-lock.json',
    'README.md',
    'tsconfig.json',
    'tsconfig.build.json',
    'bin',
    'src',
  ]) {
    fs.cpSync(path.join(root, entry), path.join(staging, entry), { recursive: true });
  }
  fs.symlinkSync(path.join(root, 'node_modules'), path.join(staging, 'node_modules'));
  const { stdout } = await exec('npm', ['pack', '--json', '--pack-destination', tmp], { cwd: staging });
  const [{ filename }] = JSON.parse(stdout.slice(stdout.indexOf('['))) as [{ filename: string }];
  return path.join(tmp, filename);
}

async function npmStart(): Promise<void> {
  const { env } = await devStackEnv(path.join(tmp, 'data'));
  npmStartEnv = env;
  npm = spawn('npm', ['start'], { cwd: root, env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  npm.stdout!.on('data', (d: Buffer) => (output += d.toString()));
  npm.stderr!.on('data', (d: Buffer) => (output += d.toString()));
  await eventually(() => output.includes(' polling '), 180_000);
}

beforeAll(async () => {
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ds-packed-'));
  scratch = path.join(tmp, 'scratch');
  fs.mkdirSync(scratch);
  fs.writeFileSync(
    path.join(scratch, 'package.json'),
    JSON.stringify({ name: 'scratch', private: true, type: 'module' }),
  );
  const [tarball] = await Promise.all([pack(), npmStart()]);
  // From npm's cache, which the repository's own install filled; the registry only for what it lacks. No install
  // scripts: the optional native zstd binding is the worker's, not the client's.
  await exec('npm', ['install', tarball, '--prefer-offline', '--no-audit', '--no-fund', '--ignore-scripts'], {
    cwd: scratch,
  });
}, 600_000);

afterAll(async () => {
  if (npm?.pid && npm.exitCode === null) {
    process.kill(-npm.pid, 'SIGTERM');
    await new Promise((resolve) => npm!.once('exit', resolve));
  }
  fs.rmSync(tmp, { recursive: true, force: true });
});

test('the installed package is JavaScript with types, and needs no TypeScript at run time', () => {
  const installed = path.join(scratch, 'node_modules', 'durable-sessions');
  const manifest = JSON.parse(fs.readFileSync(path.join(installed, 'package.json'), 'utf8')) as {
    exports: Record<string, unknown>;
  };
  expect(Object.keys(manifest.exports)).toEqual(
    expect.arrayContaining(['.', './client', './errors', './config', './codec']),
  );
  for (const file of ['dist/index.js', 'dist/index.d.ts', 'dist/client/index.d.ts', 'bin/durable-sessions.js']) {
    expect(fs.existsSync(path.join(installed, file))).toBe(true);
  }
  expect(fs.existsSync(path.join(installed, 'src'))).toBe(false);
  expect(fs.existsSync(path.join(scratch, 'node_modules', 'tsx'))).toBe(false);
  expect(fs.existsSync(path.join(scratch, 'node_modules', 'typescript'))).toBe(false);
});

test("README's TypeScript example type-checks against the installed package and runs against npm start", async () => {
  fs.writeFileSync(path.join(scratch, 'example.mts'), readmeExample());
  fs.writeFileSync(
    path.join(scratch, 'tsconfig.json'),
    JSON.stringify({
      compilerOptions: {
        module: 'nodenext',
        target: 'es2022',
        strict: true,
        // Temporal's own declarations name `ms`, which ships none: the example and this package's are checked.
        skipLibCheck: true,
        typeRoots: [path.join(root, 'node_modules', '@types')],
        types: ['node'],
        outDir: 'out',
      },
      files: ['example.mts'],
    }),
  );
  await exec(process.execPath, [require.resolve('typescript/bin/tsc'), '-p', '.'], { cwd: scratch });

  // From the scratch project, the way the README says: the worker's variables, and npm start's data directory for
  // its dev payload key.
  const run = await exec(process.execPath, ['out/example.mjs'], { cwd: scratch, env: npmStartEnv, timeout: 180_000 });
  const stopped = /^stopped (build-[a-z0-9]+); final checkpoint \S+$/m.exec(run.stdout);
  expect(stopped).not.toBeNull();

  // The installed command (dist/, no sources beside it) reads the session: its spec went to Temporal encrypted.
  const status = await exec(
    process.execPath,
    [path.join(scratch, 'node_modules', '.bin', 'durable-sessions'), 'status', stopped![1]!, '--json'],
    { cwd: scratch, env: npmStartEnv },
  );
  expect(JSON.parse(status.stdout)).toMatchObject({
    phase: 'completed',
    payloads: { mode: 'aes-256-gcm', keyId: 'dev-1' },
  });
});
