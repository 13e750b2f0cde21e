import { ConfigError, loadConfig } from '../config';
import { isError } from '../errors';
import { runGateway } from './run';

/** `npm run gateway`: the HTTP gateway alone, for TEMPORAL_ADDRESS, with the keys of DS_API_KEYS_FILE or DS_API_KEYS. */
async function main(): Promise<void> {
  const config = loadConfig();
  if (!config.temporal.address) throw new Error('TEMPORAL_ADDRESS is not set (npm start runs the embedded default)');
  const gateway = await runGateway(config, config.temporal.address);
  console.log(`HTTP gateway     ${gateway.url} (OpenAPI: ${gateway.url}/v1/openapi.json)`);
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => void gateway.close().then(() => process.exit(0)));
  }
}

main().catch((err: unknown) => {
  console.error(err instanceof ConfigError ? err.message : isError(err) ? err.message : err);
  process.exit(1);
});
