/**
 * The package's front door (`durable-sessions`): the client, its typed errors and the configuration it connects with.
 * Subpaths hold one part each: `durable-sessions/client`, `/errors`, `/config` and `/codec` (the payload codec).
 */
export * from './client';
export { ConfigError, EnvConfig, loadConfig, type Config } from './config';
