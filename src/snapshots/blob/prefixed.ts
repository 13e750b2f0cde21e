/**
 * A view of a backend under one key prefix (a tenant's store is `_tenants/<tenant>/` of the root's backend): keys
 * given to it are relative to the prefix, and keys it lists are too. Timestamps and commit points are the backend's.
 */
import type { Readable } from 'node:stream';
import {
  checkBlobKey,
  type BlobBackend,
  type BlobBody,
  type BlobInfo,
  type BlobRange,
  type BlobRangeReader,
} from './backend';

export class PrefixedBlobBackend implements BlobBackend {
  readonly location: string;
  /** The prefix, without its trailing `/`. */
  readonly prefixPath: string;
  private readonly prefix: string;

  /** `prefix`: `/`-separated segments, without a trailing `/`. */
  constructor(
    readonly inner: BlobBackend,
    prefix: string,
  ) {
    this.prefixPath = checkBlobKey(prefix);
    this.prefix = `${prefix}/`;
    this.location = `${inner.location.replace(/\/$/, '')}/${prefix}`;
  }

  private key(key: string): string {
    return this.prefix + checkBlobKey(key);
  }

  create(key: string, body: BlobBody): Promise<boolean> {
    return this.inner.create(this.key(key), body);
  }

  put(key: string, body: BlobBody): Promise<void> {
    return this.inner.put(this.key(key), body);
  }

  read(key: string, options?: { range?: BlobRange; maxBytes?: number }): Promise<Buffer | null> {
    return this.inner.read(this.key(key), options);
  }

  stream(key: string, options?: { range?: BlobRange }): Promise<Readable | null> {
    return this.inner.stream(this.key(key), options);
  }

  get openRanges(): ((key: string) => Promise<BlobRangeReader | null>) | undefined {
    const inner = this.inner;
    if (!inner.openRanges) return undefined;
    return (key) => inner.openRanges!(this.key(key));
  }

  async stat(key: string): Promise<BlobInfo | null> {
    const info = await this.inner.stat(this.key(key));
    return info && { ...info, key };
  }

  async *list(prefix: string): AsyncIterable<BlobInfo> {
    for await (const info of this.inner.list(this.prefix + prefix)) {
      yield { ...info, key: info.key.slice(this.prefix.length) };
    }
  }

  async *listKeys(prefix: string): AsyncIterable<string> {
    for await (const key of this.inner.listKeys(this.prefix + prefix)) yield key.slice(this.prefix.length);
  }

  delete(key: string): Promise<void> {
    return this.inner.delete(this.key(key));
  }

  now(): Promise<Date> {
    return this.inner.now();
  }

  removeAbandonedWrites(
    before: Date,
    options: { prefix?: string; dryRun?: boolean } = {},
  ): Promise<{ writes: number; bytes: number }> {
    if (!this.inner.removeAbandonedWrites) return Promise.resolve({ writes: 0, bytes: 0 });
    return this.inner.removeAbandonedWrites(before, { ...options, prefix: this.prefix + (options.prefix ?? '') });
  }

  /** The view does not own the backend: closing it closes nothing. */
  async close(): Promise<void> {}
}
