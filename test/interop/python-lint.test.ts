import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

/**
 * The Python client (python/) and the raw SDK example (examples/python/) are typed and formatted as python's
 * pyproject.toml says: ruff's lint and format check and mypy in strict mode, from the tools venv (`npm run setup`
 * installs them, pinned), each as a separate process.
 */
const ROOT = path.join(__dirname, '..', '..');
const BIN = path.join(ROOT, '.tools', 'venv', 'bin');
// Relative to examples/python/, where its tools run.
const CONFIG = '../../python/pyproject.toml';

function run(dir: string, tool: string, args: string[]): Promise<{ code: number; output: string }> {
  const bin = path.join(BIN, tool);
  if (!fs.existsSync(bin)) throw new Error(`${bin} is missing: run npm run setup`);
  return new Promise((resolve) => {
    execFile(bin, args, { cwd: path.join(ROOT, dir), timeout: 100_000 }, (error, stdout, stderr) =>
      resolve({ code: error ? Number(error.code ?? 1) : 0, output: stdout + stderr }),
    );
  });
}

const EXAMPLES = ['payload_codec.py', 'sessions_raw.py'];

test.each([
  // From python/, so that each tool reads its configuration there.
  ['python', 'ruff', ['check', '.']],
  ['python', 'ruff', ['format', '--check', '.']],
  ['python', 'mypy', ['--strict']],
  ['examples/python', 'ruff', ['check', '--config', CONFIG, '.']],
  ['examples/python', 'ruff', ['format', '--check', '--config', CONFIG, '.']],
  ['examples/python', 'mypy', ['--strict', '--config-file', CONFIG, ...EXAMPLES]],
])(
  'in %s: %s %j passes',
  async (dir, tool, args) => {
    const { code, output } = await run(dir, tool, args);
    if (code !== 0) throw new Error(`${tool} ${args.join(' ')} failed (exit ${code}):\n${output}`);
  },
  120_000,
);
