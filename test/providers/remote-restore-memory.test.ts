import * as fsp from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import { Readable } from 'node:stream';
import * as v8 from 'node:v8';
import * as vm from 'node:vm';
import { pack } from 'tar-stream';
import { RemoteRuntime } from '../../src/providers/remote-runtime';
import { startSandboxHost, type SandboxHostProcess } from '../helpers/sandbox-host';

const MiB = 1024 * 1024;
const STATE_BYTES = 96 * MiB;

let tmp: string;
let host: SandboxHostProcess;

beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'remote-restore-memory-'));
  host = await startSandboxHost(path.join(tmp, 'root'));
});

afterAll(async () => {
  await host?.stop();
  await fsp.rm(tmp, { recursive: true, force: true });
});

/** A tar of one file of `size` bytes, made as it is read: nothing of it is held but what is in flight. */
function tarOf(size: number): Readable {
  const archive = pack();
  const entry = archive.entry({ name: 'big.bin', size }, (error) => {
    if (error) archive.destroy(error);
    else archive.finalize();
  });
  const piece = Buffer.alloc(MiB, 7);
  let sent = 0;
  const write = (): void => {
    while (sent < size) {
      sent += MiB;
      // A fresh buffer each time: a stream that kept what it sent would hold all of them.
      if (!entry.write(Buffer.from(piece))) return void entry.once('drain', write);
    }
    entry.end(() => undefined);
  };
  write();
  return Readable.from(archive);
}

test('a restore does not hold the state it streams to the host', async () => {
  v8.setFlagsFromString('--expose-gc');
  const gc = vm.runInNewContext('gc') as () => void;
  gc();
  const before = process.memoryUsage().arrayBuffers;
  let peak = 0;
  // Measured after a collection: what is still reachable, not what the collector has yet to free.
  const sampler = setInterval(() => {
    gc();
    peak = Math.max(peak, process.memoryUsage().arrayBuffers - before);
  }, 50);
  const runtime = new RemoteRuntime({ url: host.url, token: host.token });
  try {
    const restored = await runtime.restore({
      sessionId: 'session-1',
      instanceId: 'restored-1',
      spec: { kind: 'remote', command: ['sleep', '30'], stopGraceMs: 0 },
      state: tarOf(STATE_BYTES),
    });
    expect(restored).toMatchObject({ instanceId: 'restored-1', running: true });
    const file = path.join(host.rootDir, 'session-1', 'restored-1', 'big.bin');
    expect((await fsp.stat(file)).size).toBe(STATE_BYTES);
  } finally {
    clearInterval(sampler);
    await runtime.dispose('restored-1').catch(() => undefined);
  }
  // fetch once teed a streamed body to send it again after a redirect, and held every byte of it until the answer.
  expect(peak).toBeLessThan(STATE_BYTES / 2);
});
