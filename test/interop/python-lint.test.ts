import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

/**
 * The Python client (python/) is typed and formatted as its pyproject.toml says: ruff's lint and format check and
 * mypy in strict mode, from the tools venv (`npm run setup` installs them, pinned), each as a separate process.
 */
const ROOT = path.join(__dirname, '..', '..');
const PACKAGE = path.join(ROOT, 'python');
const BIN = path.join(ROOT, '.tools', 'venv', 'bin');

function run(tool: string, args: string[]): Promise<{ code: number; output: string }> {
  const bin = path.join(BIN, tool);
  if (!fs.existsSync(bin)) throw new Error(`${bin} is missing: run npm run setup`);
  return new Promise((resolve) => {
    // From python/, so that each tool reads its configuration there.
    execFile(bin, args, { cwd: PACKAGE, timeout: 100_000 }, (error, stdout, stderr) =>
      resolve({ code: error ? Number(error.code ?? 1) : 0, output: stdout + stderr }),
    );
  });
}

test.each([
  ['ruff', ['check', '.']],
  ['ruff', ['format', '--check', '.']],
  ['mypy', ['--strict']],
])(
  '%s %j passes on python/',
  async (tool, args) => {
    const { code, output } = await run(tool, args);
    if (code !== 0) throw new Error(`${tool} ${args.join(' ')} failed (exit ${code}):\n${output}`);
  },
  120_000,
);
