import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { freePort } from '../../src/dev-server';

/** What the proxy does to a request it matches instead of passing it through untouched. */
export type Fault =
  /** Answers with this status and an S3 error document (503 SlowDown, 500 InternalError, …); the server never sees it. */
  | { kind: 'status'; status: number; code: string }
  /** Waits this long before passing the request on. */
  | { kind: 'delay'; ms: number }
  /** Passes on this many bytes of the request's body, then drops both connections. */
  | { kind: 'drop-request'; afterBytes: number }
  /**
   * Passes the request on whole, then drops the connection after this many bytes of the answer's body (0: none); a
   * shorter answer passes whole.
   */
  | { kind: 'drop-response'; afterBytes: number };

export interface FaultRule {
  fault: Fault;
  /** Which requests: method and URL (path and query). Default: every request. */
  match?: (method: string, url: string) => boolean;
  /** How many matching requests it hits; default: all. */
  times?: number;
}

/**
 * A loopback HTTP proxy in front of an S3 server that injects faults on demand: error answers, delays, and
 * connections dropped part-way through a request or an answer. It forwards every header as it is (SigV4 signs the
 * Host header, which stays the proxy's), so the server checks the client's signatures unchanged.
 */
export class FaultProxy {
  private rules: (FaultRule & { left: number })[] = [];
  private readonly server: http.Server;
  /** Requests seen, and how many of them a fault hit. */
  requests = 0;
  faulted = 0;
  /** Each request seen, as `METHOD url`, in order. */
  log: string[] = [];
  private severed = false;

  private constructor(
    private readonly upstreamPort: number,
    readonly port: number,
  ) {
    this.server = http.createServer((req, res) => void this.handle(req, res));
    this.server.on('connection', (socket) => this.severed && socket.destroy());
  }

  static async start(upstreamPort: number): Promise<FaultProxy> {
    const proxy = new FaultProxy(upstreamPort, await freePort());
    await new Promise<void>((resolve, reject) => {
      proxy.server.once('error', reject);
      proxy.server.listen(proxy.port, '127.0.0.1', resolve);
    });
    return proxy;
  }

  get endpoint(): string {
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  inject(rule: FaultRule): void {
    this.rules.push({ ...rule, left: rule.times ?? Infinity });
  }

  /**
   * Cuts the path to the server, as a broken network does: open connections are dropped and new ones are reset until
   * `mend`. The rules stay.
   */
  sever(): void {
    this.severed = true;
    this.server.closeAllConnections();
  }

  mend(): void {
    this.severed = false;
  }

  /** Removes every rule and zeroes the counts. */
  clear(): void {
    this.rules = [];
    this.requests = 0;
    this.faulted = 0;
    this.log = [];
  }

  async stop(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private take(method: string, url: string): Fault | undefined {
    const rule = this.rules.find((r) => r.left > 0 && (r.match?.(method, url) ?? true));
    if (!rule) return undefined;
    rule.left--;
    return rule.fault;
  }

  private async handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    this.requests++;
    this.log.push(`${req.method ?? 'GET'} ${req.url ?? '/'}`);
    if (this.severed) return void req.socket.destroy();
    const fault = this.take(req.method ?? 'GET', req.url ?? '/');
    if (fault) this.faulted++;
    if (fault?.kind === 'status') {
      req.resume();
      req.once('end', () => {
        const body = `<?xml version="1.0" encoding="UTF-8"?><Error><Code>${fault.code}</Code><Message>injected</Message></Error>`;
        res.writeHead(fault.status, { 'content-type': 'application/xml', 'content-length': Buffer.byteLength(body) });
        res.end(body);
      });
      return;
    }
    if (fault?.kind === 'delay') await new Promise((r) => setTimeout(r, fault.ms));
    if (req.destroyed) return;
    if (this.severed) return void req.socket.destroy();
    const upstream = http.request({
      host: '127.0.0.1',
      port: this.upstreamPort,
      method: req.method,
      path: req.url,
      headers: req.headers,
      agent: false,
    });
    const drop = () => {
      upstream.destroy();
      req.socket.destroy();
    };
    upstream.once('error', () => req.socket.destroy());
    req.once('error', () => upstream.destroy());
    upstream.once('response', (answer) => {
      if (fault?.kind === 'drop-response') {
        let sent = 0;
        if (fault.afterBytes === 0) return drop();
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.on('data', (chunk: Buffer) => {
          const room = fault.afterBytes - sent;
          if (room <= 0) return;
          res.write(chunk.subarray(0, room));
          sent += Math.min(room, chunk.length);
          // Flushed before the drop, so the client has the part it was given.
          if (sent >= fault.afterBytes) res.socket?.write('', () => drop());
        });
        // An answer shorter than that passes whole.
        answer.once('end', () => sent < fault.afterBytes && res.end());
        return;
      }
      res.writeHead(answer.statusCode ?? 502, answer.headers);
      answer.pipe(res);
    });
    if (fault?.kind === 'drop-request') {
      let passed = 0;
      req.on('data', (chunk: Buffer) => {
        const room = fault.afterBytes - passed;
        if (room > 0) upstream.write(chunk.subarray(0, room));
        passed += chunk.length;
        if (passed >= fault.afterBytes) drop();
      });
      req.once('end', () => (passed >= fault.afterBytes ? drop() : upstream.end()));
      return;
    }
    req.pipe(upstream);
  }
}
