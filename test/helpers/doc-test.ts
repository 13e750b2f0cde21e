import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { devStackEnv } from '../../src/dev-server';
import { eventually } from './temporal';

/**
 * Runs the fenced blocks of a Markdown file as a reader would, in order, against a fresh `npm start`.
 *
 * What a block is decided by its fence and by an HTML comment right before it (invisible on GitHub):
 * - `sh` and `python` blocks run as written and must succeed; `ts` blocks run through tsx; `yaml` and `json` must
 *   parse; `console` blocks run each `$ command` and compare what it prints with the lines shown under it (see
 *   {@link normaliseOutput}); `text` blocks are diagrams, not code.
 * - `<!-- doc-test: skip (why) -->` skips the block and `<!-- doc-test: covered (by what) -->` names the test that
 *   runs it instead; both are counted and reported, never silent.
 * - `<!-- doc-test: prelude … -->` holds code run before the block, for names the reader supplies (a model call).
 *
 * The ports of the README (gateway 7280, server 7233, Web UI 8233) are replaced by the free ports this run uses.
 * Commands run in a directory whose `data` is the data directory of the `npm start` and whose `.tools`, `bin` and
 * `examples` are the project's, so relative paths mean what they mean in a checkout; `npx durable-sessions` runs
 * `bin/durable-sessions.js`.
 */

export const repoRoot = path.resolve(__dirname, '..', '..');

export type BlockMarker =
  { kind: 'skip'; reason: string } | { kind: 'covered'; reason: string } | { kind: 'prelude'; code: string };

export interface DocBlock {
  lang: string;
  code: string;
  /** 1-based line of the opening fence. */
  line: number;
  marker?: BlockMarker;
}

const MARKER = /^<!--\s*doc-test:\s*(skip|covered|prelude)\b([\s\S]*?)-->$/;

/** The fenced blocks of a Markdown text, each with the doc-test marker on the line before its fence. */
export function markdownBlocks(markdown: string): DocBlock[] {
  const lines = markdown.split('\n');
  const blocks: DocBlock[] = [];
  for (let i = 0; i < lines.length; i++) {
    const open = /^```(\S*)\s*$/.exec(lines[i]!);
    if (!open) continue;
    const start = i;
    const body: string[] = [];
    for (i++; i < lines.length && !/^```\s*$/.test(lines[i]!); i++) body.push(lines[i]!);
    if (i >= lines.length) throw new Error(`unclosed fence at line ${start + 1}`);
    blocks.push({ lang: open[1]!, code: body.join('\n'), line: start + 1, marker: markerBefore(lines, start) });
  }
  return blocks;
}

function markerBefore(lines: string[], fence: number): BlockMarker | undefined {
  // The comment may span lines; only blank lines may stand between it and the fence (Prettier puts one there).
  let last = fence - 1;
  while (last > 0 && lines[last]!.trim() === '') last--;
  if (!lines[last]?.trimEnd().endsWith('-->')) return undefined;
  let first = last;
  while (first > 0 && !lines[first]!.includes('<!--')) first--;
  const m = MARKER.exec(
    lines
      .slice(first, last + 1)
      .join('\n')
      .trim(),
  );
  if (!m) return undefined;
  const text = m[2]!.trim();
  if (m[1] === 'prelude') return { kind: 'prelude', code: text };
  return { kind: m[1] as 'skip' | 'covered', reason: text.replace(/^\((.*)\)$/s, '$1') };
}

export interface ConsoleStep {
  command: string;
  expected: string[];
}

/** `$ command` lines of a console block, each with the output lines shown under it. */
export function consoleSteps(code: string): ConsoleStep[] {
  const steps: ConsoleStep[] = [];
  for (const line of code.split('\n')) {
    if (line.startsWith('$ ')) steps.push({ command: line.slice(2), expected: [] });
    else if (steps.length) steps[steps.length - 1]!.expected.push(line);
    else throw new Error(`console block output before any command: ${line}`);
  }
  return steps;
}

/**
 * What may differ between two runs of the same command, replaced by a placeholder so the rest can be compared:
 * the run's directory, timestamps, SHA-256 digests, checkpoint ids, instance and host suffixes, and then every
 * number (sizes, counts, indices: their exact values follow from the run, the words around them do not). Runs of
 * spaces become one, since column widths follow the ids.
 */
export function normaliseOutput(text: string, runDir?: string): string {
  let out = text;
  if (runDir) out = out.split(runDir).join('/…');
  return out
    .replace(/\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z/g, '<time>')
    .replace(/sha256:[0-9a-f]{64}/g, '<digest>')
    .replace(/\b\d{6}-[0-9a-f]{8}\b/g, '<checkpoint>')
    .replace(/@[A-Za-z0-9._-]+/g, '@<host>')
    .replace(/-[0-9a-f]{8}\b/g, '-<hex>')
    .replace(/\d+/g, 'N')
    .split('\n')
    .map((line) => line.replace(/[ \t]+/g, ' ').trimEnd())
    .join('\n')
    .trim();
}

export interface DocStack {
  /** The directory commands run in: `data` is the data directory; `.tools`, `bin` and `examples` the project's. */
  dir: string;
  dataDir: string;
  ports: { server: number; ui: number; gateway: number };
  /** The gateway's dev key (an admin key of the default tenant). */
  devKey: string;
  /** Everything `npm start` printed so far. */
  output(): string;
  stop(): Promise<void>;
}

/** A fresh `npm start` on free ports and a data directory of its own, as test/deploy/npm-start.test.ts runs it. */
export async function startDocStack(): Promise<DocStack> {
  const dir = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'ds-doc-')));
  const dataDir = path.join(dir, 'data');
  // What a checkout has beside `data`, so that a command written for the checkout's top runs as written.
  for (const name of ['.tools', 'bin', 'examples']) fs.symlinkSync(path.join(repoRoot, name), path.join(dir, name));
  const { env, ports } = await devStackEnv(dataDir);
  let output = '';
  // Its own process group, as a terminal gives it, so one signal reaches the server and the worker.
  const child: ChildProcess = spawn('npm', ['start'], {
    cwd: repoRoot,
    env,
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.stdout!.on('data', (d: Buffer) => (output += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (output += d.toString()));
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      const exited = new Promise((resolve) => child.once('exit', resolve));
      process.kill(-child.pid!, 'SIGTERM'); // a drain: the sessions' processes are stopped too
      const timer = setTimeout(() => process.kill(-child.pid!, 'SIGKILL'), 60_000);
      await exited;
      clearTimeout(timer);
    }
    fs.rmSync(dir, { recursive: true, force: true });
  };
  try {
    const up = await eventually(
      () => (child.exitCode !== null ? 'exited' : output.includes(' polling ') && 'up'),
      120_000,
    );
    if (up === 'exited') throw new Error(`exit ${child.exitCode}`);
    const keyFile = path.join(dataDir, 'gateway-dev-key');
    await eventually(() => fs.existsSync(keyFile));
    const devKey = fs.readFileSync(keyFile, 'utf8').trim();
    await eventually(async () => (await fetch(`http://127.0.0.1:${ports.gateway}/readyz`)).ok, 60_000);
    return { dir, dataDir, ports, devKey, output: () => output, stop };
  } catch (err) {
    await stop();
    throw new Error(`npm start did not come up: ${String(err)}\n${output}`);
  }
}

/** The README's ports replaced by the stack's. */
export function withPorts(code: string, stack: DocStack): string {
  return code
    .replace(/:7280\b/g, `:${stack.ports.gateway}`)
    .replace(/:7233\b/g, `:${stack.ports.server}`)
    .replace(/:8233\b/g, `:${stack.ports.ui}`);
}

export interface RunResult {
  code: number | null;
  /** stdout and stderr, interleaved as they came. */
  output: string;
}

const SHELL_PRELUDE = `npx() { if [ "$1" = durable-sessions ]; then shift; node ${JSON.stringify(
  path.join(repoRoot, 'bin', 'durable-sessions.js'),
)} "$@"; else command npx "$@"; fi; }`;

/** Where the README's shell commands run: the stack's directory, with the server's address for `temporal`. */
function shellEnv(stack: DocStack): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    DS_DEV_SERVER_PORT: String(stack.ports.server),
    // The `temporal` CLI's default is the dev server's default address; here the server runs on a free port.
    TEMPORAL_ADDRESS: `127.0.0.1:${stack.ports.server}`,
  };
  delete env.DS_DATA_DIR; // `data` in the working directory, as in a checkout
  return env;
}

export function run(
  command: string,
  args: string[],
  options: { cwd: string; env: NodeJS.ProcessEnv; timeoutMs?: number; input?: string },
): Promise<RunResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { cwd: options.cwd, env: options.env, stdio: ['pipe', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (d: Buffer) => (output += d.toString()));
    child.stderr.on('data', (d: Buffer) => (output += d.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), options.timeoutMs ?? 120_000);
    child.once('error', reject);
    child.once('close', (code) => {
      clearTimeout(timer);
      resolve({ code, output });
    });
    child.stdin.end(options.input ?? '');
  });
}

/**
 * A shell block, line after line in one bash (`set -e`: the first failing command fails the block). A streaming
 * `curl -N` never ends by itself: it runs a few seconds, and must have printed an event by then.
 */
export async function runShellBlock(block: DocBlock, stack: DocStack): Promise<RunResult> {
  const prelude = block.marker?.kind === 'prelude' ? block.marker.code : '';
  const code = withPorts(block.code, stack)
    .split('\n')
    .map((line) =>
      /^\s*curl -N/.test(line)
        ? `{ out=$(${line.replace(/\s+#.*$/, '')} --max-time 5) || [ $? = 28 ]; echo "$out"; echo "$out" | grep -q '^event:'; }`
        : line,
    )
    .join('\n');
  return run('bash', ['-c', `set -eo pipefail\n${SHELL_PRELUDE}\n${prelude}\n${code}`], {
    cwd: stack.dir,
    env: shellEnv(stack),
  });
}

/** One `$ command` of a console block, as a reader types it; its output with stderr interleaved. */
export function runConsoleCommand(command: string, stack: DocStack): Promise<RunResult> {
  return run('bash', ['-c', `${SHELL_PRELUDE}\n${withPorts(command, stack)}`], {
    cwd: stack.dir,
    env: shellEnv(stack),
  });
}

/**
 * A TypeScript block through tsx, its imports first and the rest in an async function (top-level `await`, as the
 * README writes it). `./src/…` is the project's source; packages resolve from its node_modules.
 */
export async function runTypeScriptBlock(block: DocBlock, stack: DocStack): Promise<RunResult> {
  const prelude = block.marker?.kind === 'prelude' ? block.marker.code : '';
  const lines = withPorts(`${prelude}\n${block.code}`, stack).split('\n');
  const imports = lines.filter((l) => /^import\s/.test(l)).map((l) => l.replace(/from '\.\//, `from '${repoRoot}/`));
  const body = lines.filter((l) => !/^import\s/.test(l));
  const file = path.join(stack.dir, `block-${block.line}.ts`);
  fs.writeFileSync(
    file,
    `${imports.join('\n')}\n(async () => {\n${body.join('\n')}\n})().then(() => process.exit(0), (err) => {\n` +
      `  console.error(err);\n  process.exit(1);\n});\n`,
  );
  return run(process.execPath, ['--require', require.resolve('tsx/cjs'), file], {
    cwd: stack.dir,
    env: {
      ...process.env,
      NODE_PATH: path.join(repoRoot, 'node_modules'),
      DS_DATA_DIR: stack.dataDir,
      TEMPORAL_ADDRESS: `127.0.0.1:${stack.ports.server}`,
    },
  });
}

/**
 * A Python block with the project's venv and its client from this checkout. `api_key` is the dev key `npm start`
 * printed, as the blocks' comments tell the reader to use.
 */
export function runPythonBlock(block: DocBlock, stack: DocStack): Promise<RunResult> {
  const prelude = block.marker?.kind === 'prelude' ? block.marker.code : '';
  const code = `import os\napi_key = os.environ["DOC_TEST_API_KEY"]\n${prelude}\n${withPorts(block.code, stack)}\n`;
  return run(path.join(repoRoot, '.tools', 'venv', 'bin', 'python'), ['-'], {
    cwd: stack.dir,
    env: {
      ...process.env,
      DOC_TEST_API_KEY: stack.devKey,
      PYTHONPATH: path.join(repoRoot, 'python'),
    },
    input: code,
  });
}

/** A block's outcome as the report lists it. */
export interface BlockReport {
  line: number;
  lang: string;
  outcome: 'ran' | 'skip' | 'covered';
  reason?: string;
}

const LANGUAGES = ['sh', 'console', 'ts', 'python', 'yaml', 'json', 'text'];

/**
 * Jest tests for every block of `file`, in order, against one fresh `npm start`: one test per block, named by its
 * line. Skipped and covered blocks are `test.skip`s named with their reason, and a summary is printed at the end.
 * `skip` skips the whole document, saying why (a flow known to fail, until it is fixed).
 */
export function testDocument(file: string, options: { skip?: string } = {}): void {
  if (options.skip) {
    describe.skip(`${file}: ${options.skip}`, () => defineDocumentTests(file));
    return;
  }
  defineDocumentTests(file);
}

function defineDocumentTests(file: string): void {
  const markdown = fs.readFileSync(path.join(repoRoot, file), 'utf8');
  const blocks = markdownBlocks(markdown);
  const reports: BlockReport[] = [];
  let stack: DocStack;

  beforeAll(async () => {
    stack = await startDocStack();
  }, 180_000);
  afterAll(async () => {
    await stack?.stop();
    const count = (o: BlockReport['outcome']) => reports.filter((r) => r.outcome === o).length;
    const notRun = reports
      .filter((r) => r.outcome !== 'ran')
      .map((r) => `  ${file}:${r.line} ${r.outcome}: ${r.reason}`);
    console.log(
      `${file}: ${count('ran')} block(s) ran, ${count('skip')} skipped, ${count('covered')} covered elsewhere\n` +
        notRun.join('\n'),
    );
  }, 120_000);

  test('every block has a language the harness knows', () => {
    expect(blocks.filter((b) => !LANGUAGES.includes(b.lang)).map((b) => `${file}:${b.line} \`\`\`${b.lang}`)).toEqual(
      [],
    );
  });

  for (const block of blocks) {
    const name = `${file}:${block.line} (${block.lang})`;
    const { marker } = block;
    if (marker?.kind === 'skip' || marker?.kind === 'covered') {
      reports.push({ line: block.line, lang: block.lang, outcome: marker.kind, reason: marker.reason });
      test.skip(`${name} ${marker.kind}: ${marker.reason}`, () => undefined);
      continue;
    }
    if (block.lang === 'text') continue; // a diagram
    reports.push({ line: block.line, lang: block.lang, outcome: 'ran' });
    test(name, async () => runBlock(block, stack), 300_000);
  }
}

async function runBlock(block: DocBlock, stack: DocStack): Promise<void> {
  const failed = (result: RunResult) => `exit ${result.code}:\n${result.output}`;
  switch (block.lang) {
    case 'sh': {
      const result = await runShellBlock(block, stack);
      if (result.code !== 0) throw new Error(failed(result));
      return;
    }
    case 'console':
      for (const step of consoleSteps(block.code)) {
        const result = await runConsoleCommand(step.command, stack);
        // To refresh a sample: DOC_TEST_SHOW=1 prints what each command printed, as it printed it.
        if (process.env.DOC_TEST_SHOW) console.log(`$ ${step.command}\n${result.output}`);
        // The command, then what it printed, so a mismatch shows which one drifted.
        const seen = `$ ${step.command}\n${normaliseOutput(result.output, stack.dir)}`;
        expect(seen).toBe(`$ ${step.command}\n${normaliseOutput(step.expected.join('\n'), stack.dir)}`);
      }
      return;
    case 'ts': {
      const result = await runTypeScriptBlock(block, stack);
      if (result.code !== 0) throw new Error(failed(result));
      return;
    }
    case 'python': {
      const result = await runPythonBlock(block, stack);
      if (result.code !== 0) throw new Error(failed(result));
      return;
    }
    case 'yaml':
      (await import('yaml')).parse(block.code);
      return;
    case 'json':
      JSON.parse(block.code);
      return;
    default:
      throw new Error(`no runner for \`\`\`${block.lang}`);
  }
}
