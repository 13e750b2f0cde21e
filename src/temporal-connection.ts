import fs from 'node:fs/promises';
import type { Config } from './config';

/** What Connection (client) and NativeConnection (worker) both accept. */
export interface SharedConnectionOptions {
  address: string;
  apiKey?: string;
  tls?: {
    serverNameOverride?: string;
    serverRootCACertificate?: Buffer;
    clientCertPair?: { crt: Buffer; key: Buffer };
  };
}

/** Connection options for client and worker alike, from the resolved configuration. */
export async function connectionOptions(config: Config, address: string): Promise<SharedConnectionOptions> {
  const { tls, apiKey } = config.temporal;
  const read = (p?: string) => (p ? fs.readFile(p) : Promise.resolve(undefined));
  const [crt, key, ca] = await Promise.all([read(tls?.certPath), read(tls?.keyPath), read(tls?.caPath)]);
  return {
    address,
    apiKey,
    tls: tls
      ? {
          serverNameOverride: tls.serverName,
          serverRootCACertificate: ca,
          clientCertPair: crt && key ? { crt, key } : undefined,
        }
      : undefined,
  };
}

/** Where clients find Temporal: TEMPORAL_ADDRESS, or else the embedded server `npm start` runs. */
export function temporalAddress(config: Config): string {
  return config.temporal.address ?? `${config.devServer.ip}:${config.devServer.port}`;
}
