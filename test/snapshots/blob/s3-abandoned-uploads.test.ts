/**
 * A writer killed mid multipart upload leaves the upload open: its parts are invisible but stored (and billed) until
 * someone aborts it. The store's clean-up of dead writers — at worker start and in gc — aborts those whose last part
 * is older than the leftover age by the server's clock, and never a live writer's.
 */
import crypto from 'node:crypto';
import {
  CreateMultipartUploadCommand,
  ListMultipartUploadsCommand,
  type S3Client,
  UploadPartCommand,
} from '@aws-sdk/client-s3';
import { ABANDONED_AFTER_MS } from '../../../src/snapshots/abandoned';
import { S3BlobBackend } from '../../../src/snapshots/blob/s3-backend';
import { ChunkedSnapshotStore, Keyring } from '../../../src/snapshots';
import { startS3Server, type S3TestServer } from '../../helpers/s3-server';

const MiB = 1024 * 1024;

let server: S3TestServer;
let admin: S3Client;
let made = 0;

beforeAll(async () => {
  server = await startS3Server();
  admin = server.client();
});
afterAll(async () => {
  admin?.destroy();
  await server?.stop();
});

function openStore(prefix: string, tenant?: string): ChunkedSnapshotStore {
  const backend = new S3BlobBackend({
    bucket: server.bucket,
    prefix,
    endpoint: server.endpoint,
    region: server.region,
    forcePathStyle: true,
    credentials: server.credentials,
  });
  const keyring = new Keyring([{ id: 'k1', key: crypto.randomBytes(32) }]);
  return new ChunkedSnapshotStore({ backend, keyring, ...(tenant ? { tenant } : {}) });
}

/** What a writer killed after its first part leaves: an upload begun, one part stored, never completed. */
async function killedUpload(key: string, bytes = 5 * MiB): Promise<string> {
  const { UploadId } = await admin.send(new CreateMultipartUploadCommand({ Bucket: server.bucket, Key: key }));
  await admin.send(
    new UploadPartCommand({
      Bucket: server.bucket,
      Key: key,
      UploadId,
      PartNumber: 1,
      Body: crypto.randomBytes(bytes),
    }),
  );
  return UploadId!;
}

async function openUploads(prefix: string): Promise<string[]> {
  const listed = await admin.send(new ListMultipartUploadsCommand({ Bucket: server.bucket, Prefix: prefix }));
  return (listed.Uploads ?? []).map((u) => u.Key!).sort();
}

/** The server's clock, `ms` on: what a clean-up that long after now would see. */
async function serverTimeIn(store: ChunkedSnapshotStore, ms: number): Promise<number> {
  return (await store.backend.now()).getTime() + ms;
}

test('gc aborts the uploads of a writer killed mid-write once they are older than the leftover age', async () => {
  const prefix = `uploads-${++made}`;
  const store = openStore(prefix);
  try {
    await killedUpload(`${prefix}/s1/packs/dead-h.pack`);
    expect(await openUploads(`${prefix}/`)).toEqual([`${prefix}/s1/packs/dead-h.pack`]);

    // Younger than the leftover age: it may be a live writer's, and stays.
    const now = await serverTimeIn(store, 0);
    expect((await store.gc({ now })).abandoned).toEqual({ tempFiles: 0, pins: 0, bytes: 0 });
    expect(await openUploads(`${prefix}/`)).toHaveLength(1);

    const later = await serverTimeIn(store, ABANDONED_AFTER_MS + 60_000);
    expect((await store.gc({ now: later, dryRun: true })).abandoned).toEqual({ tempFiles: 1, pins: 0, bytes: 5 * MiB });
    expect(await openUploads(`${prefix}/`)).toHaveLength(1);
    expect((await store.gc({ now: later })).abandoned).toEqual({ tempFiles: 1, pins: 0, bytes: 5 * MiB });
    expect(await openUploads(`${prefix}/`)).toEqual([]);
  } finally {
    await store.backend.close();
  }
});

test('a tenant cleans only its own uploads, and the clean-up at worker start aborts them too', async () => {
  const prefix = `uploads-${++made}`;
  const root = openStore(prefix);
  const tenant = root.forTenant('acme');
  try {
    await killedUpload(`${prefix}/_tenants/acme/s1/packs/dead-h.pack`);
    await killedUpload(`${prefix}/s2/packs/other-h.pack`);
    const later = await serverTimeIn(root, ABANDONED_AFTER_MS + 60_000);
    expect(await tenant.cleanAbandoned({ now: later })).toEqual({ tempFiles: 1, pins: 0, bytes: 5 * MiB });
    expect(await openUploads(`${prefix}/`)).toEqual([`${prefix}/s2/packs/other-h.pack`]);
    expect(await root.cleanAbandoned({ now: later })).toEqual({ tempFiles: 1, pins: 0, bytes: 5 * MiB });
    expect(await openUploads(`${prefix}/`)).toEqual([]);
  } finally {
    await root.backend.close();
  }
});

test('an upload whose writer still uploads parts is not abandoned, however long ago it began', async () => {
  const prefix = `uploads-${++made}`;
  const store = openStore(prefix);
  try {
    const key = `${prefix}/s1/packs/slow-h.pack`;
    const uploadId = await killedUpload(key);
    const afterFirstPart = await store.backend.now();
    // The writer is alive: a second part, uploaded after the moment the clean-up takes as its cut-off.
    await waitUntilServerPasses(store, afterFirstPart);
    const cutOff = await store.backend.now();
    await waitUntilServerPasses(store, cutOff);
    await admin.send(
      new UploadPartCommand({
        Bucket: server.bucket,
        Key: key,
        UploadId: uploadId,
        PartNumber: 2,
        Body: crypto.randomBytes(MiB),
      }),
    );
    // Begun before the cut-off, but a part came after it.
    expect(await store.cleanAbandoned({ olderThanMs: 0, now: cutOff.getTime() })).toEqual({
      tempFiles: 0,
      pins: 0,
      bytes: 0,
    });
    expect(await openUploads(`${prefix}/`)).toEqual([key]);
  } finally {
    await store.backend.close();
  }
});

/** Waits until the server's clock (whole seconds in HTTP dates) is past `moment`. */
async function waitUntilServerPasses(store: ChunkedSnapshotStore, moment: Date): Promise<void> {
  while ((await store.backend.now()).getTime() <= moment.getTime()) await new Promise((r) => setTimeout(r, 200));
}
