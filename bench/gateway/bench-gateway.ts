import * as fs from 'node:fs';
import * as fsp from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import { DefaultLogger, Runtime } from '@temporalio/worker';
import { ApiKeys, generateKey, hashKey, startGateway } from '../../src/gateway';
import { startControlsSystem } from '../controls/system';
import type { Cleanup } from '../sessions/cleanup';

/**
 * The system the gateway benches run against: the controls bench's server and workers in a temporary directory (on
 * /dev/shm where there is one), and a gateway in front of them with one admin key. The gateway's rate limit is lifted:
 * what is measured is the gateway, not the limit a key gets by default.
 */
export async function startBenchGateway(cleanup: Cleanup, prefix: string) {
  Runtime.install({ logger: new DefaultLogger('WARN'), shutdownSignals: [] });
  const root = fs.mkdtempSync(path.join(fs.existsSync('/dev/shm') ? '/dev/shm' : os.tmpdir(), prefix));
  cleanup.add('temp dir', () => fsp.rm(root, { recursive: true, force: true }));
  process.once('exit', () => fs.rmSync(root, { recursive: true, force: true }));
  const sys = await startControlsSystem(root, 4096, cleanup);
  const key = generateKey();
  const keysFile = path.join(root, 'keys.json');
  const record = { id: 'bench', sha256: hashKey(key), tenant: 'default', role: 'admin' };
  fs.writeFileSync(keysFile, JSON.stringify({ keys: [record] }));
  const gateway = await startGateway({
    port: 0,
    hostname: '127.0.0.1',
    sessions: sys.sessions,
    keys: new ApiKeys(keysFile),
    ready: async () => true,
    ratePerKey: 1_000_000,
  });
  cleanup.add('gateway', () => gateway.close());
  return { sys, key, gateway };
}
