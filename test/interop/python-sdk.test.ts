import { execFile } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { WorkflowNotFoundError } from '@temporalio/client';
import { loadConfig } from '../../src/config';
import {
  ensureDevPayloadKey,
  historyEncryption,
  PayloadEncryptionCodec,
  payloadKeyringFromConfig,
} from '../../src/payloads';
import { startTestSystem, type TestSystem } from '../helpers/temporal';

/**
 * The Python SDK is installed next to the Temporal CLI by scripts/install-test-tools.sh (`npm run setup`, `npm test`). The workers
 * encrypt payloads as `npm start` has them do by default: a dev payload key made under the data folder, which the
 * program finds there (DS_DATA_DIR) as the workers do.
 */
const ROOT = path.join(__dirname, '..', '..');
const PYTHON = path.join(ROOT, '.tools', 'venv', 'bin', 'python');
const PROGRAM = path.join(ROOT, 'examples', 'python', 'sessions_raw.py');

interface Step {
  step: string;
  [field: string]: unknown;
}

let sys: TestSystem;
let dataDir: string;
let sessionId: string;
let run: { code: number; stdout: string; stderr: string };
let steps: Step[];

/** The environment of the test process without any payload key setting of its own. */
function environment(): NodeJS.ProcessEnv {
  return Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.startsWith('DS_PAYLOAD_')));
}

/** Runs the example as a separate process, as a Python backend would, against the run's server and worker. */
function runPython(args: string[], dataFolder = dataDir): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      PYTHON,
      [PROGRAM, ...args],
      {
        env: {
          ...environment(),
          TEMPORAL_ADDRESS: process.env.DS_TEST_TEMPORAL_ADDRESS,
          DS_TASK_QUEUE: sys.taskQueue,
          DS_DATA_DIR: dataFolder,
        },
        timeout: 100_000,
      },
      (error, stdout, stderr) => resolve({ code: error ? Number(error.code ?? 1) : 0, stdout, stderr }),
    );
  });
}

function stepNamed(step: string): Step {
  const found = steps.find((s) => s.step === step);
  if (!found) throw new Error(`the program printed no "${step}" step:\n${run.stdout}${run.stderr}`);
  return found;
}

function refusal(kase: string): Step {
  const found = steps.find((s) => s.step === 'refused' && s.case === kase);
  if (!found) throw new Error(`the program printed no refusal "${kase}":\n${run.stdout}${run.stderr}`);
  return found;
}

beforeAll(async () => {
  if (!fs.existsSync(PYTHON)) throw new Error(`${PYTHON} is missing: run npm run setup`);
  // As `npm start` configures the embedded default: encryption on, its dev key made under the data folder.
  dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'ds-py-data-'));
  await ensureDevPayloadKey(dataDir);
  const keyring = await payloadKeyringFromConfig(loadConfig({ ...environment(), DS_DATA_DIR: dataDir }));
  sys = await startTestSystem({ payloadCodec: new PayloadEncryptionCodec(keyring) });
  sessionId = `py-${crypto.randomUUID().slice(0, 8)}`;
  run = await runPython([sessionId]);
  steps = run.stdout
    .split('\n')
    .filter((line) => line.trim() !== '')
    .map((line) => JSON.parse(line) as Step);
});
afterAll(async () => {
  await sys?.close();
  if (dataDir) fs.rmSync(dataDir, { recursive: true, force: true });
});

test('the program runs to its end, exit code 0 and nothing on stderr', () => {
  expect(run).toMatchObject({ code: 0, stderr: '' });
  expect(steps.map((s) => s.step)).toEqual([
    'started',
    'checkpoint',
    'checkpoint-repeated',
    'paused',
    'resumed',
    'timeline',
    'rewound',
    'forked',
    'refused',
    'refused',
    'refused',
    'refused',
    'refused',
    'refused',
    'stopped',
    'refused',
  ]);
});

test('update-with-start answers once the memory session runs', () => {
  expect(stepNamed('started')).toEqual({ step: 'started', sessionId, phase: 'running', runtimeKind: 'memory' });
});

test('a checkpoint repeated with its idempotency key returns the same checkpoint', () => {
  const first = stepNamed('checkpoint');
  expect(first).toEqual({
    step: 'checkpoint',
    checkpointId: expect.stringMatching(/^000001-[0-9a-f]{8}$/),
    sequence: 1,
  });
  expect(stepNamed('checkpoint-repeated')).toEqual({
    step: 'checkpoint-repeated',
    checkpointId: first.checkpointId,
    sequence: 1,
  });
});

test('pause and resume: the phases and the checkpoint restored', () => {
  const paused = stepNamed('paused');
  expect(paused).toEqual({
    step: 'paused',
    checkpointId: expect.stringMatching(/^000002-[0-9a-f]{8}$/),
    phase: 'paused',
  });
  // Two checkpoints, not three: the repeated key captured nothing.
  expect(stepNamed('resumed')).toEqual({
    step: 'resumed',
    restoredFrom: paused.checkpointId,
    phase: 'running',
    checkpointCount: 2,
  });
  expect(stepNamed('timeline')).toEqual({
    step: 'timeline',
    kinds: ['checkpoint', 'checkpoint', 'restored'],
    indices: [1, 2, 3],
  });
});

test('rewind and fork by timeline index from Python, and a stale head refused', () => {
  const first = stepNamed('checkpoint');
  expect(stepNamed('rewound')).toEqual({
    step: 'rewound',
    restoredFrom: first.checkpointId,
    branch: 1,
    safetyTrigger: 'rewind-safety',
  });
  expect(stepNamed('forked')).toEqual({
    step: 'forked',
    forks: [`${sessionId}-fork`],
    fromCheckpoint: first.checkpointId,
  });
  expect(refusal('stale-head')).toMatchObject({ code: 'Conflict' });
});

test('a snake_case key is refused with InvalidInput naming the camelCase field', () => {
  expect(refusal('snake-case-key')).toMatchObject({
    code: 'InvalidInput',
    message: 'invalid input: input: unknown field "checkpoint_id" (did you mean "checkpointId"?)',
  });
  expect(refusal('bad-spec')).toMatchObject({
    code: 'InvalidInput',
    message: 'invalid input: spec.runtime: unknown field "initial_state" (did you mean "initialState"?)',
  });
});

test('each refusal carries its error code', () => {
  expect(refusal('resume-while-running')).toMatchObject({
    code: 'InvalidTransition',
    message: 'cannot resume while the session is running',
  });
  expect(refusal('id-in-use')).toMatchObject({ code: 'SessionAlreadyExists' });
  expect(refusal('unknown-session')).toMatchObject({
    code: 'SessionNotFound',
    message: expect.stringContaining(`session-${sessionId}-missing`),
  });
  expect(refusal('after-stop')).toMatchObject({
    code: 'SessionClosed',
    message: 'the session has ended: no control can change it',
  });
});

test('what Python left is what the TypeScript client sees', async () => {
  const stopped = stepNamed('stopped');
  expect(stopped).toEqual({
    step: 'stopped',
    phase: 'completed',
    finalCheckpointId: expect.stringMatching(/^000004-[0-9a-f]{8}$/),
  });
  const status = await sys.sessions.get(sessionId).status();
  // The first, the pause's, the rewind's safety checkpoint and the final one.
  expect(status).toMatchObject({ phase: 'completed', checkpointCount: 4, forkCount: 1 });
  expect(status.head?.checkpointId).toBe(stopped.finalCheckpointId);
  // The refused id reuse changed nothing, and the refused spec never ran.
  expect((await sys.sessions.get(sessionId).timeline()).map((e) => e.kind)).toEqual([
    'checkpoint',
    'checkpoint',
    'restored',
    'checkpoint',
    'restored',
    'rewound',
    'forked',
    'checkpoint',
  ]);
  await expect(sys.sessions.get(`${sessionId}-bad`).result()).rejects.toMatchObject({ code: 'InvalidInput' });
});

test('what Python sent is encrypted in history, under the dev payload key', async () => {
  for (const id of [sessionId, `${sessionId}-fork`]) {
    expect(await historyEncryption(sys.client.workflowService, 'default', { workflowId: `session-${id}` })).toEqual({
      mode: 'aes-256-gcm',
      keyId: 'dev-1',
    });
  }
});

test('without the payload keys the program stops before it sends anything', async () => {
  const empty = fs.mkdtempSync(path.join(os.tmpdir(), 'ds-py-nokeys-'));
  try {
    const id = `py-${crypto.randomUUID().slice(0, 8)}`;
    const refused = await runPython([id], empty);
    expect(refused).toMatchObject({ code: 1, stdout: '' });
    expect(refused.stderr).toContain('error: no payload key');
    await expect(sys.client.workflow.getHandle(`session-${id}`).describe()).rejects.toBeInstanceOf(
      WorkflowNotFoundError,
    );
  } finally {
    fs.rmSync(empty, { recursive: true, force: true });
  }
});
