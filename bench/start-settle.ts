/**
 * How long commands that fail at once take to exit: what the settle window of a workspace start (DS_START_SETTLE_MS)
 * must outlast. Each command runs as a workspace command does (its own process group, in an empty directory), with
 * `--busy N` processes spinning beside it to load the host.
 *
 *   npx tsx bench/start-settle.ts              # 10 runs of each, no extra load
 *   npx tsx bench/start-settle.ts --busy 6     # beside six busy processes
 *
 * Nothing here asserts a time: it prints what it measured.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { parseArgs } from 'node:util';

const COMMANDS: [string, string[]][] = [
  ['false', ['false']],
  ['sh -c nosuchbinary', ['sh', '-c', 'nosuchbinary']],
  ['npm run dev (empty dir)', ['npm', 'run', 'dev']],
];

function exitAfter(command: string[], cwd: string): Promise<number> {
  const started = process.hrtime.bigint();
  return new Promise((resolve, reject) => {
    const child = spawn(command[0]!, command.slice(1), { cwd, detached: true, stdio: 'ignore' });
    child.once('error', reject);
    child.once('exit', () => resolve(Number(process.hrtime.bigint() - started) / 1e6));
  });
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: { busy: { type: 'string', default: '0' }, runs: { type: 'string', default: '10' } },
  });
  const busy = Number(values.busy);
  const runs = Number(values.runs);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ds-settle-'));
  const spinners: ChildProcess[] = [];
  for (let i = 0; i < busy; i++) spinners.push(spawn(process.execPath, ['-e', 'for (;;) {}'], { stdio: 'ignore' }));
  try {
    console.log(`${os.cpus().length} cores, ${busy} busy process(es) beside, ${runs} runs each`);
    for (const [name, command] of COMMANDS) {
      const times: number[] = [];
      for (let i = 0; i < runs; i++) times.push(await exitAfter(command, dir));
      times.sort((a, b) => a - b);
      const at = (q: number) => times[Math.min(times.length - 1, Math.floor(q * times.length))]!.toFixed(0);
      console.log(`${name.padEnd(26)} exits after min ${at(0)} ms, median ${at(0.5)} ms, max ${at(1)} ms`);
    }
  } finally {
    for (const s of spinners) s.kill('SIGKILL');
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

void main();
