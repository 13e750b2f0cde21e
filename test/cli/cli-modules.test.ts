/**
 * The CLI loads what a command needs and nothing more: `status` goes through Temporal without the snapshot engine,
 * the runtimes, the activities or the worker (their loading was most of a command's start-up); nor does `timeline`,
 * whose older pages a worker reads; a store command (`gc`) loads the engine. Read from the modules the real bin had
 * loaded when it exited.
 */
import { execFile } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const BIN = path.join(__dirname, '..', '..', 'bin', 'durable-sessions.js');
let dir: string;

beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ds-cli-modules-'));
  // Preloaded into the CLI: at exit, the files of every CommonJS module it loaded.
  fs.writeFileSync(
    path.join(dir, 'record.js'),
    `process.on('exit', () => require('node:fs').writeFileSync(process.env.DS_TEST_MODULES, Object.keys(require.cache).join('\\n')));`,
  );
});
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

/** Runs the bin and returns the modules it loaded (paths under the repository or node_modules). */
function modulesOf(...args: string[]): Promise<{ stderr: string; modules: string[] }> {
  const record = path.join(dir, `${crypto.randomUUID()}.txt`);
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      ['--require', path.join(dir, 'record.js'), BIN, ...args],
      {
        env: {
          ...process.env,
          TEMPORAL_ADDRESS: process.env.DS_TEST_TEMPORAL_ADDRESS,
          DS_TASK_QUEUE: `test-${crypto.randomUUID()}`,
          DS_SNAPSHOT_DIR: path.join(dir, 'snapshots'),
          DS_MASTER_KEYS: `m-1:${crypto.randomBytes(32).toString('base64')}`,
          DS_PAYLOAD_KEYS: `p-1:${crypto.randomBytes(32).toString('base64')}`,
          DS_TEST_MODULES: record,
        },
      },
      (_error, _stdout, stderr) =>
        resolve({ stderr, modules: fs.readFileSync(record, 'utf8').split('\n').filter(Boolean) }),
    );
  });
}

// The keyring (and the sealing it uses) is what the payload codec needs: the rest of the engine is the store.
const engine = (m: string) => /[/\\]snapshots[/\\]engine[/\\](?!keyring\.|crypto\.)/.test(m);
const sessionSide = (m: string) =>
  /[/\\](src|dist)[/\\](runtimes|activities|workflows|gateway)[/\\]|[/\\](src|dist)[/\\]worker\.[jt]s$/.test(m) ||
  m.includes(`${path.sep}@temporalio${path.sep}worker${path.sep}`);

test('status loads the Temporal client but not the snapshot engine, the runtimes or the worker', async () => {
  const { stderr, modules } = await modulesOf('status', 'no-such-session');
  expect(stderr).toContain('SessionNotFound'); // it went all the way to Temporal
  expect(modules.some((m) => m.includes(`${path.sep}@temporalio${path.sep}client${path.sep}`))).toBe(true);
  expect(modules.filter(engine)).toEqual([]);
  expect(modules.filter(sessionSide)).toEqual([]);
});

test('help loads neither the Temporal client nor the store', async () => {
  const { modules } = await modulesOf('--help');
  expect(modules.filter((m) => m.includes(`${path.sep}@temporalio${path.sep}`))).toEqual([]);
  expect(modules.filter(engine)).toEqual([]);
});

test('timeline loads no store: a worker reads older pages', async () => {
  const { modules } = await modulesOf('timeline', 'no-such-session');
  expect(modules.filter(engine)).toEqual([]);
  expect(modules.filter(sessionSide)).toEqual([]);
});

test('a store command loads the store', async () => {
  const { modules } = await modulesOf('gc', '--dry-run');
  expect(modules.filter(engine)).not.toEqual([]);
});
