import type { AddressInfo } from 'node:net';
import { serve } from '@hono/node-server';
import { messageOf } from '../errors';
import { createSandboxHost, MAX_HEADER_BYTES } from './host-app';

/**
 * `npm run sandbox-host`: the reference sandbox host, a process of its own that serves the provider protocol
 * (docs/providers.md) and runs workspaces on its own root. It shares nothing with a worker but the protocol.
 *
 * DS_SANDBOX_HOST_TOKEN (required), DS_SANDBOX_HOST_ROOT (default ./data/sandboxes), DS_SANDBOX_HOST_PORT (default
 * 7300), DS_SANDBOX_HOST_LISTEN (default 127.0.0.1), DS_SANDBOX_HOST_MAX_SANDBOXES (default 64),
 * DS_SANDBOX_HOST_RUNS_WHILE_EXPORTING (default false: sandboxes are frozen for a whole export; true: only while
 * their files are copied aside).
 * DS_SANDBOX_HOST_EXIT_WITH_STDIN=1: exit when stdin closes, so that a parent that dies however it dies (kill -9)
 * takes the host and its sandboxes with it.
 */
async function main(): Promise<void> {
  const env = process.env;
  const token = env.DS_SANDBOX_HOST_TOKEN ?? '';
  if (token.length < 16) throw new Error('DS_SANDBOX_HOST_TOKEN must be set to a secret of at least 16 characters');
  const port = Number(env.DS_SANDBOX_HOST_PORT ?? 7300);
  if (!Number.isInteger(port) || port < 0 || port > 65_535) throw new Error('DS_SANDBOX_HOST_PORT is not a port');
  const maxSandboxes = Number(env.DS_SANDBOX_HOST_MAX_SANDBOXES ?? 64);
  if (!Number.isInteger(maxSandboxes) || maxSandboxes < 1) {
    throw new Error('DS_SANDBOX_HOST_MAX_SANDBOXES must be a positive integer');
  }
  const hostname = env.DS_SANDBOX_HOST_LISTEN ?? '127.0.0.1';
  const runsWhileExporting = env.DS_SANDBOX_HOST_RUNS_WHILE_EXPORTING ?? 'false';
  if (runsWhileExporting !== 'true' && runsWhileExporting !== 'false') {
    throw new Error('DS_SANDBOX_HOST_RUNS_WHILE_EXPORTING must be true or false');
  }
  const host = createSandboxHost({
    rootDir: env.DS_SANDBOX_HOST_ROOT ?? 'data/sandboxes',
    token,
    maxSandboxes,
    runsWhileExporting: runsWhileExporting === 'true',
  });
  // Nothing a previous host process on this root left may run beside what this one makes.
  await host.recover();
  process.on('exit', () => host.runtime.killAll());

  const server = serve({
    fetch: host.app.fetch,
    port,
    hostname,
    // An import streams for as long as its state takes; Node's default cuts a request off after 300 s.
    serverOptions: { maxHeaderSize: MAX_HEADER_BYTES, requestTimeout: 0 },
  });
  await new Promise<void>((resolve, reject) => {
    server.once('listening', resolve);
    server.once('error', reject);
  });
  const { port: bound } = server.address() as AddressInfo;
  console.log(
    `sandbox host listening on http://${hostname}:${bound} (root ${env.DS_SANDBOX_HOST_ROOT ?? 'data/sandboxes'})`,
  );

  const shutdown = (): void => {
    server.close();
    void host.runtime.stopAll().finally(() => process.exit(0));
  };
  process.once('SIGINT', shutdown);
  process.once('SIGTERM', shutdown);
  if (env.DS_SANDBOX_HOST_EXIT_WITH_STDIN === '1') {
    process.stdin.on('end', () => process.exit(0)).on('error', () => process.exit(0));
    process.stdin.resume();
  }
}

main().catch((error: unknown) => {
  console.error(`sandbox host: ${messageOf(error)}`);
  process.exit(1);
});
