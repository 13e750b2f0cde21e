import { execFile } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { sessionLabelsKey, sessionRuntimeKey, sessionStateKey } from '../../src/api/search-attributes';
import { COMMAND_NAMES } from '../../src/cli/commands';
import { freePort } from '../../src/dev-server';
import { PayloadEncryptionCodec } from '../../src/payloads';
import { Keyring } from '../../src/snapshots';
import { eventually, startTestSystem, type TestSystem } from '../helpers/temporal';

const BIN = path.join(__dirname, '..', '..', 'bin', 'durable-sessions.js');

// The CLI reads and steers encrypted sessions with the payload keys of the workers.
const payloadKey = crypto.randomBytes(32);
const PAYLOAD_KEYS = `cli-1:${payloadKey.toString('base64')}`;

let sys: TestSystem;
beforeAll(async () => {
  sys = await startTestSystem({
    payloadCodec: new PayloadEncryptionCodec(new Keyring([{ id: 'cli-1', key: payloadKey }])),
    // Longer than a failing command takes to exit under any load: its failure is the start's.
    firstHost: { startSettleMs: 5_000 },
  });
});
afterAll(async () => {
  await sys?.close();
});

interface CliRun {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs the real CLI as a separate process against the test server, as a user would from a shell. */
function cli(...args: string[]): Promise<CliRun> {
  return cliWith({}, ...args);
}

/** The same, with more environment (an empty value unsets a variable for the CLI). */
function cliWith(env: Record<string, string>, ...args: string[]): Promise<CliRun> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [BIN, ...args],
      {
        env: {
          ...process.env,
          TEMPORAL_ADDRESS: process.env.DS_TEST_TEMPORAL_ADDRESS,
          DS_TASK_QUEUE: sys.taskQueue,
          DS_SNAPSHOT_DIR: path.join(sys.dir, 'snapshots'),
          DS_MASTER_KEYS: sys.masterKeys,
          DS_PAYLOAD_KEYS: PAYLOAD_KEYS,
          ...env,
        },
      },
      (error, stdout, stderr) => resolve({ code: error ? Number(error.code ?? 1) : 0, stdout, stderr }),
    );
  });
}

/** A running memory session started through the CLI. */
async function runningSession(): Promise<string> {
  const id = `cli-${crypto.randomUUID().slice(0, 8)}`;
  expect((await cli('start', id, '--memory', '--', 'state')).code).toBe(0);
  await eventually(
    async () => (JSON.parse((await cli('status', id, '--json')).stdout) as { phase: string }).phase === 'running',
  );
  return id;
}

function jsonError(run: CliRun): { code: string; message: string; sessionId?: string; issues?: unknown[] } {
  expect(run.stderr).toBe('');
  return (JSON.parse(run.stdout) as { error: { code: string; message: string } }).error;
}

test('start, checkpoint, pause, resume, status, timeline, list and stop from the command line', async () => {
  const id = `cli-${crypto.randomUUID().slice(0, 8)}`;
  const started = await cli('start', id, '--memory', '--', 'hello', 'world');
  expect(started).toMatchObject({ code: 0, stdout: `started session ${id} (workflow session-${id})\n` });

  let status = await cli('status', id, '--json');
  for (let i = 0; i < 50 && (JSON.parse(status.stdout) as { phase: string }).phase !== 'running'; i++)
    status = await cli('status', id, '--json');
  expect(JSON.parse(status.stdout)).toMatchObject({ sessionId: id, phase: 'running', runtimeKind: 'memory' });

  const checkpoint = await cli('checkpoint', id, '--label', 'first', '--json');
  expect(checkpoint.code).toBe(0);
  const cp = JSON.parse(checkpoint.stdout) as { checkpointId: string };
  expect(cp).toMatchObject({ sessionId: id, sequence: 1, label: 'first', size: 11 });

  const paused = await cli('pause', id, '--reason', 'lunch');
  expect(paused.code).toBe(0);
  // The number shown is the timeline index, the one rewind and fork take back.
  expect(paused.stdout).toMatch(
    /^paused; checkpoint at index 2 \(000002-[0-9a-f]{8}\), 11 bytes, sha256:[0-9a-f]{64}\n$/,
  );

  const again = await cli('pause', id);
  expect(again).toMatchObject({
    code: 1,
    stderr: 'error: InvalidTransition: cannot pause while the session is paused\n',
  });

  const resumed = await cli('resume', id, '--checkpoint', cp.checkpointId);
  expect(resumed.code).toBe(0);
  expect(resumed.stdout).toContain(`resumed from the checkpoint at index 1 (${cp.checkpointId})`);

  const human = await cli('status', id);
  expect(human.stdout).toMatch(/^session\s+cli-/m);
  expect(human.stdout).toMatch(/^phase\s+running$/m);
  expect(human.stdout).toMatch(/^checkpoints\s+2$/m);
  // Read from the history itself: what Temporal keeps of this session is sealed under the workers' payload key.
  expect(human.stdout).toMatch(/^payloads\s+encrypted in Temporal \(AES-256-GCM, key cli-1\)$/m);

  const timeline = await cli('timeline', id);
  const lines = timeline.stdout.trim().split('\n');
  expect(lines).toHaveLength(3);
  // Every entry leads with its index; a checkpoint an entry concerns is named by its index too.
  expect(lines[0]).toMatch(/^1 {2}\S+ {2}checkpoint 000001-\w+ ← \(root\)\s+manual "first"\s+11 B$/);
  expect(lines[1]).toMatch(/^2 {2}\S+ {2}checkpoint 000002-\w+ ← 1 \(000001-\w+\)\s+pause\s+11 B$/);
  expect(lines[2]).toMatch(new RegExp(`^3 {2}\\S+ {2}restored {3}1 \\(${cp.checkpointId}\\) as `));

  // Index 3 is that restore: a rewind there says so, and where the nearest checkpoint is.
  expect(await cli('rewind', id, '--to', '3')).toMatchObject({
    code: 1,
    stderr:
      `error: InvalidInput: index 3 of session ${id} is a restore of the checkpoint at index 1, not a checkpoint; ` +
      'the nearest checkpoint is at index 2\n',
  });

  // The same check through the session: a worker reads the checkpoints back; this process needs no keys.
  const throughSession = await cli('verify', id, '--through-session');
  expect(throughSession.code).toBe(0);
  expect(throughSession.stdout).toMatch(new RegExp(`^\\s+1  ${cp.checkpointId}\\s+ok$`, 'm'));
  expect(throughSession.stdout.trim().split('\n').at(-1)).toBe('2 of 2 checkpoint(s) verify');
  const one = await cli('verify', id, '--through-session', '--checkpoint', cp.checkpointId, '--json');
  expect(JSON.parse(one.stdout)).toEqual([
    expect.objectContaining({ index: 1, checkpointId: cp.checkpointId, status: 'ok' }),
  ]);

  const list = await cli('list', '--json');
  expect(JSON.parse(list.stdout)).toEqual(expect.arrayContaining([expect.objectContaining({ sessionId: id })]));

  const stopped = await cli('stop', id);
  expect(stopped.stdout).toMatch(/^stopped; final checkpoint at index 7 \(000003-\w+\)\n$/);

  const verified = await cli('verify', id);
  expect(verified.code).toBe(0);
  // The first column is the timeline index (the third is entry 7, after a restore and three verifications).
  expect(verified.stdout).toMatch(/^\s+1  000001-\w+\s+v3  ok$/m);
  expect(verified.stdout).toMatch(/^\s+7  000003-\w+\s+v3  ok$/m);
  expect(verified.stdout.trim().split('\n').at(-1)).toBe('3 of 3 checkpoint(s) verify');

  // Tampering shows up in verify as the checkpoint it touched, with a failing exit code.
  const manifest = path.join(sys.dir, 'snapshots', id, `${cp.checkpointId}.manifest`);
  const bytes = fs.readFileSync(manifest);
  bytes[bytes.length - 1]! ^= 1;
  fs.writeFileSync(manifest, bytes);
  const tampered = await cli('verify', id, '--json');
  expect(tampered.code).toBe(1);
  // Its children no longer link to it: the hash chain reports them too.
  expect(JSON.parse(tampered.stdout)).toEqual([
    expect.objectContaining({ checkpointId: cp.checkpointId, status: 'tampered' }),
    expect.objectContaining({ sequence: 2, status: 'tampered', detail: expect.stringContaining('its parent') }),
    expect.objectContaining({ sequence: 3, status: 'tampered', detail: expect.stringContaining('its parent') }),
  ]);

  // Collection never guesses: a session with a manifest it cannot read is left whole, and it says why.
  const gc = await cli('gc', '--dry-run');
  expect(gc.code).toBe(0);
  expect(gc.stdout).toMatch(/^would remove 0 pack/);
  expect(gc.stdout).toContain(`skipped ${id}: manifest ${cp.checkpointId} is unreadable`);
  fs.rmSync(path.join(sys.dir, 'snapshots', id), { recursive: true });
  expect(await cli('gc', '--dry-run')).toMatchObject({
    code: 0,
    stdout: expect.stringMatching(/^would remove 0 pack/),
  });
  expect(await cli('rekey')).toMatchObject({
    code: 0,
    stdout: expect.stringContaining('already under the primary key'),
  });
});

test('bad input and unknown sessions are reported with their type and a non-zero exit code', async () => {
  expect(await cli('status', '../etc')).toMatchObject({
    code: 1,
    stderr: expect.stringMatching(/^error: InvalidInput: /),
  });
  expect(await cli('status', 'no-such-session')).toMatchObject({
    code: 1,
    stderr: 'error: SessionNotFound: session no-such-session does not exist\n',
  });
  expect(await cli('start', 'x')).toMatchObject({
    code: 1,
    stderr: expect.stringContaining('runtime.command: command must name a program'),
  });
  const usage = await cli('frobnicate');
  expect(usage.code).toBe(2);
  expect(usage.stderr).toContain('unknown command: frobnicate');
});

test('--tenant reaches the sessions of that tenant only', async () => {
  const id = `cli-t-${crypto.randomUUID().slice(0, 8)}`;
  expect(await cli('start', id, '--memory', '--tenant', 'acme')).toMatchObject({
    code: 0,
    stdout: `started session ${id} (workflow session-${id}@acme)\n`,
  });
  expect(await cli('status', id)).toMatchObject({
    code: 1,
    stderr: `error: SessionNotFound: session ${id} does not exist\n`,
  });
  const status = await cli('status', id, '--tenant', 'acme', '--json');
  expect(JSON.parse(status.stdout)).toMatchObject({ sessionId: id, tenant: 'acme' });
  expect(await cli('status', id, '--tenant', '../x')).toMatchObject({
    code: 2,
    stderr: expect.stringContaining('--tenant must be letters, digits'),
  });
  expect((await cli('stop', id, '--tenant', 'acme')).code).toBe(0);
});

test('--help and -h answer for the top level and every command: usage on stdout, exit 0', async () => {
  const runs = await Promise.all([
    cli('--help'),
    cli('-h'),
    ...COMMAND_NAMES.map((command, i) => cli(command, i % 2 ? '-h' : '--help')),
  ]);
  const [top, short, ...commands] = runs;
  expect(top).toMatchObject({
    code: 0,
    stderr: '',
    stdout: expect.stringMatching(/^usage: durable-sessions <command>/),
  });
  expect(short).toEqual(top);
  for (const command of COMMAND_NAMES) expect(top.stdout).toMatch(new RegExp(`^  ${command} `, 'm'));
  commands.forEach((run, i) => {
    expect(run).toMatchObject({ code: 0, stderr: '' });
    expect(run.stdout).toMatch(new RegExp(`^usage: durable-sessions ${COMMAND_NAMES[i]} `));
    expect(run.stdout).toContain('--json');
  });
});

test('a misspelled option is refused, naming the option meant, and nothing is sent', async () => {
  const id = await runningSession();
  const misspelled = await cli('checkpoint', id, '--lable', 'warm');
  expect(misspelled).toMatchObject({ code: 2, stdout: '' });
  expect(misspelled.stderr).toBe(
    'error: unknown option --lable (did you mean --label?)\n' +
      'usage: durable-sessions checkpoint <session-id> [options]\n' +
      'run "durable-sessions checkpoint --help" for its options\n',
  );
  expect(JSON.parse((await cli('status', id, '--json')).stdout)).toMatchObject({ checkpointCount: 0 });
});

test('an inline value (--label=warm) leaves the session id in its place', async () => {
  const id = await runningSession();
  const inline = await cli('checkpoint', '--label=warm', id, '--json');
  expect(inline.code).toBe(0);
  expect(JSON.parse(inline.stdout)).toMatchObject({ sessionId: id, label: 'warm', sequence: 1 });
});

test('list --phase takes only the phases there are', async () => {
  const phase = await cli('list', '--phase', 'bogus');
  expect(phase).toMatchObject({ code: 2, stdout: '' });
  expect(phase.stderr).toMatch(
    /^error: --phase must be one of starting, running, checkpointing, pausing, paused, resuming, rewinding, stopping, completed, failed; got bogus$/m,
  );
});

test('start with a command but no -- says where the command goes', async () => {
  const command = await cli('start', 's1', 'node', 'app.js');
  expect(command).toMatchObject({ code: 2, stdout: '' });
  expect(command.stderr).toContain('put the command after --, as in: durable-sessions start s1 -- node app.js');
});

test('--json errors are one JSON object on stdout with code, message, sessionId and issues', async () => {
  const [notFound, invalid, usage] = await Promise.all([
    cli('status', 'no-such-session', '--json'),
    cli('status', '../etc', '--json'),
    cli('checkpoint', 'x', '--lable', 'warm', '--json'),
  ]);
  expect(notFound.code).toBe(1);
  expect(jsonError(notFound)).toEqual({
    code: 'SessionNotFound',
    message: 'session no-such-session does not exist',
    sessionId: 'no-such-session',
  });
  expect(invalid.code).toBe(1);
  const issues = jsonError(invalid);
  expect(issues).toMatchObject({ code: 'InvalidInput', message: expect.stringMatching(/^invalid input: /) });
  expect(issues.issues).toContainEqual(
    expect.objectContaining({ path: [], message: 'session id must not contain ".."' }),
  );
  expect(usage.code).toBe(2);
  expect(jsonError(usage)).toEqual({ code: 'Usage', message: 'unknown option --lable (did you mean --label?)' });
});

test('list prints a header row above the sessions', async () => {
  const id = await runningSession();
  const list = await eventually(async () => {
    const run = await cli('list');
    return run.stdout.includes(id) ? run : undefined;
  });
  const lines = list.stdout.trimEnd().split('\n');
  expect(lines[0]).toMatch(/^SESSION\s+PHASE\s+RUNTIME\s+WORKFLOW\s+STARTED$/);
  expect(lines).toContainEqual(expect.stringMatching(new RegExp(`^${id}\\s+running\\s+memory\\s+RUNNING\\s+\\d{4}-`)));
});

test("status says where the session's output goes", async () => {
  // In memory there is no output; a workspace command's output goes to its log file.
  const id = await runningSession();
  expect((await cli('status', id)).stdout).toMatch(/^output\s+-$/m);
  const ws = `cli-${crypto.randomUUID().slice(0, 8)}`;
  const started = await cli('start', ws, '--', 'sh', '-c', 'echo hello from the session; exec sleep 600');
  expect(started.code).toBe(0);
  const output = (await cli('status', ws)).stdout.match(/^output\s+(.+)$/m)?.[1];
  expect(output).toMatch(/\.log$/);
  await eventually(() => fs.readFileSync(output!, 'utf8').includes('hello from the session\n'));
  expect((await cli('stop', ws, '--no-checkpoint')).code).toBe(0);
});

test('a start whose command fails at once exits 1 with the failure; status and controls say failed', async () => {
  const id = `cli-${crypto.randomUUID().slice(0, 8)}`;
  const started = await cli('start', id, '--', 'sh', '-c', 'echo boom >&2; exit 3');
  expect(started.code).toBe(1);
  expect(started.stdout).toBe('');
  expect(started.stderr).toMatch(/^error: RuntimeFailed: .*exited with code 3.*boom/);
  expect(started.stderr).toMatch(/^ {2}exit {8}code 3$/m);
  expect(started.stderr).toMatch(/^ {2}last output boom$/m);

  const status = await cli('status', id);
  expect(status.code).toBe(0);
  expect(status.stdout).toMatch(/^phase\s+failed$/m);
  expect(status.stdout).toMatch(/^failure\s+RuntimeFailed: .*exited with code 3/m);
  expect(status.stdout).toMatch(/^exit\s+code 3$/m);
  expect(status.stdout).toMatch(/^last output\s+boom$/m);
  // Where the command ran and its log, kept for a look.
  const location = status.stdout.match(/^location\s+(\S+) \(kept on .+ until .+\)$/m)?.[1];
  expect(fs.existsSync(location!)).toBe(true);
  const output = status.stdout.match(/^output\s+(.+)$/m)?.[1];
  expect(fs.readFileSync(output!, 'utf8')).toContain('boom');
  const json = JSON.parse((await cli('status', id, '--json')).stdout) as { phase: string; failure: unknown };
  expect(json).toMatchObject({
    phase: 'failed',
    failure: { type: 'RuntimeFailed', exitCode: 3, outputTail: ['boom'] },
  });

  const pause = await cli('pause', id, '--json');
  expect(pause.code).toBe(1);
  expect(jsonError(pause)).toMatchObject({
    code: 'SessionFailed',
    sessionId: id,
    failure: { type: 'RuntimeFailed', exitCode: 3, outputTail: ['boom'] },
  });
});

test('without TEMPORAL_ADDRESS the CLI goes where npm start runs its server (DS_DEV_SERVER_IP, _PORT)', async () => {
  const [host, port] = process.env.DS_TEST_TEMPORAL_ADDRESS!.split(':');
  const id = await runningSession();
  const found = await eventually(async () => {
    const run = await cliWith(
      { TEMPORAL_ADDRESS: '', DS_DEV_SERVER_IP: host!, DS_DEV_SERVER_PORT: port! },
      'list',
      '--json',
    );
    return run.code === 0 && run.stdout.includes(id) ? run : undefined;
  });
  expect(JSON.parse(found.stdout)).toContainEqual(expect.objectContaining({ sessionId: id }));
});

test('a server that does not answer is named, with code Unavailable in JSON', async () => {
  const nobody = String(await freePort());
  const env = { TEMPORAL_ADDRESS: '', DS_DEV_SERVER_PORT: nobody };
  const [text, json] = await Promise.all([cliWith(env, 'status', 's1'), cliWith(env, 'status', 's1', '--json')]);
  expect(text).toMatchObject({ code: 1, stdout: '' });
  expect(text.stderr).toMatch(new RegExp(`^error: cannot reach Temporal at 127\\.0\\.0\\.1:${nobody} \\(.+\\)\\n$`));
  expect(json.code).toBe(1);
  expect(jsonError(json)).toEqual({
    code: 'Unavailable',
    message: expect.stringMatching(new RegExp(`^cannot reach Temporal at 127\\.0\\.0\\.1:${nobody} \\(`)),
  });
});

test('text from the server cannot drive the terminal: controls and bidi overrides are printed escaped', async () => {
  // Visibility is written by whoever starts a workflow: a raw start can put anything in a session's id and phase.
  const tag = crypto.randomUUID().slice(0, 8);
  const hostile = await sys.client.workflow.start('sessionWorkflow', {
    workflowId: `session-evil-${tag}\u202e\x1b[2J`,
    taskQueue: sys.taskQueue,
    args: [{ spec: { sessionId: `evil-${tag}`, runtime: { kind: 'memory' } } }],
    typedSearchAttributes: [
      { key: sessionStateKey, value: '\x1b]0;owned\x07running' },
      { key: sessionRuntimeKey, value: 'mem\u2066ory' },
    ],
  });
  await hostile.terminate('test');
  const list = await eventually(async () => {
    const run = await cli('list');
    return run.stdout.includes(`evil-${tag}`) ? run : undefined;
  });
  expect(list.stdout).not.toMatch(/[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]/);
  const row = list.stdout.split('\n').find((line) => line.includes(`evil-${tag}`));
  expect(row).toMatch(
    new RegExp(
      `^evil-${tag}\\\\u202e\\\\x1b\\[2J\\s+\\\\x1b\\]0;owned\\\\x07running\\s+mem\\\\u2066ory\\s+TERMINATED\\s`,
    ),
  );
});

test('rewind, fork, branch, configure, touch and a paged timeline from the command line', async () => {
  const id = await runningSession();
  const first = JSON.parse((await cli('checkpoint', id, '--label', 'one', '--json')).stdout) as { index: number };
  await cli('checkpoint', id);
  const rewound = await cli('rewind', id, '--to', String(first.index), '--json');
  expect(rewound.code).toBe(0);
  expect(JSON.parse(rewound.stdout)).toMatchObject({ branch: 1, safetyCheckpoint: { trigger: 'rewind-safety' } });

  const forkId = `${id}-try`;
  const forked = await cli('fork', id, '--from', String(first.index), '--as', forkId, '--paused');
  expect(forked).toMatchObject({ code: 0, stderr: '' });
  expect(forked.stdout).toContain(`forked ${forkId} from`);
  const branched = JSON.parse((await cli('branch', id, '--count', '2', '--paused', '--json')).stdout) as {
    forks: { sessionId: string }[];
  };
  expect(branched.forks).toHaveLength(2);

  const configured = await cli('configure', id, '--idle-pause-after', '3600000', '--json');
  expect(JSON.parse(configured.stdout)).toMatchObject({ policies: { idlePauseAfterMs: 3_600_000 } });
  expect((await cli('touch', id)).stdout.trim()).toBe('touched');

  // The timeline pages with stable indices; the CLI reads the store where it can.
  const page = JSON.parse((await cli('timeline', id, '--from', '2', '--limit', '3', '--json')).stdout) as {
    entries: { index: number }[];
    next: number | null;
  };
  expect(page.entries.map((e) => e.index)).toEqual([2, 3, 4]);
  expect(page.next).toBe(5);
  expect((await cli('timeline', id, '--branch', '1')).stdout).toContain('rewound');

  // Usage errors say what is missing, and nothing is sent.
  const noTarget = await cli('rewind', id);
  expect(noTarget.code).toBe(2);
  expect(noTarget.stderr).toContain('rewind needs --to');
  expect((await cli('fork', id, '--count', 'three')).code).toBe(2);
  for (const s of [id, forkId, ...branched.forks.map((f) => f.sessionId)]) await cli('stop', s, '--no-checkpoint');
}, 120_000);

test('a conversation from the command line: start with labels and policies, append, regenerate', async () => {
  const id = `cli-chat-${crypto.randomUUID().slice(0, 8)}`;
  const started = await cli(
    'start',
    id,
    '--conversation',
    '--label',
    'team=a',
    '--label',
    'nightly',
    '--idle-pause-after',
    '3600000',
    '--no-checkpoint-before-stop',
    '--',
    'be',
    'brief',
  );
  expect(started).toMatchObject({ code: 0, stderr: '' });
  const status = await eventually(async () => {
    const s = JSON.parse((await cli('status', id, '--json')).stdout) as { phase: string };
    return s.phase === 'running' ? s : undefined;
  });
  expect(status).toMatchObject({
    runtimeKind: 'conversation',
    messageCount: 1,
    policies: { idlePauseAfterMs: 3_600_000, checkpointBeforeStop: false },
  });
  const described = await sys.client.workflow.getHandle(`session-${id}`).describe();
  expect(described.typedSearchAttributes.get(sessionLabelsKey)).toEqual(['team=a', 'nightly']);

  const asked = await cli('append', id, '--message', 'user=What is 2+2?', '--checkpoint', '--label', 'asked');
  expect(asked).toMatchObject({ code: 0, stderr: '' });
  expect(asked.stdout).toMatch(
    /^appended; 2 message\(s\), the first new one at message index 1\ncheckpoint at index \d+ \(\S+\), \d+ bytes\n$/,
  );
  const answered = JSON.parse((await cli('append', id, '--message', 'assistant=4', '--checkpoint', '--json')).stdout);
  expect(answered).toMatchObject({ messageCount: 3, firstIndex: 2, checkpoint: { trigger: 'turn' } });

  const again = await cli('regenerate', id, '--as', `${id}-again`, '--json');
  expect(again.code).toBe(0);
  expect(JSON.parse(again.stdout)).toMatchObject({ forks: [{ sessionId: `${id}-again` }] });
  expect(await sys.sessions.get(`${id}-again`).status()).toMatchObject({ messageCount: 2 });

  expect((await cli('append', id, '--message', 'hello')).stderr).toContain('--message expects ROLE=TEXT');

  // A memory session cannot take messages: refused before anything runs, nothing in its timeline.
  const memory = await runningSession();
  const before = (await cli('timeline', memory)).stdout;
  expect(jsonError(await cli('append', memory, '--message', 'user=hi', '--json'))).toMatchObject({
    code: 'InvalidInput',
    message: `append applies to conversation sessions; session ${memory} is a memory session`,
  });
  expect((await cli('timeline', memory)).stdout).toBe(before);
  for (const s of [id, `${id}-again`, memory]) await cli('stop', s, '--no-checkpoint');
}, 120_000);
