import fs from 'node:fs';
import path from 'node:path';
import {
  ApiKeys,
  generateKey,
  hashKey,
  startGateway,
  type GatewayOptions,
  type RunningGateway,
} from '../../src/gateway';
import type { GatewayTimeouts } from '../../src/config';
import type { GatewayTls } from '../../src/gateway/server';
import type { TestSystem } from './temporal';

/** A key the test gateway is to know: its name, tenant (default `default`) and role (default `admin`). */
export interface TestKey {
  id: string;
  tenant?: string;
  role?: 'viewer' | 'operator' | 'admin';
}

/**
 * The real gateway on loopback in front of a test system, with a fresh key for each of `keys` (one admin key of the
 * default tenant unless told) in a keys file of its own in the system's directory, and `options` beside (the codec
 * server, TLS, a port chosen beforehand; a free one otherwise). Errors are not logged: the tests read them from the
 * answers.
 */
export async function startTestGateway(
  sys: TestSystem,
  keys: TestKey[] = [{ id: 'admin' }],
  options: Pick<
    GatewayOptions,
    'codec' | 'ratePerKey' | 'authFailuresPerSecond' | 'logError' | 'logNote' | 'spoolDir'
  > &
    Partial<Pick<GatewayOptions, 'sessions'>> & {
      tls?: GatewayTls;
      port?: number;
      timeouts?: Partial<GatewayTimeouts>;
    } = {},
): Promise<{ gateway: RunningGateway; keys: Record<string, string>; keysFile: string }> {
  const made = Object.fromEntries(keys.map((k) => [k.id, generateKey()]));
  // One file per gateway: a second gateway of the same system must not rewrite the first one's keys.
  const keysFile = path.join(fs.mkdtempSync(path.join(sys.dir, 'gateway-')), 'keys.json');
  const records = keys.map((k) => ({
    id: k.id,
    sha256: hashKey(made[k.id]!),
    tenant: k.tenant ?? 'default',
    role: k.role ?? 'admin',
  }));
  fs.writeFileSync(keysFile, JSON.stringify({ keys: records }));
  const gateway = await startGateway({
    port: 0,
    hostname: '127.0.0.1',
    sessions: sys.sessions,
    keys: new ApiKeys(keysFile),
    ready: async () => true,
    logError: () => undefined,
    logNote: () => undefined,
    ...options,
  });
  return { gateway, keys: made, keysFile };
}

/** startTestGateway with one admin key of the default tenant. */
export async function startAdminGateway(sys: TestSystem): Promise<{ gateway: RunningGateway; key: string }> {
  const { gateway, keys } = await startTestGateway(sys);
  return { gateway, key: keys.admin! };
}
