import fs from 'node:fs';
import path from 'node:path';
import { ApiKeys, generateKey, hashKey, startGateway, type RunningGateway } from '../../src/gateway';
import type { TestSystem } from './temporal';

/**
 * The real gateway on a free loopback port in front of a test system, with one admin key of the default tenant (in a
 * keys file in the system's directory). Errors are not logged: the tests read them from the answers.
 */
export async function startAdminGateway(sys: TestSystem): Promise<{ gateway: RunningGateway; key: string }> {
  const key = generateKey();
  const keysFile = path.join(sys.dir, 'keys.json');
  const record = { id: 'admin', sha256: hashKey(key), tenant: 'default', role: 'admin' };
  fs.writeFileSync(keysFile, JSON.stringify({ keys: [record] }));
  const gateway = await startGateway({
    port: 0,
    sessions: sys.sessions,
    keys: new ApiKeys(keysFile),
    ready: async () => true,
    logError: () => undefined,
  });
  return { gateway, key };
}
