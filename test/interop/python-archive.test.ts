import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { SessionClient } from '../../src/client';
import type { RunningGateway } from '../../src/gateway';
import { startTestGateway } from '../helpers/gateway';
import { runningStatus, startTestSystem, type TestSystem } from '../helpers/temporal';

/**
 * The Python client's export and import (python/tests/test_archive.py) between two deployments, each its own store,
 * master key, worker and gateway (opened for archives): the suite runs as a separate process, and the imported
 * session's state is compared with the exported one byte for byte here.
 */
const ROOT = path.join(__dirname, '..', '..');
const PYTHON = path.join(ROOT, '.tools', 'venv', 'bin', 'python');

let here: TestSystem;
let there: TestSystem;
const gateways: RunningGateway[] = [];

beforeAll(async () => {
  if (!fs.existsSync(PYTHON)) throw new Error(`${PYTHON} is missing: run npm run setup`);
  here = await startTestSystem();
  there = await startTestSystem();
}, 60_000);
afterAll(async () => {
  await Promise.all(gateways.map((g) => g.close()));
  await here?.close();
  await there?.close();
});

async function archiveGateway(sys: TestSystem): Promise<{ url: string; key: string }> {
  const sessions = new SessionClient({
    client: sys.client,
    taskQueue: sys.taskQueue,
    timeline: sys.store,
    store: sys.store,
  });
  const { gateway, keys } = await startTestGateway(sys, [{ id: 'py' }], { sessions });
  gateways.push(gateway);
  return { url: gateway.url, key: keys.py! };
}

test('the Python client exports from one deployment and imports into another', async () => {
  const report = path.join(there.dir, 'python-archive.json');
  const env = {
    ...process.env,
    // The package under test is this checkout's, whatever the tools venv has installed.
    PYTHONPATH: path.join(ROOT, 'python'),
    SESSIONS_ARCHIVE_FROM: JSON.stringify(await archiveGateway(here)),
    SESSIONS_ARCHIVE_TO: JSON.stringify(await archiveGateway(there)),
    SESSIONS_ARCHIVE_REPORT: report,
  };
  const run = await new Promise<{ code: number; output: string }>((resolve) => {
    execFile(
      PYTHON,
      ['-m', 'pytest', 'python/tests/test_archive.py', '-q', '-rps', '-p', 'no:cacheprovider'],
      { cwd: ROOT, env, timeout: 240_000 },
      (error, stdout, stderr) => resolve({ code: error ? Number(error.code ?? 1) : 0, output: stdout + stderr }),
    );
  });
  if (run.code !== 0) throw new Error(`pytest failed (exit ${run.code}):\n${run.output}`);
  expect(run.output.match(/^PASSED \S*\btest_archive\.py::/gm)).toHaveLength(4);

  const { exported, imported } = JSON.parse(fs.readFileSync(report, 'utf8')) as Record<string, string>;
  const moved = await runningStatus(there.sessions.get(imported!), 30_000);
  expect(there.memory.read(moved.runtime.instanceId).toString('utf8')).toBe('state made in the first deployment');
  expect(await there.store.list(exported!)).toEqual([]);
}, 300_000);
