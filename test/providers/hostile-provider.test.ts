import { randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import * as fsp from 'node:fs/promises';
import * as http from 'node:http';
import type * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import { Readable } from 'node:stream';
import { pack } from 'tar-stream';
import { freePort } from '../../src/dev-server';
import { RemoteRuntime } from '../../src/providers/remote-runtime';
import { RuntimeBusyError, RuntimeFailedError } from '../../src/runtimes';
import { encodeTarHeader } from '../../src/runtimes/tar';
import { ChunkedSnapshotStore, Keyring, type NewCheckpoint } from '../../src/snapshots';
import { readAll } from '../helpers/checkpoints';
import { eventually } from '../helpers/temporal';

/*
 * Sandbox hosts that speak the provider protocol badly: real HTTP servers on loopback that answer slowly, stall or
 * drop an export, send a truncated, oversized or garbage state, or answer with pages no host of the protocol sends.
 * An export is driven as a checkpoint is taken (runtime-activities.ts: `runtime.capture` straight into
 * `store.write`), into a real encrypted store: each failure must be typed, and leave nothing in the store.
 */

let tmp: string;
let store: ChunkedSnapshotStore;
const servers: HostileHost[] = [];

beforeEach(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'hostile-provider-'));
  store = new ChunkedSnapshotStore({
    rootDir: path.join(tmp, 'store'),
    keyring: new Keyring([{ id: 'k1', key: randomBytes(32) }]),
  });
});

afterEach(async () => {
  for (const server of servers.splice(0)) await server.close();
  await fsp.rm(tmp, { recursive: true, force: true });
});

interface HostileHost {
  url: string;
  /** Bytes of export bodies the host managed to hand to its sockets. */
  sent(): number;
  /** Whether a client's connection has closed. */
  closedConnections(): number;
  close(): Promise<void>;
}

/** A real HTTP server that answers every request with `handler`: a provider that speaks the protocol badly. */
async function hostile(
  handler: (request: http.IncomingMessage, response: http.ServerResponse, host: { count(n: number): void }) => void,
): Promise<HostileHost> {
  let sent = 0;
  let closed = 0;
  const sockets = new Set<net.Socket>();
  const server = http.createServer((request, response) => handler(request, response, { count: (n) => (sent += n) }));
  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.once('close', () => {
      sockets.delete(socket);
      closed += 1;
    });
  });
  const port = await freePort();
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
  const host: HostileHost = {
    url: `http://127.0.0.1:${port}`,
    sent: () => sent,
    closedConnections: () => closed,
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
  servers.push(host);
  return host;
}

const EXPORT_HEADERS = { 'content-type': 'application/x-tar', 'DS-Export-Format': 'tar/1' };

/** A whole `tar/1` state: one file of `size` random bytes. */
async function tarOf(size: number): Promise<Buffer> {
  const archive = pack();
  archive.entry({ name: 'state.bin', mode: 0o644, mtime: new Date(0) }, randomBytes(size));
  archive.finalize();
  return readAll(archive);
}

function checkpoint(sequence: number, parentId: string | null = null): NewCheckpoint {
  return {
    checkpointId: `cp-${sequence}`,
    sessionId: 's1',
    sequence,
    parentId,
    runtime: { kind: 'remote', version: '1' },
    trigger: 'manual',
  };
}

/** What the capture activity does with a remote instance: its export streamed straight into the store. */
async function captureInto(runtime: RemoteRuntime, sequence: number, parentId: string | null = null) {
  return store.write(checkpoint(sequence, parentId), await runtime.capture('sandbox-1'));
}

/** Nothing of a failed export is visible: the store lists and verifies exactly what it held before. */
async function expectNothingNew(before: string[]): Promise<void> {
  expect((await store.list('s1')).map((m) => m.checkpointId)).toEqual(before);
  const verified = await store.verifyLineage('s1').catch(() => []);
  expect(verified.map((v) => [v.checkpointId, v.status])).toEqual(before.map((id) => [id, 'ok']));
  const pins = path.join(tmp, 'store', 's1', 'pins');
  expect(fs.existsSync(pins) ? fs.readdirSync(pins) : []).toEqual([]);
}

/** A host whose export is `good` once (the parent checkpoint), then whatever `bad` does. */
async function hostExporting(
  good: Buffer,
  bad: (response: http.ServerResponse, count: (n: number) => void) => void,
): Promise<HostileHost> {
  let exports = 0;
  return hostile((request, response, host) => {
    if (!request.url?.endsWith('/export')) {
      response.writeHead(404, { 'content-type': 'application/json' });
      response.end(JSON.stringify({ error: { code: 'SandboxNotFound', message: 'no', retryable: false } }));
      return;
    }
    if (exports++ === 0) {
      response.writeHead(200, EXPORT_HEADERS);
      response.end(good);
      return;
    }
    bad(response, (n) => host.count(n));
  });
}

/** Writes `bytes` in 64 KiB pieces, waiting for the socket to drain; resolves with whether all were written. */
async function writePaced(response: http.ServerResponse, bytes: Buffer, count: (n: number) => void): Promise<boolean> {
  for (let at = 0; at < bytes.length; at += 64 * 1024) {
    if (response.destroyed) return false;
    const piece = bytes.subarray(at, at + 64 * 1024);
    count(piece.length);
    if (!response.write(piece)) {
      const drained = await new Promise<boolean>((resolve) => {
        const settle = (value: boolean) => () => {
          response.off('drain', onDrain).off('close', onClose);
          resolve(value);
        };
        const onDrain = settle(true);
        const onClose = settle(false);
        response.on('drain', onDrain).on('close', onClose);
      });
      if (!drained) return false;
    }
  }
  return true;
}

describe('an export from a hostile host', () => {
  let good: Buffer;

  beforeAll(async () => {
    good = await tarOf(3 * 1024 * 1024 + 123);
  });

  test('a host that does not answer is busy once the timeout passes', async () => {
    const host = await hostile(() => undefined);
    const runtime = new RemoteRuntime({ url: host.url, token: 't', timeoutMs: 300 });
    await expect(runtime.capture('sandbox-1')).rejects.toThrow(RuntimeBusyError);
    await expect(runtime.describe('sandbox-1')).rejects.toThrow(RuntimeBusyError);
    await expect(runtime.stop('sandbox-1', { graceMs: 0 })).rejects.toThrow(RuntimeBusyError);
  });

  test('a stall mid-export is busy once the timeout passes; nothing is stored', async () => {
    const host = await hostExporting(good, (response) => {
      response.writeHead(200, EXPORT_HEADERS);
      response.write(good.subarray(0, 1024 * 1024));
    });
    const runtime = new RemoteRuntime({ url: host.url, token: 't', timeoutMs: 500 });
    await captureInto(runtime, 1);
    await expect(captureInto(runtime, 2, 'cp-1')).rejects.toThrow(RuntimeBusyError);
    await expectNothingNew(['cp-1']);
    // The connection is given up, not left open.
    await eventually(() => host.closedConnections() >= 1);
  });

  test('a connection dropped mid-export is busy (retryable); nothing is stored', async () => {
    const host = await hostExporting(good, (response) => {
      response.writeHead(200, EXPORT_HEADERS);
      response.write(good.subarray(0, 2 * 1024 * 1024), () => response.socket?.destroy());
    });
    const runtime = new RemoteRuntime({ url: host.url, token: 't' });
    await captureInto(runtime, 1);
    const failed = captureInto(runtime, 2, 'cp-1');
    await expect(failed).rejects.toThrow(RuntimeBusyError);
    await expect(failed).rejects.toThrow(/broke off/);
    await expectNothingNew(['cp-1']);
  });

  test('a body shorter than its Content-Length is busy (retryable); nothing is stored', async () => {
    const host = await hostExporting(good, (response) => {
      response.writeHead(200, { ...EXPORT_HEADERS, 'content-length': String(good.length) });
      response.write(good.subarray(0, good.length - 5000), () => response.socket?.destroy());
    });
    const runtime = new RemoteRuntime({ url: host.url, token: 't' });
    await captureInto(runtime, 1);
    await expect(captureInto(runtime, 2, 'cp-1')).rejects.toThrow(RuntimeBusyError);
    await expectNothingNew(['cp-1']);
  });

  test.each([
    ['mid-entry', (tar: Buffer) => tar.subarray(0, Math.floor(tar.length / 2))],
    ['between entries, without the end-of-archive marker', (tar: Buffer) => tar.subarray(0, tar.length - 1024)],
    ['not a tar at all', () => Buffer.from('<html><body>502 Bad Gateway</body></html>')],
    ['garbage that ends as a tar ends', () => Buffer.concat([randomBytes(8192), Buffer.alloc(1024)])],
    ['a whole tar with more after it', (tar: Buffer) => Buffer.concat([tar, randomBytes(512)])],
  ])('a state that ends cleanly but is no whole tar (%s): typed, nothing is stored', async (_name, cut) => {
    const host = await hostExporting(good, (response) => {
      response.writeHead(200, EXPORT_HEADERS);
      response.end(cut(good));
    });
    const runtime = new RemoteRuntime({ url: host.url, token: 't' });
    await captureInto(runtime, 1);
    const failed = captureInto(runtime, 2, 'cp-1');
    await expect(failed).rejects.toThrow(RuntimeFailedError);
    await expect(failed).rejects.toThrow(/end-of-archive|not a tar\/1 archive/);
    await expectNothingNew(['cp-1']);
  });

  test('an endless export is refused past the limit, read at the pace of the store; nothing is stored', async () => {
    const limit = 16 * 1024 * 1024;
    const piece = randomBytes(1024 * 1024);
    const host = await hostExporting(good, (response, count) => {
      response.writeHead(200, EXPORT_HEADERS);
      // A well-formed tar of one file of 1 TiB, sent for ever: no client that held what it is sent could last.
      const header = encodeTarHeader({ name: 'huge.bin', type: 'file', mode: 0o644, mtime: 0, size: 2 ** 40 });
      void (async () => {
        if (!(await writePaced(response, header, count))) return;
        while (await writePaced(response, piece, count));
      })();
    });
    const runtime = new RemoteRuntime({ url: host.url, token: 't', maxExportBytes: limit });
    await captureInto(runtime, 1);
    const failed = captureInto(runtime, 2, 'cp-1');
    await expect(failed).rejects.toThrow(RuntimeFailedError);
    await expect(failed).rejects.toThrow(/over 16777216 bytes/);
    await expectNothingNew(['cp-1']);
    // The client hung up: the host stopped, a few socket buffers past the limit at most.
    await eventually(() => host.closedConnections() >= 1);
    expect(host.sent()).toBeLessThan(limit + good.length + 16 * 1024 * 1024);
  });

  test('an export whose Content-Length is over the limit is refused before a byte is read', async () => {
    const host = await hostExporting(good, (response) => {
      response.writeHead(200, { ...EXPORT_HEADERS, 'content-length': String(64 * 1024 * 1024) });
      response.write(good);
    });
    const runtime = new RemoteRuntime({ url: host.url, token: 't', maxExportBytes: 16 * 1024 * 1024 });
    await captureInto(runtime, 1);
    await expect(runtime.capture('sandbox-1')).rejects.toThrow(/over 16777216/);
    await expectNothingNew(['cp-1']);
  });

  test.each([
    ['an HTML page with 200', 200, { 'content-type': 'text/html' }, '<html>ok</html>'],
    ['a proxy error page', 502, { 'content-type': 'text/html' }, '<html>502 Bad Gateway</html>'],
    ['garbage JSON in an error', 500, { 'content-type': 'application/json' }, '{"error": {"code": 1'],
  ])('%s is RuntimeFailedError; nothing is stored', async (_name, status, headers, body) => {
    const host = await hostExporting(good, (response) => {
      response.writeHead(status, headers);
      response.end(body);
    });
    const runtime = new RemoteRuntime({ url: host.url, token: 't' });
    await captureInto(runtime, 1);
    await expect(captureInto(runtime, 2, 'cp-1')).rejects.toThrow(RuntimeFailedError);
    await expectNothingNew(['cp-1']);
  });
});

test('an export in a format the client does not know is RuntimeFailedError; nothing is stored', async () => {
  const good = await tarOf(64 * 1024);
  const host = await hostExporting(good, (response) => {
    response.writeHead(200, { ...EXPORT_HEADERS, 'DS-Export-Format': 'tar/2' });
    response.end(good);
  });
  const runtime = new RemoteRuntime({ url: host.url, token: 't' });
  await captureInto(runtime, 1);
  await expect(captureInto(runtime, 2, 'cp-1')).rejects.toThrow(/exported tar\/2, not tar\/1/);
  await expectNothingNew(['cp-1']);
});

test('a newer host: answer fields the client does not know are ignored (fields are only ever added)', async () => {
  const host = await hostile((_request, response) => {
    response.writeHead(200, { 'content-type': 'application/json' });
    response.end(
      JSON.stringify({
        sandboxId: 'sandbox-1',
        sessionId: 's1',
        running: true,
        startedAt: '2026-12-06T12:00:00.000Z',
        gpu: { count: 1 },
      }),
    );
  });
  const runtime = new RemoteRuntime({ url: host.url, token: 't' });
  expect(await runtime.describe('sandbox-1')).toMatchObject({ instanceId: 'sandbox-1', running: true });
});

describe('an import into a hostile host', () => {
  /** The state of a stored checkpoint, opened as a restore opens it. */
  async function storedState(): Promise<Readable> {
    await store.write(checkpoint(1), Readable.from([await tarOf(2 * 1024 * 1024)]));
    return (await store.open('s1', 'cp-1')).stream;
  }

  function restoreFrom(host: HostileHost, state: Readable, timeoutMs?: number) {
    const runtime = new RemoteRuntime({ url: host.url, token: 't', ...(timeoutMs ? { timeoutMs } : {}) });
    return runtime.restore({
      sessionId: 's1',
      instanceId: 'sandbox-2',
      spec: { kind: 'remote', command: ['sleep', '30'] },
      state,
    });
  }

  test.each([
    ['garbage JSON', 200, 'application/json', '{"sandboxId": '],
    ['an answer the protocol does not name', 200, 'application/json', '{"ok": true}'],
    ['a proxy error page', 502, 'text/html', '<html>502 Bad Gateway</html>'],
  ])('a host that answers %s is RuntimeFailedError; the state is released', async (_name, status, type, body) => {
    const host = await hostile((request, response) => {
      request.resume();
      request.once('end', () => {
        response.writeHead(status, { 'content-type': type });
        response.end(body);
      });
    });
    const state = await storedState();
    await expect(restoreFrom(host, state)).rejects.toThrow(RuntimeFailedError);
    expect(state.destroyed).toBe(true);
  });

  test('a host that drops the upload is busy (retryable); the state is released', async () => {
    const host = await hostile((request) => {
      let got = 0;
      request.on('data', (chunk: Buffer) => {
        got += chunk.length;
        if (got > 512 * 1024) request.socket.destroy();
      });
    });
    const state = await storedState();
    await expect(restoreFrom(host, state)).rejects.toThrow(RuntimeBusyError);
    expect(state.destroyed).toBe(true);
  });

  test('a host that stops reading the upload is busy once the timeout passes; the state is released', async () => {
    const host = await hostile((request) => request.pause());
    const state = await storedState();
    await expect(restoreFrom(host, state, 500)).rejects.toThrow(RuntimeBusyError);
    expect(state.destroyed).toBe(true);
  });
});
