import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Readable } from 'node:stream';
import type { BlobBackend, BlobBody, BlobInfo, BlobRange } from '../../../src/snapshots/blob/backend';
import { FsBlobBackend } from '../../../src/snapshots/blob/fs-backend';
import { S3BlobBackend } from '../../../src/snapshots/blob/s3-backend';
import { startS3Server, type S3TestServer } from '../../helpers/s3-server';

/**
 * The backends the store contract suites run on. A backend joins by adding its harness to `contractBackends` (the S3
 * backend's: a bucket prefix of its own per `open`, on the test server the suite starts).
 */
export interface BackendHarness {
  name: string;
  /** A new, empty backend that no other test uses. */
  open(): Promise<OpenedBackend>;
}

export interface OpenedBackend {
  backend: BlobBackend;
  /** Every object stored, with whatever else the backend keeps (temp files): what a test says must be left. */
  everything(): Promise<string[]>;
  /** Flips one bit in the middle of the largest object under `prefix`: the state's bytes, in any layout. */
  tamper(prefix: string): Promise<void>;
  dispose(): Promise<void>;
}

/** Flips a bit of the largest object under `prefix` through the backend (a tamper hook for any backend). */
export async function tamperLargest(backend: BlobBackend, prefix: string): Promise<void> {
  let largest: { key: string; size: number } | null = null;
  for await (const info of backend.list(prefix)) if (!largest || info.size > largest.size) largest = info;
  if (!largest) throw new Error(`nothing under ${prefix} to tamper with`);
  const bytes = (await backend.read(largest.key))!;
  bytes[Math.floor(bytes.length / 2)]! ^= 0x01;
  await backend.put(largest.key, bytes);
}

export const fsBackend: BackendHarness = {
  name: 'a local directory',
  async open() {
    const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ds-contract-'));
    const root = path.join(tmp, 'store');
    const backend = new FsBlobBackend(root);
    return {
      backend,
      // Files on disk, temp files included: a write that fails must not leave one.
      everything: async () =>
        fs.existsSync(root)
          ? fs
              .readdirSync(root, { recursive: true, withFileTypes: true })
              .filter((e) => e.isFile())
              .map((e) => path.relative(root, path.join(e.parentPath, e.name)).split(path.sep).join('/'))
              .sort()
          : [],
      tamper: (prefix) => tamperLargest(backend, prefix),
      dispose: async () => fs.rmSync(tmp, { recursive: true, force: true }),
    };
  },
};

/**
 * A backend that is a local directory underneath but does not say so: the store treats it as it treats an object
 * store (no temp-file sweeps, the timeline as one object per entry), so the object-store paths run in every suite
 * without a server.
 */
class OpaqueBackend implements BlobBackend {
  readonly location: string;
  constructor(private readonly inner: BlobBackend) {
    this.location = `opaque+${inner.location}`;
  }
  create(key: string, body: BlobBody): Promise<boolean> {
    return this.inner.create(key, body);
  }
  put(key: string, body: BlobBody): Promise<void> {
    return this.inner.put(key, body);
  }
  read(key: string, options?: { range?: BlobRange; maxBytes?: number }): Promise<Buffer | null> {
    return this.inner.read(key, options);
  }
  stream(key: string, options?: { range?: BlobRange }): Promise<Readable | null> {
    return this.inner.stream(key, options);
  }
  stat(key: string): Promise<BlobInfo | null> {
    return this.inner.stat(key);
  }
  list(prefix: string): AsyncIterable<BlobInfo> {
    return this.inner.list(prefix);
  }
  listKeys(prefix: string): AsyncIterable<string> {
    return this.inner.listKeys(prefix);
  }
  delete(key: string): Promise<void> {
    return this.inner.delete(key);
  }
  now(): Promise<Date> {
    return this.inner.now();
  }
  close(): Promise<void> {
    return this.inner.close();
  }
}

/** `backend` behind a plain BlobBackend, which the store cannot take for a local directory. */
export function asOpaque(backend: BlobBackend): BlobBackend {
  return new OpaqueBackend(backend);
}

export const opaqueFsBackend: BackendHarness = {
  name: 'a local directory taken for an object store',
  async open() {
    const opened = await fsBackend.open();
    const backend = new OpaqueBackend(opened.backend);
    return { ...opened, backend, tamper: (prefix) => tamperLargest(backend, prefix) };
  },
};

let server: Promise<S3TestServer> | undefined;
// Registered as the test file imports this module: the server stops with the file that started it.
afterAll(async () => {
  const started = server;
  server = undefined;
  if (started) await (await started).stop();
});

/**
 * A bucket prefix of its own per `open`, on one real S3 server (versitygw) per test file, started on first use and
 * stopped after the file's tests.
 */
export const s3Backend: BackendHarness = {
  name: 'an S3 bucket (versitygw)',
  async open() {
    const s3 = await (server ??= startS3Server());
    const backend = new S3BlobBackend({
      bucket: s3.bucket,
      prefix: `contract-${randomUUID()}`,
      endpoint: s3.endpoint,
      region: s3.region,
      credentials: s3.credentials,
      forcePathStyle: true,
    });
    const everything = async () => {
      const keys: string[] = [];
      for await (const info of backend.list('')) keys.push(info.key);
      return keys;
    };
    return {
      backend,
      everything,
      tamper: (prefix) => tamperLargest(backend, prefix),
      dispose: async () => {
        for (const key of await everything()) await backend.delete(key);
        await backend.close();
      },
    };
  },
};

/** Every backend the store contracts run on. */
export const contractBackends: BackendHarness[] = [fsBackend, opaqueFsBackend, s3Backend];
