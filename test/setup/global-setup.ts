import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { bundleWorkflowCode } from '@temporalio/worker';
import { freePort, startDevServer, type DevServer } from '../../src/dev-server';
import { FAILURE_CONVERTER_PATH } from '../../src/payloads';
import { SESSION_WORKFLOWS } from '../../src/workflow-bundle';

declare global {
  var __DEV_SERVER__: DevServer | undefined;
  var __TEST_TMP__: string | undefined;
}

/**
 * One real Temporal dev server for the whole run (started here rather than through the testing package,
 * whose 5 s start-up wait flakes on slow machines), and one workflow bundle shared by every test file.
 */
export default async function globalSetup(): Promise<void> {
  removeAbandoned();
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), `${TMP_PREFIX}${process.pid}-`));
  const port = await freePort();
  const server = await startDevServer({ port, uiPort: null, logFile: path.join(tmp, 'temporal.log') });
  // Two bundles, as workers build them: with payload encryption on, failures' messages go through the codec.
  const logger = { trace() {}, debug() {}, info() {}, warn: console.warn, error: console.error, log() {} };
  const [plain, encrypted] = await Promise.all([
    bundleWorkflowCode({ ...SESSION_WORKFLOWS, logger }),
    bundleWorkflowCode({ ...SESSION_WORKFLOWS, failureConverterPath: FAILURE_CONVERTER_PATH, logger }),
  ]);
  const bundlePath = path.join(tmp, 'workflow-bundle.js');
  fs.writeFileSync(bundlePath, plain.code);
  const encryptedBundlePath = path.join(tmp, 'workflow-bundle-encrypted.js');
  fs.writeFileSync(encryptedBundlePath, encrypted.code);
  globalThis.__DEV_SERVER__ = server;
  globalThis.__TEST_TMP__ = tmp;
  process.env.DS_TEST_TEMPORAL_ADDRESS = server.address;
  process.env.DS_TEST_WORKFLOW_BUNDLE = bundlePath;
  process.env.DS_TEST_WORKFLOW_BUNDLE_ENCRYPTED = encryptedBundlePath;
  process.env.DS_TEST_TMP = tmp;
}

const TMP_PREFIX = 'durable-sessions-test-';

/**
 * The directories of earlier runs whose jest process is gone: a run killed before its global teardown (Ctrl-C twice,
 * kill -9, a CI timeout) leaves its directory behind, and the next run removes it. Its dev server died with it.
 */
function removeAbandoned(): void {
  const pattern = new RegExp(`^${TMP_PREFIX}(\\d+)-`);
  for (const name of fs.readdirSync(os.tmpdir())) {
    const pid = Number(pattern.exec(name)?.[1]);
    if (pid && pid !== process.pid && !running(pid)) {
      fs.rmSync(path.join(os.tmpdir(), name), { recursive: true, force: true });
    }
  }
}

function running(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    // Another user's process: running, and not ours to judge.
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}
