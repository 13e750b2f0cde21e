import fs from 'node:fs';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import tls from 'node:tls';
import { serve } from '@hono/node-server';
import type { GatewayTimeouts } from '../config';
import { DurableSessionsError, messageOf } from '../errors';
import { createGateway, type GatewayOptions } from './app';

export interface RunningGateway {
  /** `http://host:port` or `https://host:port`, as bound. */
  url: string;
  close(): Promise<void>;
}

/** The PEM files the gateway serves HTTPS with (`DS_GATEWAY_TLS_CERT`, `DS_GATEWAY_TLS_KEY`). */
export interface GatewayTls {
  /** The certificate, followed by its intermediates. */
  certFile: string;
  keyFile: string;
  /** How often the files are checked for a change (default 1 s). */
  pollMs?: number;
}

/**
 * Thrown when the gateway's TLS certificate or key cannot be read, is not PEM, or the two do not belong together.
 * Raised when the gateway starts; names the file, never its contents.
 */
export class GatewayTlsError extends DurableSessionsError {
  readonly code = 'InvalidConfig';
  constructor(
    message: string,
    readonly file: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/** Reads both files and checks that they make a usable pair (a key that does not match its certificate fails here). */
function readTls(files: GatewayTls): { cert: Buffer; key: Buffer } {
  const read = (file: string, what: string, variable: string) => {
    try {
      return fs.readFileSync(file);
    } catch (err) {
      const message = `cannot read the gateway's TLS ${what} ${file} (${variable}): ${messageOf(err)}`;
      throw new GatewayTlsError(message, file, { cause: err });
    }
  };
  const cert = read(files.certFile, 'certificate', 'DS_GATEWAY_TLS_CERT');
  const key = read(files.keyFile, 'key', 'DS_GATEWAY_TLS_KEY');
  try {
    tls.createSecureContext({ cert, key });
  } catch (err) {
    const message = `the gateway's TLS certificate ${files.certFile} and key ${files.keyFile} are not a usable pair`;
    throw new GatewayTlsError(`${message}: ${messageOf(err)}`, files.certFile, { cause: err });
  }
  return { cert, key };
}

/** What changes when a file is replaced or rewritten: a renewal is noticed whether it renames or writes in place. */
function signature(files: GatewayTls): string {
  return [files.certFile, files.keyFile]
    .map((file) => {
      try {
        const s = fs.statSync(file);
        return `${s.ino}:${s.size}:${s.mtimeMs}`;
      } catch {
        return 'missing';
      }
    })
    .join('|');
}

/**
 * Serves the gateway on `hostname:port` (port 0: a free one): plain HTTP, or HTTPS with `tls`. A renewed certificate
 * is picked up without a restart: the files are checked every `pollMs`, and connections after a change get the new
 * pair. A change that does not make a usable pair (the key renewed, its certificate not yet) keeps the pair served
 * before, logged, until the next change.
 */
export async function startGateway(
  options: GatewayOptions & { port: number; hostname?: string; tls?: GatewayTls; timeouts?: Partial<GatewayTimeouts> },
): Promise<RunningGateway> {
  // Idle is between requests only (keep-alive): a control that takes minutes to answer is not idle.
  const { headersMs = 10_000, bodyMs = 30_000, idleMs = 60_000 } = options.timeouts ?? {};
  // Node checks the header and request deadlines only every `connectionsCheckingInterval` (30 s by default): as
  // often as the shorter deadline needs, so a slow-loris client is cut off near its deadline, not half a minute on.
  const limits = {
    headersTimeout: headersMs,
    requestTimeout: Math.max(bodyMs, headersMs),
    keepAliveTimeout: idleMs,
    connectionsCheckingInterval: Math.max(50, Math.min(1_000, Math.floor(headersMs / 4))),
  };
  const files = options.tls;
  let served = files ? signature(files) : '';
  const credentials = files ? readTls(files) : undefined;
  const app = createGateway(options);
  const hostname = options.hostname ?? '127.0.0.1';
  const server = await new Promise<ReturnType<typeof serve>>((resolve, reject) => {
    const s = serve(
      credentials
        ? {
            fetch: app.fetch,
            port: options.port,
            hostname,
            createServer: https.createServer,
            serverOptions: { ...credentials, ...limits },
          }
        : { fetch: app.fetch, port: options.port, hostname, serverOptions: limits },
      () => resolve(s),
    );
    s.once('error', reject);
  });
  const logError = options.logError ?? ((err: unknown) => console.error('gateway:', err));
  const poll =
    files &&
    setInterval(() => {
      const now = signature(files);
      if (now === served) return;
      served = now;
      try {
        (server as https.Server).setSecureContext(readTls(files));
      } catch (err) {
        logError(err);
      }
    }, files.pollMs ?? 1_000);
  poll?.unref();
  const { port } = server.address() as AddressInfo;
  return {
    url: `${credentials ? 'https' : 'http'}://${hostname.includes(':') ? `[${hostname}]` : hostname}:${port}`,
    close: () =>
      new Promise<void>((resolve, reject) => {
        clearInterval(poll);
        server.close((err) => (err ? reject(err) : resolve()));
        (server as { closeAllConnections?: () => void }).closeAllConnections?.();
      }),
  };
}
