import { createHash, randomBytes } from 'node:crypto';
import { S3BlobBackend } from '../../../src/snapshots/blob/s3-backend';
import { startS3Server, type S3TestServer } from '../../helpers/s3-server';
import { describeBlobBackendContract } from './backend-contract';

const PART_BYTES = 5 * 1024 * 1024;

let server: S3TestServer;
let made = 0;

beforeAll(async () => {
  server = await startS3Server();
});
afterAll(async () => {
  await server?.stop();
});

// One server for the file; each test gets a prefix of its own in its bucket, so each starts from an empty store.
describeBlobBackendContract(
  'S3 (versitygw)',
  async () => {
    const backend = new S3BlobBackend({
      bucket: server.bucket,
      prefix: `contract-${++made}`,
      endpoint: server.endpoint,
      region: server.region,
      forcePathStyle: true,
      credentials: server.credentials,
      partBytes: PART_BYTES,
      partConcurrency: 2,
    });
    return { backend, cleanup: () => backend.close() };
  },
  { largeBodyBytes: 3 * PART_BYTES + 12_345 },
);

describe('S3BlobBackend', () => {
  test('its location names the bucket and prefix', () => {
    const backend = new S3BlobBackend({ bucket: 'b', prefix: '/fleet/one/', endpoint: server.endpoint });
    expect(backend.location).toBe('s3://b/fleet/one');
    expect(new S3BlobBackend({ bucket: 'b', endpoint: server.endpoint }).location).toBe('s3://b');
  });

  test('keys live under the prefix in the bucket, invisible to a backend with another prefix', async () => {
    const options = {
      bucket: server.bucket,
      endpoint: server.endpoint,
      forcePathStyle: true,
      credentials: server.credentials,
    };
    const a = new S3BlobBackend({ ...options, prefix: 'tenant-a' });
    const b = new S3BlobBackend({ ...options, prefix: 'tenant-ab' });
    try {
      await a.put('x/1', Buffer.from('a'));
      await b.put('x/1', Buffer.from('b'));
      expect((await a.read('x/1'))?.toString()).toBe('a');
      const keys: string[] = [];
      for await (const info of a.list('')) keys.push(info.key);
      expect(keys).toEqual(['x/1']);
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });

  test('a streamed body of many more parts than are in flight reads back whole: every part its own bytes', async () => {
    const backend = new S3BlobBackend({
      bucket: server.bucket,
      prefix: 'many-parts',
      endpoint: server.endpoint,
      forcePathStyle: true,
      credentials: server.credentials,
      partBytes: PART_BYTES,
      partConcurrency: 2,
    });
    // Part buffers are reused once their upload is over: a part cut into a buffer still being sent would show here.
    const body = randomBytes(9 * PART_BYTES + 4321);
    const digest = (bytes: Buffer) => createHash('sha256').update(bytes).digest('hex');
    try {
      await backend.put(
        'big',
        (async function* () {
          for (let at = 0; at < body.length; at += 1_000_000) yield body.subarray(at, at + 1_000_000);
        })(),
      );
      expect(digest((await backend.read('big'))!)).toBe(digest(body));
    } finally {
      await backend.close();
    }
  });
});
