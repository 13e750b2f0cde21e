/**
 * The storage under the snapshot store: a flat namespace of objects named by `/`-separated keys, with nothing of
 * POSIX in its contract. The engine, the session claim, the timeline log, pins and leftovers are written against it,
 * so the same store runs on a local directory (`fs-backend.ts`, the embedded default) or an object store shared by
 * many workers on many hosts (S3).
 *
 * Safety rests on three promises every backend keeps, whatever machines its callers run on:
 * - an object is visible whole or not at all (no reader sees a partial write, a crash leaves no partial object);
 * - `create` succeeds for exactly one of any number of concurrent writers of one key: it is the commit point of a
 *   manifest, a claim, a lineage pointer and a timeline entry;
 * - `modifiedAt` and `now()` come from the backend's one clock, never a worker's, so that the age of a leftover or a
 *   pin means the same to every host.
 */
import type { Readable } from 'node:stream';

/** What the backend knows of one object. */
export interface BlobInfo {
  key: string;
  size: number;
  /** When it was last written, by the backend's clock. */
  modifiedAt: Date;
}

/** Bytes to store: whole, or streamed (a pack of unknown length streams through without being held in memory). */
export type BlobBody = Buffer | AsyncIterable<Buffer>;

export interface BlobRange {
  offset: number;
  length: number;
}

/** An object open for reads at any offset into the caller's buffers (see BlobBackend.openRanges). */
export interface BlobRangeReader {
  /** Reads up to `length` bytes at `offset` into `into` at `at`; resolves with how many there were (fewer at the end). */
  readInto(into: Buffer, at: number, length: number, offset: number): Promise<number>;
  close(): Promise<void>;
}

export interface BlobBackend {
  /** Where the objects are, for messages: `file:///var/lib/ds/snapshots`, `s3://bucket/prefix`. */
  readonly location: string;

  /**
   * Writes `key` if no object has it: true if this call created it, false if one was there already (then nothing of
   * `body` is stored). Of concurrent creates of one key, exactly one returns true.
   */
  create(key: string, body: BlobBody): Promise<boolean>;

  /** Writes `key`, replacing any object it had. */
  put(key: string, body: BlobBody): Promise<void>;

  /**
   * The object's bytes, or the bytes of `range` (shorter where the object ends first); null if there is no object.
   * An object larger than `maxBytes` is an error, not read: a damaged size field must not make a reader allocate it.
   */
  read(key: string, options?: { range?: BlobRange; maxBytes?: number }): Promise<Buffer | null>;

  /** The object's bytes (or `range`'s) as a stream, for objects too large to hold; null if there is no object. */
  stream(key: string, options?: { range?: BlobRange }): Promise<Readable | null>;

  /**
   * The object open for reads at any offset, straight into the caller's buffers; null if there is no object. Only a
   * backend where a read costs no request of its own (a local file) has it: a restore then reads each batch in place,
   * several at once, where a stream would pass every byte through its own buffers and the event loop.
   */
  openRanges?(key: string): Promise<BlobRangeReader | null>;

  stat(key: string): Promise<BlobInfo | null>;

  /** Every object whose key starts with `prefix`, in key order. */
  list(prefix: string): AsyncIterable<BlobInfo>;

  /**
   * The keys `list` would give, without their sizes and times: cheaper where those cost a call each (a directory). A
   * key may name an object deleted since; a read of it then finds none.
   */
  listKeys(prefix: string): AsyncIterable<string>;

  /** Removes the object; one that is not there is not an error. */
  delete(key: string): Promise<void>;

  /** The backend's clock, to compare with `modifiedAt`. */
  now(): Promise<Date>;

  /**
   * Removes the hidden state of writes that were begun and never finished (an object store's multipart uploads of a
   * writer killed mid-write) and saw nothing written since `before`, by the backend's clock: no visible object is
   * ever touched; only writes of keys under `prefix` (all by default). Returns how many and their bytes. A backend
   * whose writes leave nothing hidden has no such method.
   */
  removeAbandonedWrites?(
    before: Date,
    options?: { prefix?: string; dryRun?: boolean },
  ): Promise<{ writes: number; bytes: number }>;

  /** Releases connections and handles; the backend is not used after. */
  close(): Promise<void>;
}

const KEY_SEGMENT = /^[A-Za-z0-9_-][A-Za-z0-9._-]*$/;

/**
 * Refuses a key that is not relative `/`-separated segments of safe characters, none empty or starting with a dot
 * (so no `..`, and a backend may keep dot-names of its own, such as temp files): a key must never name something
 * outside the store, on any backend.
 */
export function checkBlobKey(key: string): string {
  const bad = key.length === 0 || key.length > 1024 || key.split('/').some((s) => !KEY_SEGMENT.test(s));
  if (bad) throw new TypeError(`invalid object key ${JSON.stringify(key)}`);
  return key;
}

/** `checkBlobKey` for a list prefix, which may end in `/` or part-way through a segment, or be empty (everything). */
export function checkBlobPrefix(prefix: string): string {
  if (prefix === '') return prefix;
  checkBlobKey(prefix.endsWith('/') ? prefix.slice(0, -1) : prefix);
  return prefix;
}
