import type { AddressInfo } from 'node:net';
import { serve } from '@hono/node-server';
import { createGateway, type GatewayOptions } from './app';

export interface RunningGateway {
  /** `http://host:port`, as bound. */
  url: string;
  close(): Promise<void>;
}

/** Serves the gateway on `hostname:port` (port 0: a free one); TLS is terminated in front of it. */
export async function startGateway(
  options: GatewayOptions & { port: number; hostname?: string },
): Promise<RunningGateway> {
  const app = createGateway(options);
  const hostname = options.hostname ?? '127.0.0.1';
  const server = await new Promise<ReturnType<typeof serve>>((resolve, reject) => {
    const s = serve({ fetch: app.fetch, port: options.port, hostname }, () => resolve(s));
    s.once('error', reject);
  });
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://${hostname.includes(':') ? `[${hostname}]` : hostname}:${port}`,
    close: () =>
      new Promise<void>((resolve, reject) => {
        server.close((err) => (err ? reject(err) : resolve()));
        (server as { closeAllConnections?: () => void }).closeAllConnections?.();
      }),
  };
}
