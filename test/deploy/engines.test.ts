/**
 * The README promises Node.js 20+, and package.json says so (`engines`): installing the lockfile must not warn that
 * a dependency needs a newer Node. `npm ci --dry-run` reads the lockfile as `npm ci` does, without installing.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';

const root = path.resolve(__dirname, '..', '..');
const exec = promisify(execFile);

test('npm ci warns of no dependency that needs a newer Node than package.json promises', async () => {
  const manifest = JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8')) as {
    engines: { node: string };
  };
  expect(manifest.engines.node).toBe('>=20');
  expect(fs.readFileSync(path.join(root, 'README.md'), 'utf8')).toContain('Node.js 20+');

  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ds-engines-'));
  try {
    for (const file of ['package.json', 'package-lock.json'])
      fs.copyFileSync(path.join(root, file), path.join(dir, file));
    const { stdout, stderr } = await exec(
      'npm',
      ['ci', '--dry-run', '--ignore-scripts', '--prefer-offline', '--no-audit', '--no-fund'],
      { cwd: dir },
    );
    expect(`${stdout}${stderr}`).not.toContain('EBADENGINE');
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
