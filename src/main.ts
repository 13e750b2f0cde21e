import fs from 'node:fs';
import path from 'node:path';
import { ConfigError, loadConfig, storeLocation } from './config';
import { isError } from './errors';
import { startDevServer, type DevServer } from './dev-server';
import { ensureDevKey } from './gateway/keys';
import { runGateway } from './gateway/run';
import { ensureDevPayloadKey } from './payloads';
import { ensureDevMasterKey } from './snapshots';
import { DEFAULT_METRICS_PORT } from './metrics';
import { runWorker } from './worker';

/**
 * `npm start`: with TEMPORAL_ADDRESS set, a worker for that server; without it, the embedded default —
 * a Temporal dev server persisting to SQLite under the data folder, its Web UI, the HTTP gateway (with a dev key made
 * under the data folder) and a worker.
 */
async function main(): Promise<void> {
  const config = loadConfig();
  let server: DevServer | undefined;
  if (!config.temporal.address) {
    fs.mkdirSync(config.dataDir, { recursive: true });
    const s = config.snapshots;
    if (s.encryption !== 'none' && !s.masterKeys && !s.masterKeyDir) {
      const dir = await ensureDevMasterKey(config.dataDir);
      console.log(`Master keys      ${dir} (made on first start; configure your own in production)`);
    }
    const p = config.payloads;
    if (p.encryption !== 'none' && !p.keys && !p.keyDir) {
      const dir = await ensureDevPayloadKey(config.dataDir);
      console.log(`Payload keys     ${dir} (made on first start; configure your own in production)`);
    }
    // The Web UI decodes payloads through the gateway's codec server (its calls carry the codec sign-in cookie).
    const { host, port, tls } = config.gateway;
    const reachable = host === '0.0.0.0' || host === '::' ? '127.0.0.1' : host.includes(':') ? `[${host}]` : host;
    const codecEndpoint = `${tls ? 'https' : 'http'}://${reachable}:${port}/v1/codec`;
    server = await startDevServer({
      temporalBin: config.devServer.temporalBin,
      ip: config.devServer.ip,
      port: config.devServer.port,
      uiPort: config.devServer.uiPort,
      namespace: config.temporal.namespace,
      dbFilename: path.join(config.dataDir, 'temporal.db'),
      logFile: path.join(config.dataDir, 'temporal.log'),
      extraArgs: ['--ui-codec-endpoint', codecEndpoint],
    });
    console.log(`Temporal server  ${server.address} (SQLite: ${path.join(config.dataDir, 'temporal.db')})`);
    console.log(`Temporal Web UI  ${server.uiUrl}`);
    console.log(`Snapshots        ${storeLocation(config.snapshotStore)}`);
  }
  const address = server?.address ?? config.temporal.address;
  let gateway: Awaited<ReturnType<typeof runGateway>> | undefined;
  if (server && address) {
    let keysFile = config.gateway.keysFile;
    if (!keysFile && config.gateway.keysJson === undefined) {
      const dev = ensureDevKey(config.dataDir);
      keysFile = dev.keysFile;
      console.log(
        `Gateway dev key  ${dev.key} (in ${dev.keyFile}, its hash in ${dev.keysFile}; configure DS_API_KEYS_FILE in production)`,
      );
    }
    gateway = await runGateway(config, address, keysFile, server.uiUrl ? [server.uiUrl] : []);
    console.log(`HTTP gateway     ${gateway.url} (OpenAPI: ${gateway.url}/v1/openapi.json)`);
    console.log(
      `Codec server     ${gateway.url}/v1/codec (sign in at ${gateway.url}/v1/codec/login with an admin key)`,
    );
  }
  try {
    // The embedded default is for trying things out: its metrics are on, at a port that may be taken.
    await runWorker(config, address, server ? { defaultMetricsPort: DEFAULT_METRICS_PORT } : {});
  } finally {
    await gateway?.close();
    await server?.stop();
  }
}

main().catch((err: unknown) => {
  console.error(err instanceof ConfigError ? err.message : isError(err) ? (err.stack ?? err.message) : err);
  process.exit(1);
});
