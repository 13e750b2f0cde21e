import { execFile, spawn, type ChildProcess } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { SessionClient } from '../../src/client';
import { freePort } from '../../src/dev-server';
import { generateKey, hashKey } from '../../src/gateway';
import { killChild } from '../helpers/processes';
import { eventually, runningStatus, startTestSystem, type TestSystem } from '../helpers/temporal';

/**
 * A session that has ended has no workflow to verify its checkpoints: a worker reads what it left in the store, so
 * the TypeScript client, the CLI and the gateway verify it holding no master key and no store setting. Each surface
 * is a real one (the CLI and the gateway their own processes), against a real worker and server.
 */
const ROOT = path.join(__dirname, '..', '..');
const BIN = path.join(ROOT, 'bin', 'durable-sessions.js');

/** What must not reach a reader of the store through its environment: the keys and where the store is. */
const STORE_SETTINGS = ['DS_MASTER_KEYS', 'DS_MASTER_KEY_DIR', 'DS_SNAPSHOT_DIR', 'DS_SNAPSHOT_STORE', 'DS_DATA_DIR'];

let sys: TestSystem;
let storeless: SessionClient;
let gateway: ChildProcess | undefined;
let sessionId: string;
let checkpoints: string[];

beforeAll(async () => {
  sys = await startTestSystem();
  storeless = new SessionClient({ client: sys.client, taskQueue: sys.taskQueue });
  sessionId = `ended-${crypto.randomUUID().slice(0, 8)}`;
  const session = await storeless.start({ sessionId, runtime: { kind: 'memory', initialState: 'a' } });
  await runningStatus(session);
  await session.checkpoint({ label: 'one' });
  await session.checkpoint({ label: 'two' });
  const stopped = await session.stop();
  checkpoints = (await sys.store.list(sessionId)).map((m) => m.checkpointId).sort();
  expect(checkpoints).toHaveLength(3);
  expect(checkpoints).toContain(stopped.finalCheckpoint!.checkpointId);
});
afterAll(async () => {
  await killChild(gateway);
  await sys?.close();
});

/** The environment of this test without any store setting or AWS variable: what a client machine has. */
function keyless(extra: Record<string, string>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env };
  for (const name of Object.keys(env)) if (STORE_SETTINGS.includes(name) || name.startsWith('AWS_')) delete env[name];
  return {
    ...env,
    TEMPORAL_ADDRESS: process.env.DS_TEST_TEMPORAL_ADDRESS,
    DS_TASK_QUEUE: sys.taskQueue,
    DS_PAYLOAD_ENCRYPTION: 'none',
    ...extra,
  };
}

test('the TypeScript client verifies an ended session through a worker, and refuses an unknown checkpoint alike', async () => {
  const handle = storeless.get(sessionId);
  const results = await handle.verify();
  expect(results.map((r) => [r.checkpointId, r.status])).toEqual(checkpoints.map((id) => [id, 'ok']));
  expect(await handle.verify({ checkpointId: checkpoints[0] })).toEqual([
    expect.objectContaining({ checkpointId: checkpoints[0], status: 'ok' }),
  ]);
  const workflows = await sys.client.workflow.count(
    `WorkflowType = 'checkpointVerifyWorkflow' AND TaskQueue = '${sys.taskQueue}'`,
  );
  expect(workflows.count).toBeGreaterThan(0);

  // The same refusal, type and words as a running session's.
  const running = await storeless.start({
    sessionId: `running-${crypto.randomUUID().slice(0, 8)}`,
    runtime: { kind: 'memory' },
  });
  await runningStatus(running);
  const unknown = '000099-0badc0de';
  const ofRunning: unknown = await running.verify({ checkpointId: unknown }).catch((e: unknown) => e);
  const ofEnded: unknown = await handle.verify({ checkpointId: unknown }).catch((e: unknown) => e);
  expect(ofEnded).toMatchObject({ code: 'SnapshotNotFound', sessionId, retryable: false });
  expect(ofEnded).toBeInstanceOf((ofRunning as object).constructor);
  expect((ofRunning as Error).message.replace(running.sessionId, sessionId)).toBe((ofEnded as Error).message);
  await running.stop({ checkpoint: false });
});

test('a session that failed is verified through a worker too', async () => {
  const failing = await storeless.start({
    sessionId: `failed-${crypto.randomUUID().slice(0, 8)}`,
    // Runs until told to fail: its checkpoint is taken first.
    runtime: { kind: 'workspace', command: ['sh', '-c', 'while [ ! -f fail-now ]; do sleep 0.1; done; exit 3'] },
  });
  const { runtime } = await runningStatus(failing);
  const checkpoint = await failing.checkpoint();
  fs.writeFileSync(path.join(runtime.location, 'fail-now'), '');
  await eventually(async () => (await failing.status()).phase === 'failed', 60_000);
  expect(await failing.verify()).toEqual([
    expect.objectContaining({ checkpointId: checkpoint.checkpointId, status: 'ok' }),
  ]);
});

test('the CLI verifies an ended session with --through-session and no store settings, exit 1 when one fails', async () => {
  const cli = (...args: string[]) =>
    new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
      execFile(process.execPath, [BIN, ...args], { env: keyless({}) }, (error, stdout, stderr) =>
        resolve({ code: error ? Number(error.code ?? 1) : 0, stdout, stderr }),
      );
    });
  const verified = await cli('verify', sessionId, '--through-session');
  expect(verified).toMatchObject({ code: 0, stderr: '' });
  for (const id of checkpoints) expect(verified.stdout).toMatch(new RegExp(`^\\s+\\d+  ${id}\\s+ok$`, 'm'));
  expect(verified.stdout.trim().split('\n').at(-1)).toBe('3 of 3 checkpoint(s) verify');

  const unknown = await cli('verify', sessionId, '--through-session', '--checkpoint', '000099-0badc0de');
  expect(unknown).toMatchObject({
    code: 1,
    stderr: `error: SnapshotNotFound: session ${sessionId} has no checkpoint 000099-0badc0de\n`,
  });

  // A checkpoint damaged in the store after the session ended: the worker's read finds it.
  const tamperedId = `ended-${crypto.randomUUID().slice(0, 8)}`;
  const session = await storeless.start({ sessionId: tamperedId, runtime: { kind: 'memory', initialState: 'b' } });
  await runningStatus(session);
  const first = await session.checkpoint();
  await session.stop();
  const manifest = path.join(sys.dir, 'snapshots', tamperedId, `${first.checkpointId}.manifest`);
  const bytes = fs.readFileSync(manifest);
  bytes[bytes.length - 1]! ^= 1;
  fs.writeFileSync(manifest, bytes);
  const tampered = await cli('verify', tamperedId, '--through-session', '--json');
  expect(tampered.code).toBe(1);
  expect(JSON.parse(tampered.stdout)).toEqual([
    expect.objectContaining({ checkpointId: first.checkpointId, status: 'tampered' }),
    expect.objectContaining({ status: 'tampered', detail: expect.stringContaining('its parent') }),
  ]);
});

test('a gateway process with no master key and no store setting verifies an ended session', async () => {
  const key = generateKey();
  const keysFile = path.join(fs.mkdtempSync(path.join(sys.dir, 'gateway-')), 'keys.json');
  fs.writeFileSync(
    keysFile,
    JSON.stringify({ keys: [{ id: 'v', sha256: hashKey(key), tenant: 'default', role: 'admin' }] }),
  );
  const port = await freePort();
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/gateway/main.ts'], {
    cwd: ROOT,
    env: keyless({ DS_API_KEYS_FILE: keysFile, DS_GATEWAY_PORT: String(port), LOG_LEVEL: 'WARN' }),
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  gateway = child;
  let output = '';
  child.stdout.on('data', (d: Buffer) => (output += d.toString()));
  child.stderr.on('data', (d: Buffer) => (output += d.toString()));
  await eventually(() => {
    if (child.exitCode !== null) throw new Error(`the gateway exited: ${output}`);
    return output.includes('HTTP gateway');
  }, 90_000);

  // Nothing of the store reached the gateway's process.
  const environ = fs.readFileSync(`/proc/${child.pid}/environ`, 'utf8').split('\0');
  const names = environ.map((v) => v.slice(0, v.indexOf('=')));
  expect(names.filter((n) => STORE_SETTINGS.includes(n) || n.startsWith('AWS_'))).toEqual([]);

  const post = (body: object) =>
    fetch(`http://127.0.0.1:${port}/v1/sessions/${sessionId}/verify`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
  const answer = await post({});
  expect(answer.status).toBe(200);
  const { results } = (await answer.json()) as { results: { checkpointId: string; status: string }[] };
  expect(results.map((r) => [r.checkpointId, r.status])).toEqual(checkpoints.map((id) => [id, 'ok']));

  const refused = await post({ checkpointId: '000099-0badc0de' });
  expect(refused.status).toBe(404);
  expect(await refused.json()).toMatchObject({
    code: 'SnapshotNotFound',
    sessionId,
    detail: `session ${sessionId} has no checkpoint 000099-0badc0de`,
  });
});

test('with no worker on its queue, verifying an ended session says so within a minute, and leaves nothing running', async () => {
  const taskQueue = `nobody-${crypto.randomUUID().slice(0, 8)}`;
  const unserved = new SessionClient({ client: sys.client, taskQueue });
  const err: unknown = await unserved
    .get(sessionId)
    .verify()
    .catch((e: unknown) => e);
  expect(err).toMatchObject({
    code: 'RuntimeFailed',
    sessionId,
    message: `no worker verified the checkpoints of session ${sessionId} within 60 s: is a worker polling task queue ${taskQueue}?`,
  });
  const left = await eventually(async () => {
    const runs = [];
    for await (const run of sys.client.workflow.list({
      query: `WorkflowType = 'checkpointVerifyWorkflow' AND TaskQueue = '${taskQueue}'`,
    })) {
      runs.push(run.status.name);
    }
    return runs.length > 0 && runs.every((s) => s !== 'RUNNING') && runs;
  });
  expect(left).toEqual(['TERMINATED']);
}, 180_000);
