import { execFile } from 'node:child_process';
import crypto from 'node:crypto';
import path from 'node:path';
import { promisify } from 'node:util';
import { sessionWorkflowId } from '../../src/api';
import type { RunningGateway } from '../../src/gateway';
import { PayloadEncryptionCodec } from '../../src/payloads';
import { Keyring } from '../../src/snapshots';
import { startTestGateway } from '../helpers/gateway';
import { runningStatus, startTestSystem, type TestSystem } from '../helpers/temporal';

/**
 * The `temporal` CLI steering and reading an encrypted session, as README's "From the Temporal Web UI and CLI" shows:
 * with `--codec-endpoint` and `--codec-auth` it sends its input through the gateway's codec server and prints the
 * answer decoded.
 */
const TEMPORAL = path.join(__dirname, '..', '..', '.tools', 'venv', 'bin', 'temporal');
const codec = new PayloadEncryptionCodec(new Keyring([{ id: 'cli-1', key: crypto.randomBytes(32) }]));

let sys: TestSystem;
let gateway: RunningGateway;
let key: string;

beforeAll(async () => {
  sys = await startTestSystem({ payloadCodec: codec });
  const started = await startTestGateway(sys, [{ id: 'admin' }], {
    codec: { codec, corsOrigins: [], namespace: 'default' },
  });
  gateway = started.gateway;
  key = started.keys.admin!;
}, 60_000);
afterAll(async () => {
  await gateway?.close();
  await sys?.close();
});

/** Runs the CLI against the run's server, with the codec server unless `plain`; exit code and output. */
async function temporal(args: string[], plain = false): Promise<{ code: number; stdout: string; stderr: string }> {
  const codecArgs = plain ? [] : ['--codec-endpoint', `${gateway.url}/v1/codec`, '--codec-auth', `Bearer ${key}`];
  const all = [...args, '--address', process.env.DS_TEST_TEMPORAL_ADDRESS!, '--namespace', 'default', ...codecArgs];
  try {
    // No profile or variable of the machine running the tests may add a codec (or take one away).
    const { stdout, stderr } = await promisify(execFile)(TEMPORAL, all, {
      env: { PATH: process.env.PATH, HOME: sys.dir },
      maxBuffer: 16 * 1024 * 1024,
    });
    return { code: 0, stdout, stderr };
  } catch (err) {
    const e = err as { code?: number; stdout?: string; stderr?: string };
    return { code: e.code ?? 1, stdout: e.stdout ?? '', stderr: e.stderr ?? '' };
  }
}

test('an update through the codec server exits 0 and prints its result decoded; a query prints JSON', async () => {
  const sessionId = `cli-${crypto.randomUUID().slice(0, 8)}`;
  const session = await sys.sessions.start({ sessionId, runtime: { kind: 'memory', initialState: 'v1' } });
  await runningStatus(session);
  const workflowId = sessionWorkflowId(sessionId);

  const paused = await temporal([
    'workflow',
    'update',
    'execute',
    '--workflow-id',
    workflowId,
    '--name',
    'pause',
    '--input',
    '{"reason":"maintenance"}',
    '--output',
    'json',
  ]);
  expect(paused).toMatchObject({ code: 0 });
  // The update's result, decoded: the pause's checkpoint.
  expect(JSON.parse(paused.stdout)).toMatchObject({
    name: 'pause',
    result: { sessionId, trigger: 'pause', index: 1, checkpointId: expect.stringMatching(/^000001-/) as unknown },
  });
  expect((await session.status()).phase).toBe('paused');

  const timeline = await temporal([
    'workflow',
    'query',
    '--workflow-id',
    workflowId,
    '--name',
    'timeline',
    '--output',
    'json',
  ]);
  expect(timeline.code).toBe(0);
  const answer = JSON.parse(timeline.stdout) as { queryResult: unknown[] };
  expect(JSON.stringify(answer.queryResult)).toContain('"kind":"checkpoint"');

  // Without the codec server the same query prints ciphertext, not entries.
  const sealed = await temporal(['workflow', 'query', '--workflow-id', workflowId, '--name', 'timeline'], true);
  expect(sealed.stdout).not.toContain('"kind"');
  await session.stop({ checkpoint: false });
}, 120_000);
