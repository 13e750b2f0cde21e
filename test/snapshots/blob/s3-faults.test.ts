import { randomBytes } from 'node:crypto';
import { HeadObjectCommand, ListMultipartUploadsCommand, type S3Client } from '@aws-sdk/client-s3';
import { StoreUnavailableError } from '../../../src/domain/errors';
import { S3BlobBackend, type S3BlobBackendOptions } from '../../../src/snapshots/blob/s3-backend';
import { FaultProxy } from '../../helpers/fault-proxy';
import { startS3Server, type S3TestServer } from '../../helpers/s3-server';

const PART_BYTES = 5 * 1024 * 1024;

let server: S3TestServer;
let proxy: FaultProxy;
let direct: S3Client;
let made = 0;
let prefix: string;
const open: S3BlobBackend[] = [];

beforeAll(async () => {
  server = await startS3Server();
  proxy = await FaultProxy.start(server.port);
  direct = server.client();
});
afterAll(async () => {
  direct?.destroy();
  await proxy?.stop();
  await server?.stop();
});
beforeEach(() => {
  prefix = `faults-${++made}`;
  proxy.clear();
});
afterEach(async () => {
  await Promise.all(open.splice(0).map((b) => b.close()));
});

/** A backend that reaches the server through the proxy, with short backoffs so a test spends little time waiting. */
function backendThroughProxy(options: Partial<S3BlobBackendOptions> = {}): S3BlobBackend {
  const backend = new S3BlobBackend({
    bucket: server.bucket,
    prefix,
    endpoint: proxy.endpoint,
    region: server.region,
    forcePathStyle: true,
    credentials: server.credentials,
    partBytes: PART_BYTES,
    partConcurrency: 2,
    retry: { attempts: 4, baseDelayMs: 20, maxDelayMs: 100 },
    ...options,
  });
  open.push(backend);
  return backend;
}

/** What the server holds under `key`, asked directly (not through the proxy or the backend). */
async function storedObject(key: string): Promise<{ size: number } | null> {
  try {
    const head = await direct.send(new HeadObjectCommand({ Bucket: server.bucket, Key: `${prefix}/${key}` }));
    return { size: head.ContentLength ?? 0 };
  } catch (err) {
    if ((err as { $metadata?: { httpStatusCode?: number } }).$metadata?.httpStatusCode === 404) return null;
    throw err;
  }
}

async function pendingUploads(): Promise<number> {
  const page = await direct.send(new ListMultipartUploadsCommand({ Bucket: server.bucket, Prefix: `${prefix}/` }));
  return page.Uploads?.length ?? 0;
}

async function* chunked(bytes: Buffer, size = 256 * 1024): AsyncIterable<Buffer> {
  for (let at = 0; at < bytes.length; at += size) yield bytes.subarray(at, at + size);
}

const isPut = (method: string, url: string) => method === 'PUT' && !url.includes('partNumber=');
const isPart = (n: number) => (method: string, url: string) => method === 'PUT' && url.includes(`partNumber=${n}&`);
const isGet = (method: string) => method === 'GET';

describe('S3BlobBackend through a faulty network', () => {
  test('retries through 503 SlowDown, 500 InternalError and 503 answers, and the write and read succeed', async () => {
    const backend = backendThroughProxy();
    proxy.inject({ fault: { kind: 'status', status: 503, code: 'SlowDown' }, times: 1 });
    proxy.inject({ fault: { kind: 'status', status: 500, code: 'InternalError' }, times: 1 });
    expect(await backend.create('k/one', Buffer.from('payload'))).toBe(true);
    proxy.inject({ fault: { kind: 'status', status: 503, code: 'ServiceUnavailable' }, times: 2 });
    expect((await backend.read('k/one'))?.toString()).toBe('payload');
    expect(proxy.faulted).toBeGreaterThanOrEqual(4);
  });

  test('a connection dropped part-way through an answer is picked up where it broke off', async () => {
    const backend = backendThroughProxy();
    const bytes = randomBytes(3 * 1024 * 1024);
    await backend.put('k/big', bytes);
    proxy.inject({ fault: { kind: 'drop-response', afterBytes: 1024 * 1024 }, match: isGet, times: 1 });
    expect((await backend.read('k/big'))?.equals(bytes)).toBe(true);
    proxy.inject({ fault: { kind: 'drop-response', afterBytes: 700_000 }, match: isGet, times: 2 });
    const chunks: Buffer[] = [];
    for await (const chunk of (await backend.stream('k/big'))!) chunks.push(chunk as Buffer);
    expect(Buffer.concat(chunks).equals(bytes)).toBe(true);
  });

  test('a connection dropped part-way through an upload is retried, and the object is whole', async () => {
    const backend = backendThroughProxy();
    const bytes = randomBytes(2 * 1024 * 1024);
    proxy.inject({ fault: { kind: 'drop-request', afterBytes: 500_000 }, match: isPut, times: 1 });
    await backend.put('k/put', bytes);
    proxy.inject({ fault: { kind: 'drop-request', afterBytes: 1_000_000 }, match: isPart(2), times: 1 });
    const large = randomBytes(2 * PART_BYTES + 1000);
    expect(await backend.create('k/multi', chunked(large))).toBe(true);
    expect((await backend.read('k/put'))?.equals(bytes)).toBe(true);
    expect((await backend.read('k/multi'))?.equals(large)).toBe(true);
  });

  test('a slow answer past the idle timeout is dropped and retried', async () => {
    const backend = backendThroughProxy({ idleTimeoutMs: 1_000 });
    await backend.put('k/slow', Buffer.from('eventually'));
    proxy.inject({ fault: { kind: 'delay', ms: 3_000 }, match: isGet, times: 1 });
    expect((await backend.read('k/slow'))?.toString()).toBe('eventually');
    expect(proxy.faulted).toBe(1);
  });

  test('past its retry bound the backend raises StoreUnavailable, retryable, naming the store', async () => {
    const backend = backendThroughProxy({ retry: { attempts: 3, baseDelayMs: 10, maxDelayMs: 20 } });
    proxy.inject({ fault: { kind: 'status', status: 503, code: 'SlowDown' } });
    const error = await backend.read('k/any').catch((err: unknown) => err);
    expect(error).toBeInstanceOf(StoreUnavailableError);
    expect(error).toMatchObject({ code: 'StoreUnavailable', retryable: true });
    expect((error as Error).message).toContain(`s3://${server.bucket}/${prefix}`);
    expect(proxy.requests).toBe(3);
    await expect(backend.put('k/any', Buffer.from('x'))).rejects.toBeInstanceOf(StoreUnavailableError);
    await expect(backend.now()).rejects.toBeInstanceOf(StoreUnavailableError);
  });

  test('a create whose answer was lost after the server wrote it still reports that it created the object', async () => {
    const backend = backendThroughProxy();
    proxy.inject({ fault: { kind: 'drop-response', afterBytes: 0 }, match: isPut, times: 1 });
    expect(await backend.create('k/lost-answer', Buffer.from('mine'))).toBe(true);
    expect(await backend.create('k/lost-answer', Buffer.from('theirs'))).toBe(false);
    expect((await backend.read('k/lost-answer'))?.toString()).toBe('mine');
  });

  test('a create cut off mid-upload for good leaves no visible object and no upload behind', async () => {
    const backend = backendThroughProxy();
    proxy.inject({ fault: { kind: 'drop-request', afterBytes: 1_000_000 }, match: isPart(2) });
    const large = randomBytes(3 * PART_BYTES);
    await expect(backend.create('k/cut', chunked(large))).rejects.toBeInstanceOf(StoreUnavailableError);
    proxy.inject({ fault: { kind: 'drop-request', afterBytes: 100_000 }, match: isPut });
    await expect(backend.create('k/cut-small', randomBytes(1_000_000))).rejects.toBeInstanceOf(StoreUnavailableError);
    proxy.clear();
    expect(await storedObject('k/cut')).toBeNull();
    expect(await storedObject('k/cut-small')).toBeNull();
    expect(await pendingUploads()).toBe(0);
    // The key is still free: a later create of it wins.
    expect(await backend.create('k/cut', Buffer.from('later'))).toBe(true);
  });
});
