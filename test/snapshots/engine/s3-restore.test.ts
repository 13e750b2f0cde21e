import { createHash, randomBytes } from 'node:crypto';
import { Readable } from 'node:stream';
import { ChunkedSnapshotStore } from '../../../src/snapshots/engine/chunked-store';
import { Keyring } from '../../../src/snapshots/engine/keyring';
import { WINDOW_BYTES } from '../../../src/snapshots/engine/pack-windows';
import { S3BlobBackend } from '../../../src/snapshots/blob/s3-backend';
import { SnapshotNotFoundError } from '../../../src/snapshots/errors';
import { cp, readAll } from '../../helpers/checkpoints';
import { FaultProxy } from '../../helpers/fault-proxy';
import { startS3Server, type S3TestServer } from '../../helpers/s3-server';

/**
 * A restore from S3 reads its packs as a few long ranged GETs streamed in order (PackWindows), through a proxy that
 * counts the requests and breaks connections on demand.
 */

const MiB = 1024 * 1024;
const keyring = new Keyring([{ id: 'k1', key: randomBytes(32) }]);
const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');

let server: S3TestServer;
let proxy: FaultProxy;
let backend: S3BlobBackend;
let store: ChunkedSnapshotStore;
let made = 0;

beforeAll(async () => {
  server = await startS3Server();
  proxy = await FaultProxy.start(server.port);
});
afterAll(async () => {
  await proxy?.stop();
  await server?.stop();
});
beforeEach(() => {
  backend = new S3BlobBackend({
    bucket: server.bucket,
    prefix: `restore-${++made}`,
    endpoint: proxy.endpoint,
    region: server.region,
    forcePathStyle: true,
    credentials: server.credentials,
    partBytes: 5 * MiB,
    retry: { attempts: 4, baseDelayMs: 20, maxDelayMs: 100 },
  });
  store = new ChunkedSnapshotStore({ backend, keyring });
  proxy.clear();
});
afterEach(async () => {
  await backend.close();
});

const packReads = () => proxy.log.filter((r) => r.startsWith('GET ') && r.includes('/packs/'));

test('a restore of 40 MiB reads its pack in a few long GETs, not one per MiB', async () => {
  const state = randomBytes(40 * MiB);
  await store.write(cp(1), Readable.from([state]));
  proxy.clear();
  const restored = await readAll((await store.open('s1', 'cp-1')).stream);
  expect(sha(restored)).toBe(sha(state));
  // One pack: its header, then 40 MiB in windows of WINDOW_BYTES (cut at chunk boundaries, so one more at most).
  const windows = Math.ceil((40 * MiB) / WINDOW_BYTES) + 1;
  expect(packReads().length).toBeGreaterThanOrEqual(2);
  expect(packReads().length).toBeLessThanOrEqual(1 + windows);
});

test('a connection dropped in the middle of a window is picked up where it broke: the same bytes', async () => {
  const state = randomBytes(24 * MiB);
  await store.write(cp(1), Readable.from([state]));
  proxy.clear();
  proxy.inject({
    fault: { kind: 'drop-response', afterBytes: 3 * MiB },
    match: (method, url) => method === 'GET' && url.includes('/packs/'),
    times: 3, // the header's read (shorter: passes whole) and both windows
  });
  const restored = await readAll((await store.open('s1', 'cp-1')).stream);
  expect(proxy.faulted).toBe(3);
  expect(sha(restored)).toBe(sha(state));
});

test('an incremental checkpoint restores from the chunks of two checkpoints, scattered over their packs', async () => {
  const base = randomBytes(20 * MiB);
  await store.write(cp(1), Readable.from([base]));
  const next = Buffer.from(base);
  for (let at = MiB; at < next.length; at += 4 * MiB) randomBytes(64 * 1024).copy(next, at);
  await store.write(cp(2, 'cp-1'), Readable.from([next]));
  proxy.clear();
  expect(sha(await readAll((await store.open('s1', 'cp-2')).stream))).toBe(sha(next));
  expect(sha(await readAll((await store.open('s1', 'cp-1')).stream))).toBe(sha(base));
});

test('a pack removed once the restore has begun fails it as not found, not as short or corrupt', async () => {
  const state = randomBytes(8 * MiB);
  await store.write(cp(1), Readable.from([state]));
  const { stream } = await store.open('s1', 'cp-1');
  for await (const key of backend.listKeys('s1/packs/')) await backend.delete(key);
  await expect(readAll(stream)).rejects.toBeInstanceOf(SnapshotNotFoundError);
});
