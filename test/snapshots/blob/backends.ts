import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { BlobBackend } from '../../../src/snapshots/blob/backend';
import { FsBlobBackend } from '../../../src/snapshots/blob/fs-backend';

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

/** Every backend the store contracts run on; the S3 harness is added here. */
export const contractBackends: BackendHarness[] = [fsBackend];
