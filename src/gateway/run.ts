import { Client, Connection } from '@temporalio/client';
import { SessionClient } from '../client';
import type { Config } from '../config';
import { openSnapshotStore } from '../snapshots';
import { dataConverterFromConfig } from '../payloads';
import { connectionOptions } from '../temporal-connection';
import { ApiKeys } from './keys';
import { startGateway, type RunningGateway } from './server';

/**
 * The gateway of a deployment: a SessionClient on the configured Temporal server and task queue, with the keys of `keysFile` (else DS_API_KEYS_FILE, else DS_API_KEYS);
 * HTTPS when the configuration names a certificate and key. It serves the codec server to the browser origins of
 * DS_CODEC_CORS_ORIGINS and `extraCorsOrigins` (an embedded Web UI's). It opens the snapshot store only with
 * DS_GATEWAY_ARCHIVES=on, for export and import (which re-encrypt between the store's keys and an archive's):
 * otherwise old timeline pages are read by a worker, and the gateway holds no master key and no store credential.
 */
export async function runGateway(
  config: Config,
  address: string,
  keysFile?: string,
  extraCorsOrigins: string[] = [],
): Promise<RunningGateway> {
  const json = config.gateway.keysJson;
  const source =
    keysFile ?? config.gateway.keysFile ?? (json !== undefined ? { json, name: 'DS_API_KEYS' } : undefined);
  if (source === undefined) throw new Error('the gateway needs API keys: set DS_API_KEYS_FILE (or DS_API_KEYS)');
  // Read before connecting: keys that do not load stop the gateway at once, naming the file or variable.
  const keys = new ApiKeys(source);
  const dataConverter = await dataConverterFromConfig(config);
  const connection = await Connection.connect(await connectionOptions(config, address));
  const client = new Client({ connection, namespace: config.temporal.namespace, dataConverter });
  const store = config.gateway.archives ? await openSnapshotStore(config) : undefined;
  const sessions = new SessionClient({
    client,
    taskQueue: config.taskQueue,
    ...(store ? { store } : {}),
    ...(config.gateway.cursorKey ? { cursorKey: config.gateway.cursorKey } : {}),
  });
  const gateway = await startGateway({
    port: config.gateway.port,
    hostname: config.gateway.host,
    tls: config.gateway.tls,
    sessions,
    keys,
    ratePerKey: config.gateway.ratePerKey,
    authFailuresPerSecond: config.gateway.authFailuresPerSecond,
    timeouts: config.gateway.timeouts,
    codec: {
      codec: dataConverter.payloadCodecs[0],
      corsOrigins: [...new Set([...config.codecCorsOrigins, ...extraCorsOrigins])],
      namespace: config.temporal.namespace,
    },
    ready: async () => {
      await connection.workflowService.getSystemInfo({});
      return true;
    },
  }).catch(async (err: unknown) => {
    await connection.close();
    throw err;
  });
  return {
    url: gateway.url,
    async close() {
      await gateway.close();
      await connection.close();
    },
  };
}
