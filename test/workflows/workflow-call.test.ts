import { spawn, type ChildProcess } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { bundleWorkflowCode } from '@temporalio/worker';
import { SESSION_WORKFLOWS } from '../../src/workflow-bundle';
import { killChild } from '../helpers/processes';
import { eventually, installQuietRuntime } from '../helpers/temporal';

/**
 * A host saturated by thousands of sessions makes ordinary calls into a workflow last seconds of wall time. The SDK
 * cuts a call at 5 s by default, and a cut that falls while the call's microtasks run kills the whole worker process
 * (Node: "async hook stack has become corrupted"): every session on it stops at once. The project's workers give a call
 * a minute (WORKFLOW_CALL_TIMEOUT).
 */
const root = path.resolve(__dirname, '..', '..');
const address = process.env.DS_TEST_TEMPORAL_ADDRESS!;
const taskQueue = `call-${crypto.randomUUID().slice(0, 8)}`;
/** Well over the SDK's default bound, well under the project's. */
const CALL_MS = 8_000;
let dir: string;
let connection: Connection;
let client: Client;
let worker: ChildProcess | undefined;
let output = '';

beforeAll(async () => {
  installQuietRuntime();
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ds-call-'));
  connection = await Connection.connect({ address });
  client = new Client({ connection });
}, 60_000);
afterAll(async () => {
  await killChild(worker);
  await connection?.close();
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

test('a call into a workflow that blocks its microtasks for seconds leaves the worker alive', async () => {
  const { code } = await bundleWorkflowCode({
    ...SESSION_WORKFLOWS,
    workflowsPath: path.join(__dirname, '..', 'fixtures', 'workflows', 'long-call.ts'),
    logger: { trace() {}, debug() {}, info() {}, warn() {}, error: console.error, log() {} },
  });
  const bundlePath = path.join(dir, 'bundle.js');
  fs.writeFileSync(bundlePath, code);
  worker = spawn(
    process.execPath,
    ['--import', 'tsx', 'test/helpers/workflow-call-worker.ts', address, taskQueue, bundlePath, dir],
    { cwd: root, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  worker.stdout!.on('data', (d: Buffer) => (output += d.toString()));
  worker.stderr!.on('data', (d: Buffer) => (output += d.toString()));
  await eventually(() => output.includes('polling'), 60_000);

  const started = Date.now();
  const handle = await client.workflow.start('longCall', {
    taskQueue,
    workflowId: `${taskQueue}-long`,
    args: [CALL_MS],
    // A busy machine stretches the call past the server's default 10 s for a task: its retry would run it again.
    workflowTaskTimeout: '2 minutes',
  });
  // A worker that died leaves the workflow waiting: say so, with what the worker printed.
  const died = new Promise<never>((_, reject) =>
    worker!.once('exit', (code, signal) => reject(new Error(`worker exited (${code ?? signal}):\n${output}`))),
  );
  const result = await Promise.race([handle.result(), died]);
  const took = Date.now() - started;

  expect(result).toBe('timed-out');
  // Long enough that the SDK's own bound would have cut it.
  expect(took).toBeGreaterThan(5_000);
  expect(output).not.toContain('async hook stack');
  expect(worker.exitCode).toBeNull();
  expect(worker.signalCode).toBeNull();
}, 180_000);
