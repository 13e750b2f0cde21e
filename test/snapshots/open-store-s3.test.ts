/**
 * `DS_SNAPSHOT_STORE=s3://…` is what a worker opens: the configuration's store, on a real S3 server (versitygw),
 * encrypted under the configured master keys — checkpoints land in the bucket under the prefix, nothing on the
 * worker's disk, and a second store opened from the same configuration (another host) reads them back.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { ListObjectsV2Command } from '@aws-sdk/client-s3';
import { loadConfig } from '../../src/config';
import { openSnapshotStore } from '../../src/snapshots';
import { cp, readAll } from '../helpers/checkpoints';
import { startS3Server, type S3TestServer } from '../helpers/s3-server';

let server: S3TestServer;
let dataDir: string;
const saved = { ...process.env };
beforeAll(async () => {
  server = await startS3Server();
  dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'ds-s3-store-'));
  // The standard AWS chain: what a deployment sets.
  process.env.AWS_ACCESS_KEY_ID = server.credentials.accessKeyId;
  process.env.AWS_SECRET_ACCESS_KEY = server.credentials.secretAccessKey;
});
afterAll(async () => {
  process.env = saved;
  await server?.stop();
  fs.rmSync(dataDir, { recursive: true, force: true });
});

test('a store opened from the configuration keeps its checkpoints in the bucket', async () => {
  const env = {
    DS_DATA_DIR: dataDir,
    DS_SNAPSHOT_STORE: `s3://${server.bucket}/fleet-a`,
    DS_S3_ENDPOINT: server.endpoint,
    DS_S3_REGION: server.region,
    DS_S3_FORCE_PATH_STYLE: 'true',
    DS_MASTER_KEYS: `m-1:${crypto.randomBytes(32).toString('base64')}`,
  };
  const state = crypto.randomBytes(3 * 1024 * 1024);
  const one = await openSnapshotStore(loadConfig(env));
  await one.write(cp(1), Readable.from([state]));

  const listed = await server.client().send(new ListObjectsV2Command({ Bucket: server.bucket, Prefix: 'fleet-a/' }));
  const keys = (listed.Contents ?? []).map((o) => o.Key);
  expect(keys).toContain('fleet-a/s1/cp-1.manifest');
  expect(keys.some((k) => k?.startsWith('fleet-a/s1/packs/'))).toBe(true);
  // Encrypted: the state's bytes are nowhere in the bucket as they are.
  for (const entry of fs.readdirSync(server.dir, { recursive: true, withFileTypes: true })) {
    if (!entry.isFile()) continue;
    const bytes = fs.readFileSync(path.join(entry.parentPath, entry.name));
    expect(bytes.includes(state.subarray(1000, 1064))).toBe(false);
  }
  // Nothing of the store on the worker's disk.
  expect(fs.existsSync(path.join(dataDir, 'snapshots'))).toBe(false);

  const other = await openSnapshotStore(loadConfig(env));
  const { stream } = await other.open('s1', 'cp-1');
  expect((await readAll(stream)).equals(state)).toBe(true);
});

test('a bucket that refuses the credentials fails a claim with its own error, and takes no session id', async () => {
  const env = {
    DS_DATA_DIR: dataDir,
    DS_SNAPSHOT_STORE: `s3://${server.bucket}/fleet-refused`,
    DS_S3_ENDPOINT: server.endpoint,
    DS_S3_REGION: server.region,
    DS_S3_FORCE_PATH_STYLE: 'true',
    DS_SNAPSHOT_ENCRYPTION: 'none',
  };
  process.env.AWS_SECRET_ACCESS_KEY = 'not-the-secret';
  const refused = await openSnapshotStore(loadConfig(env));
  const error = await refused.claim('s2', 'run-a').catch((err: unknown) => err);
  // What the server said, not "taken": a start on a worker with the wrong secret fails for what is wrong.
  expect(error).toMatchObject({ name: 'SignatureDoesNotMatch' });
  expect((error as { code?: string }).code).not.toBe('SessionAlreadyExists');

  process.env.AWS_SECRET_ACCESS_KEY = server.credentials.secretAccessKey;
  const store = await openSnapshotStore(loadConfig(env));
  await store.claim('s2', 'run-a');
});
