import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { ERROR_CODES } from '../../src/domain/error-codes';
import type { RunningGateway } from '../../src/gateway';
import { startTestGateway } from '../helpers/gateway';
import { startTestSystem, type TestSystem } from '../helpers/temporal';

/**
 * The Python client (python/, installed into .tools/venv by `npm run setup`) against the live stack: its pytest
 * suite runs as a separate process, as a Python backend would, against the real gateway, workers and dev server.
 */
const ROOT = path.join(__dirname, '..', '..');
const PYTHON = path.join(ROOT, '.tools', 'venv', 'bin', 'python');

let sys: TestSystem;
let gateway: RunningGateway;

beforeAll(async () => {
  if (!fs.existsSync(PYTHON)) throw new Error(`${PYTHON} is missing: run npm run setup`);
  sys = await startTestSystem();
}, 60_000);
afterAll(async () => {
  await gateway?.close();
  await sys?.close();
});

test('the pytest suite of the Python client passes against the real gateway', async () => {
  const started = await startTestGateway(sys, [{ id: 'py' }]);
  gateway = started.gateway;
  const { keysFile } = started;
  const key = started.keys.py!;
  // A gateway process of the suite's own, for its restart test: the same server, queue and API keys; like any
  // gateway, no master key and no store setting.
  const restartable = {
    command: JSON.stringify([process.execPath, '--import', 'tsx', 'src/gateway/main.ts']),
    cwd: ROOT,
    env: JSON.stringify({
      TEMPORAL_ADDRESS: process.env.DS_TEST_TEMPORAL_ADDRESS,
      DS_TASK_QUEUE: sys.taskQueue,
      DS_DATA_DIR: sys.dir,
      // Payloads as the suite's workers write them: without a codec.
      DS_PAYLOAD_ENCRYPTION: 'none',
      DS_API_KEYS_FILE: keysFile,
    }),
  };
  const run = await new Promise<{ code: number; output: string }>((resolve) => {
    execFile(
      PYTHON,
      [
        '-m',
        'pytest',
        'python/tests',
        '-q',
        '-rps',
        '-p',
        'no:cacheprovider',
        '-W',
        'error::pytest.PytestUnraisableExceptionWarning',
      ],
      {
        cwd: ROOT,
        env: {
          ...process.env,
          // The package under test is this checkout's, whichever checkout the tools venv installed it from.
          PYTHONPATH: path.join(ROOT, 'python'),
          SESSIONS_GATEWAY_URL: gateway.url,
          SESSIONS_GATEWAY_KEY: key,
          SESSIONS_GATEWAY_PROCESS: JSON.stringify(restartable),
          SESSIONS_ERROR_CODES: JSON.stringify(Object.values(ERROR_CODES)),
        },
        timeout: 240_000,
      },
      (error, stdout, stderr) => resolve({ code: error ? Number(error.code ?? 1) : 0, output: stdout + stderr }),
    );
  });
  if (run.code !== 0) throw new Error(`pytest failed (exit ${run.code}):\n${run.output}`);
  // The live suite's twelve passed, whatever the offline checks beside them (test_openapi_models.py) count;
  // python/README.md's flows run in test/docs.
  expect(run.output.match(/^PASSED \S*\btest_client\.py::/gm)).toHaveLength(12);
}, 300_000);
