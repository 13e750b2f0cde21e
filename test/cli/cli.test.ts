import { execFile } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { startTestSystem, type TestSystem } from '../helpers/temporal';

const BIN = path.join(__dirname, '..', '..', 'bin', 'durable-sessions.js');

let sys: TestSystem;
beforeAll(async () => {
  sys = await startTestSystem();
});
afterAll(async () => {
  await sys?.close();
});

/** Runs the real CLI as a separate process against the test server, as a user would from a shell. */
function cli(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
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
        },
      },
      (error, stdout, stderr) => resolve({ code: error ? Number(error.code ?? 1) : 0, stdout, stderr }),
    );
  });
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
  expect(paused.stdout).toMatch(/^paused; checkpoint 000002-[0-9a-f]{8} \(#2, 11 bytes, sha256:[0-9a-f]{64}\)\n$/);

  const again = await cli('pause', id);
  expect(again).toMatchObject({
    code: 1,
    stderr: 'error: InvalidTransition: cannot pause while the session is paused\n',
  });

  const resumed = await cli('resume', id, '--checkpoint', cp.checkpointId);
  expect(resumed.code).toBe(0);
  expect(resumed.stdout).toContain(`resumed from checkpoint ${cp.checkpointId}`);

  const human = await cli('status', id);
  expect(human.stdout).toMatch(/^session\s+cli-/m);
  expect(human.stdout).toMatch(/^phase\s+running$/m);
  expect(human.stdout).toMatch(/^checkpoints\s+2$/m);

  const timeline = await cli('timeline', id);
  const lines = timeline.stdout.trim().split('\n');
  expect(lines).toHaveLength(3);
  expect(lines[0]).toMatch(/checkpoint #1 000001-\w+ ← \(root\)\s+manual "first"\s+11 B$/);
  expect(lines[1]).toMatch(/checkpoint #2 000002-\w+ ← 000001-\w+\s+pause\s+11 B$/);
  expect(lines[2]).toContain(`restored   ${cp.checkpointId}`);

  // The same check through the session: a worker reads the checkpoints back; this process needs no keys.
  const throughSession = await cli('verify', id, '--through-session');
  expect(throughSession.code).toBe(0);
  expect(throughSession.stdout).toMatch(new RegExp(`^${cp.checkpointId}\\s+ok$`, 'm'));
  expect(throughSession.stdout.trim().split('\n').at(-1)).toBe('2 of 2 checkpoint(s) verify');
  const one = await cli('verify', id, '--through-session', '--checkpoint', cp.checkpointId, '--json');
  expect(JSON.parse(one.stdout)).toEqual([expect.objectContaining({ checkpointId: cp.checkpointId, status: 'ok' })]);

  const list = await cli('list', '--json');
  expect(JSON.parse(list.stdout)).toEqual(expect.arrayContaining([expect.objectContaining({ sessionId: id })]));

  const stopped = await cli('stop', id);
  expect(stopped.stdout).toMatch(/^stopped; final checkpoint 000003-\w+\n$/);

  const verified = await cli('verify', id);
  expect(verified.code).toBe(0);
  expect(verified.stdout).toMatch(/^\s+1  000001-\w+\s+v3  ok$/m);
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
