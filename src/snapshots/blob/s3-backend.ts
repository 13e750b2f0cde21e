/**
 * The blob backend on an S3-compatible object store: many workers on many hosts share one bucket and nothing else.
 *
 * - `create` is a conditional write (`If-None-Match: *`) on PutObject, or on CompleteMultipartUpload for a streamed
 *   body of more than one part: the store, not the writer, decides the one winner of a key.
 * - A streamed body is cut into parts of a fixed size. At most `partConcurrency` parts are in flight across all the
 *   backend's uploads (a checkpoint streams one pack while the last part of the one before completes), and their
 *   buffers are reused, so memory stays near `(partConcurrency + uploads) × partBytes` whatever the objects' sizes;
 *   a failed upload is aborted, so nothing of it is ever visible.
 * - 5xx, throttling, timeouts and dropped connections are retried with capped exponential backoff; past the bound the
 *   caller gets `StoreUnavailableError` (retryable: the activity retries it later), never a half-done write.
 */
import { randomUUID } from 'node:crypto';
import { Agent as HttpAgent } from 'node:http';
import { Agent as HttpsAgent } from 'node:https';
import { Readable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  AbortMultipartUploadCommand,
  CompleteMultipartUploadCommand,
  CreateMultipartUploadCommand,
  DeleteObjectCommand,
  GetObjectCommand,
  type GetObjectCommandOutput,
  HeadBucketCommand,
  HeadObjectCommand,
  ListMultipartUploadsCommand,
  ListObjectsV2Command,
  ListPartsCommand,
  PutObjectCommand,
  S3Client,
  type S3ClientConfig,
  UploadPartCommand,
} from '@aws-sdk/client-s3';
import { StoreUnavailableError } from '../../domain/errors';
import {
  type BlobBackend,
  type BlobBody,
  type BlobInfo,
  type BlobRange,
  checkBlobKey,
  checkBlobPrefix,
} from './backend';

/** How hard the backend tries before it reports the store unavailable. */
export interface S3RetryPolicy {
  /** Attempts per request, the first included. */
  attempts: number;
  /** The first backoff; each next one doubles, with full jitter, up to `maxDelayMs`. */
  baseDelayMs: number;
  maxDelayMs: number;
}

export interface S3BlobBackendOptions {
  bucket: string;
  /** Keys are stored under `<prefix>/`; empty: at the bucket's root. */
  prefix?: string;
  /** Endpoint of an S3-compatible server (`http://127.0.0.1:7070`); unset: AWS's for the region. */
  endpoint?: string;
  region?: string;
  /** `http://endpoint/bucket/key` instead of `http://bucket.endpoint/key` (most self-hosted servers need it). */
  forcePathStyle?: boolean;
  /** Unset: the standard AWS chain (environment, shared files, instance or container role). */
  credentials?: S3ClientConfig['credentials'];
  /** Size of each part of a streamed upload (S3 needs at least 5 MiB for every part but the last). */
  partBytes?: number;
  /** Parts uploading at once, across all the backend's streamed uploads. */
  partConcurrency?: number;
  retry?: Partial<S3RetryPolicy>;
  /** A request that sends or receives nothing for this long is dropped and retried. */
  idleTimeoutMs?: number;
}

export const DEFAULT_PART_BYTES = 8 * 1024 * 1024;
export const DEFAULT_PART_CONCURRENCY = 4;
export const DEFAULT_S3_RETRY: S3RetryPolicy = { attempts: 6, baseDelayMs: 200, maxDelayMs: 5_000 };
const MIN_PART_BYTES = 5 * 1024 * 1024;

/** Socket-level failures that say nothing about the request's fate but that the network failed: worth a retry. */
const NETWORK_ERROR_CODES = new Set([
  'ECONNRESET',
  'ECONNREFUSED',
  'ECONNABORTED',
  'EPIPE',
  'ETIMEDOUT',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ERR_STREAM_PREMATURE_CLOSE',
  'UND_ERR_SOCKET',
]);
const TRANSIENT_ERROR_NAMES = new Set([
  'TimeoutError',
  'RequestTimeout',
  'RequestTimeoutException',
  'SlowDown',
  'Throttling',
  'ThrottlingException',
  'TooManyRequestsException',
  'InternalError',
  'ServiceUnavailable',
]);

const TRANSIENT_MESSAGE = new RegExp(
  `\\b(${[...NETWORK_ERROR_CODES].join('|')}|TimeoutError)\\b|socket hang up|^aborted$|premature close`,
  'i',
);

interface S3ErrorShape {
  name?: string;
  code?: string;
  message?: string;
  cause?: unknown;
  $metadata?: { httpStatusCode?: number };
}

function statusOf(err: unknown): number | undefined {
  return (err as S3ErrorShape | undefined)?.$metadata?.httpStatusCode;
}

/** Whether `err` is one a retry may cure: the server's trouble or the network's, not a refusal of the request. */
export function isTransientS3Error(err: unknown): boolean {
  for (let e: unknown = err, depth = 0; e && depth < 4; e = (e as S3ErrorShape).cause, depth++) {
    const { name, code, message } = e as S3ErrorShape;
    const status = statusOf(e);
    if (status !== undefined && (status >= 500 || status === 429)) return true;
    if (name && TRANSIENT_ERROR_NAMES.has(name)) return true;
    if (code && NETWORK_ERROR_CODES.has(code)) return true;
    // The SDK hands some network errors on as a bare Error with only the message (one from another realm, say).
    if (status === undefined && message && TRANSIENT_MESSAGE.test(message)) return true;
  }
  return false;
}

const isNotFound = (err: unknown) =>
  statusOf(err) === 404 || ['NoSuchKey', 'NotFound'].includes((err as S3ErrorShape).name ?? '');
const isPreconditionFailed = (err: unknown) =>
  statusOf(err) === 412 || (err as S3ErrorShape).name === 'PreconditionFailed';
/** A conditional write that met another in flight (or a delete): S3 asks for a retry, which then decides. */
const isConditionalConflict = (err: unknown) =>
  statusOf(err) === 409 && (err as S3ErrorShape).name === 'ConditionalRequestConflict';

/** Metadata naming the create that wrote an object, so a create whose answer was lost can recognise its own write. */
const CREATE_TOKEN = 'ds-create';

export class S3BlobBackend implements BlobBackend {
  readonly location: string;
  private readonly client: S3Client;
  private readonly bucket: string;
  private readonly root: string;
  private readonly partBytes: number;
  private readonly partConcurrency: number;
  private readonly retry: S3RetryPolicy;
  /** Buffers of finished parts, for the next parts to be cut into (at most partConcurrency + 1 are kept). */
  private readonly spareParts: Buffer[] = [];
  /** Part slots free, and the uploads waiting for one. */
  private freeSlots: number;
  private readonly slotWaiters: (() => void)[] = [];

  constructor(options: S3BlobBackendOptions) {
    this.bucket = options.bucket;
    const prefix = (options.prefix ?? '').replace(/^\/+|\/+$/g, '');
    if (prefix) checkBlobKey(prefix);
    this.root = prefix ? `${prefix}/` : '';
    this.location = `s3://${options.bucket}${prefix ? `/${prefix}` : ''}`;
    this.partBytes = options.partBytes ?? DEFAULT_PART_BYTES;
    if (this.partBytes < MIN_PART_BYTES) throw new RangeError(`partBytes must be at least ${MIN_PART_BYTES}`);
    this.partConcurrency = Math.max(1, options.partConcurrency ?? DEFAULT_PART_CONCURRENCY);
    this.freeSlots = this.partConcurrency;
    this.retry = { ...DEFAULT_S3_RETRY, ...options.retry };
    const idle = options.idleTimeoutMs ?? 60_000;
    const agentOptions = { keepAlive: true, maxSockets: 64 };
    this.client = new S3Client({
      ...(options.endpoint !== undefined ? { endpoint: options.endpoint } : {}),
      // Unset: the AWS chain's region; a self-hosted server (an endpoint) rarely cares, so us-east-1 rather than none.
      ...regionOf(options),
      forcePathStyle: options.forcePathStyle ?? false,
      ...(options.credentials !== undefined ? { credentials: options.credentials } : {}),
      // Retries are this class's (they must wrap a whole streamed read and know a create's conditions).
      maxAttempts: 1,
      // Every object the engine writes is authenticated by its own digest or AEAD tag; a second checksum per request
      // would cost CPU on the hot path and prove nothing more.
      requestChecksumCalculation: 'WHEN_REQUIRED',
      responseChecksumValidation: 'WHEN_REQUIRED',
      requestHandler: {
        connectionTimeout: Math.min(idle, 10_000),
        requestTimeout: idle,
        throwOnRequestTimeout: true,
        httpAgent: new HttpAgent(agentOptions),
        httpsAgent: new HttpsAgent(agentOptions),
      },
    });
    // For the same reason, bodies are sent as UNSIGNED-PAYLOAD: SigV4 would otherwise hash every part with SHA-256
    // on the calling thread, the one that also cuts chunks (bench/README.md, S3). The headers stay signed.
    this.client.middlewareStack.add(
      (next) => async (args) => {
        const request = args.request as { method?: string; headers?: Record<string, string> };
        if (request.method === 'PUT' && request.headers) request.headers['x-amz-content-sha256'] = 'UNSIGNED-PAYLOAD';
        return next(args);
      },
      { step: 'build', name: 'unsignedPayload' },
    );
  }

  async create(key: string, body: BlobBody): Promise<boolean> {
    return this.write(key, body, true);
  }

  async put(key: string, body: BlobBody): Promise<void> {
    await this.write(key, body, false);
  }

  async read(key: string, options: { range?: BlobRange; maxBytes?: number } = {}): Promise<Buffer | null> {
    const objectKey = this.objectKey(key);
    const { range, maxBytes } = options;
    if (range) checkRange(range);
    if (range?.length === 0) return (await this.stat(key)) ? Buffer.alloc(0) : null;
    return this.attempt(`read ${key}`, async () => {
      const response = await this.getObject(objectKey, range);
      if (response === 'absent') return null;
      if (response === 'past-end') return Buffer.alloc(0);
      const size = response.ContentLength ?? 0;
      if (maxBytes !== undefined && size > maxBytes) {
        destroyBody(response);
        throw new RangeError(`object ${key} is ${size} bytes, more than the ${maxBytes} it can be`);
      }
      const chunks: Buffer[] = [];
      for await (const chunk of response.Body as AsyncIterable<Buffer>) chunks.push(chunk);
      return Buffer.concat(chunks);
    });
  }

  async stream(key: string, options: { range?: BlobRange } = {}): Promise<Readable | null> {
    const objectKey = this.objectKey(key);
    const { range } = options;
    if (range) checkRange(range);
    if (range?.length === 0) return (await this.stat(key)) ? Readable.from([]) : null;
    const first = await this.attempt(`read ${key}`, () => this.getObject(objectKey, range));
    if (first === 'absent') return null;
    if (first === 'past-end') return Readable.from([]);
    return Readable.from(this.resumable(key, objectKey, first, range));
  }

  async stat(key: string): Promise<BlobInfo | null> {
    const objectKey = this.objectKey(key);
    return this.attempt(`stat ${key}`, async () => {
      try {
        const head = await this.client.send(new HeadObjectCommand({ Bucket: this.bucket, Key: objectKey }));
        return { key, size: head.ContentLength ?? 0, modifiedAt: head.LastModified ?? new Date(0) };
      } catch (err) {
        if (isNotFound(err)) return null;
        throw err;
      }
    });
  }

  async *listKeys(prefix: string): AsyncIterable<string> {
    for await (const { key } of this.list(prefix)) yield key;
  }

  async *list(prefix: string): AsyncIterable<BlobInfo> {
    const full = this.root + checkBlobPrefix(prefix);
    let token: string | undefined;
    do {
      const page = await this.attempt(`list ${prefix}`, () =>
        this.client.send(
          new ListObjectsV2Command({
            Bucket: this.bucket,
            Prefix: full,
            ...(token ? { ContinuationToken: token } : {}),
          }),
        ),
      );
      for (const object of page.Contents ?? []) {
        if (!object.Key?.startsWith(this.root)) continue;
        yield { key: object.Key.slice(this.root.length), size: object.Size ?? 0, modifiedAt: object.LastModified! };
      }
      token = page.IsTruncated ? page.NextContinuationToken : undefined;
    } while (token);
  }

  async delete(key: string): Promise<void> {
    const objectKey = this.objectKey(key);
    await this.attempt(`delete ${key}`, async () => {
      try {
        await this.client.send(new DeleteObjectCommand({ Bucket: this.bucket, Key: objectKey }));
      } catch (err) {
        if (!isNotFound(err)) throw err;
      }
    });
  }

  async now(): Promise<Date> {
    return this.attempt('read the clock', async () => {
      const command = new HeadBucketCommand({ Bucket: this.bucket });
      let date: string | undefined;
      command.middlewareStack.add(
        (next) => async (args) => {
          const result = await next(args);
          date = (result.response as { headers?: Record<string, string> }).headers?.date;
          return result;
        },
        { step: 'deserialize', name: 'serverDate' },
      );
      await this.client.send(command);
      const parsed = date ? new Date(date) : undefined;
      if (!parsed || Number.isNaN(parsed.getTime())) throw new Error(`${this.location} sent no Date header`);
      return parsed;
    });
  }

  /**
   * Aborts the multipart uploads under the prefix that a writer began and neither completed nor aborted — killed
   * mid-write: their parts are invisible but stored (and billed) until aborted. An upload counts as abandoned once it
   * was begun before `before` and none of its parts was uploaded since, both by the server's clock: a live writer
   * uploads a part every few seconds while it streams.
   */
  async removeAbandonedWrites(
    before: Date,
    options: { prefix?: string; dryRun?: boolean } = {},
  ): Promise<{ writes: number; bytes: number }> {
    const full = this.root + checkBlobPrefix(options.prefix ?? '');
    const found = { writes: 0, bytes: 0 };
    let keyMarker: string | undefined;
    let uploadIdMarker: string | undefined;
    do {
      const page = await this.attempt('list uploads', () =>
        this.client.send(
          new ListMultipartUploadsCommand({
            Bucket: this.bucket,
            Prefix: full,
            ...(keyMarker !== undefined ? { KeyMarker: keyMarker } : {}),
            ...(uploadIdMarker !== undefined ? { UploadIdMarker: uploadIdMarker } : {}),
          }),
        ),
      );
      for (const upload of page.Uploads ?? []) {
        const { Key: objectKey, UploadId: uploadId, Initiated: initiated } = upload;
        if (!objectKey?.startsWith(full) || !uploadId || !initiated || initiated >= before) continue;
        const parts = await this.uploadedParts(objectKey, uploadId);
        if (parts === null || parts.some((p) => p.modifiedAt >= before)) continue;
        found.writes++;
        found.bytes += parts.reduce((n, p) => n + p.size, 0);
        if (!options.dryRun) await this.abort(objectKey, uploadId);
      }
      keyMarker = page.IsTruncated ? page.NextKeyMarker : undefined;
      uploadIdMarker = page.IsTruncated ? page.NextUploadIdMarker : undefined;
    } while (keyMarker !== undefined);
    return found;
  }

  async close(): Promise<void> {
    this.client.destroy();
  }

  /** The parts an upload holds so far; null if the upload is gone (completed or aborted meanwhile). */
  private async acquireSlot(): Promise<void> {
    if (this.freeSlots > 0) {
      this.freeSlots--;
      return;
    }
    await new Promise<void>((resolve) => this.slotWaiters.push(resolve));
  }

  /** A slot freed goes to the upload that has waited longest, or back to the pool. */
  private releaseSlot(): void {
    const waiter = this.slotWaiters.shift();
    if (waiter) waiter();
    else this.freeSlots++;
  }

  private async uploadedParts(
    objectKey: string,
    uploadId: string,
  ): Promise<{ size: number; modifiedAt: Date }[] | null> {
    const parts: { size: number; modifiedAt: Date }[] = [];
    let marker: string | undefined;
    do {
      const page = await this.attempt('list the parts of an upload', async () => {
        try {
          return await this.client.send(
            new ListPartsCommand({
              Bucket: this.bucket,
              Key: objectKey,
              UploadId: uploadId,
              ...(marker !== undefined ? { PartNumberMarker: marker } : {}),
            }),
          );
        } catch (err) {
          if ((err as S3ErrorShape).name === 'NoSuchUpload' || statusOf(err) === 404) return null;
          throw err;
        }
      });
      if (page === null) return null;
      for (const part of page.Parts ?? [])
        parts.push({ size: part.Size ?? 0, modifiedAt: part.LastModified ?? new Date(0) });
      marker = page.IsTruncated ? page.NextPartNumberMarker : undefined;
    } while (marker !== undefined);
    return parts;
  }

  private objectKey(key: string): string {
    return this.root + checkBlobKey(key);
  }

  /** Runs `op`, retrying transient failures with backoff; past the bound, `StoreUnavailableError`. */
  private async attempt<T>(what: string, op: (attempt: number) => Promise<T>): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await op(attempt);
      } catch (err) {
        if (!isTransientS3Error(err)) throw err;
        if (attempt >= this.retry.attempts) {
          throw new StoreUnavailableError(
            `${this.location}: ${what} failed ${attempt} times: ${(err as Error).message || (err as Error).name}`,
            '',
            '',
            { cause: err },
          );
        }
        const cap = Math.min(this.retry.maxDelayMs, this.retry.baseDelayMs * 2 ** (attempt - 1));
        await sleep(Math.random() * cap);
      }
    }
  }

  /** One GET of the object or a range of it; 'past-end' for a range that starts at or after the object's end. */
  private async getObject(
    objectKey: string,
    range?: BlobRange,
    ifMatch?: string,
  ): Promise<GetObjectCommandOutput | 'absent' | 'past-end'> {
    try {
      return await this.client.send(
        new GetObjectCommand({
          Bucket: this.bucket,
          Key: objectKey,
          ...(range ? { Range: `bytes=${range.offset}-${range.offset + range.length - 1}` } : {}),
          ...(ifMatch ? { IfMatch: ifMatch } : {}),
        }),
      );
    } catch (err) {
      if (isNotFound(err)) return 'absent';
      if (statusOf(err) === 416 || (err as S3ErrorShape).name === 'InvalidRange') return 'past-end';
      throw err;
    }
  }

  /**
   * The body of `first`, picking up where it broke off after a dropped connection: the next GET asks for the rest,
   * pinned to the first answer's ETag so that an object replaced meanwhile fails instead of splicing two versions.
   */
  private async *resumable(
    key: string,
    objectKey: string,
    first: GetObjectCommandOutput,
    range: BlobRange | undefined,
  ): AsyncGenerator<Buffer> {
    const start = range?.offset ?? 0;
    const end = start + (first.ContentLength ?? 0);
    let offset = start;
    let response: GetObjectCommandOutput | undefined = first;
    for (let failures = 0; offset < end;) {
      try {
        response ??= await this.expectBody(key, objectKey, { offset, length: end - offset }, first.ETag);
        for await (const chunk of response.Body as AsyncIterable<Buffer>) {
          offset += chunk.length;
          yield chunk;
        }
        response = undefined;
        if (offset < end) throw Object.assign(new Error('premature close'), { code: 'ERR_STREAM_PREMATURE_CLOSE' });
      } catch (err) {
        if (response) destroyBody(response);
        response = undefined;
        if (!isTransientS3Error(err)) throw err;
        if (++failures >= this.retry.attempts) {
          const message = `${this.location}: read ${key} broke off at byte ${offset} ${failures} times`;
          throw new StoreUnavailableError(message, '', '', { cause: err });
        }
        const cap = Math.min(this.retry.maxDelayMs, this.retry.baseDelayMs * 2 ** (failures - 1));
        await sleep(Math.random() * cap);
      }
    }
  }

  private async expectBody(
    key: string,
    objectKey: string,
    range: BlobRange,
    etag: string | undefined,
  ): Promise<GetObjectCommandOutput> {
    try {
      const response = await this.getObject(objectKey, range, etag);
      if (typeof response !== 'string') return response;
    } catch (err) {
      if (!isPreconditionFailed(err)) throw err;
    }
    throw new Error(`object ${key} was replaced or removed while it was being read`);
  }

  private async write(key: string, body: BlobBody, exclusive: boolean): Promise<boolean> {
    const objectKey = this.objectKey(key);
    const token = exclusive ? randomUUID() : undefined;
    if (Buffer.isBuffer(body)) return this.putWhole(key, objectKey, body, token);
    const cut = await lookahead(partsOf(body, this.partBytes, this.spareParts));
    if (Buffer.isBuffer(cut)) return this.putWhole(key, objectKey, cut, token);
    return this.putMultipart(key, objectKey, cut, token);
  }

  private async putWhole(key: string, objectKey: string, bytes: Buffer, token: string | undefined): Promise<boolean> {
    let ambiguous = false;
    return this.attempt(`write ${key}`, async () => {
      try {
        await this.client.send(
          new PutObjectCommand({
            Bucket: this.bucket,
            Key: objectKey,
            Body: bytes,
            ContentLength: bytes.length,
            ...(token ? { IfNoneMatch: '*', Metadata: { [CREATE_TOKEN]: token } } : {}),
          }),
        );
        return true;
      } catch (err) {
        if (token && isPreconditionFailed(err)) return ambiguous ? this.isOwnWrite(objectKey, token) : false;
        ambiguous ||= isTransientS3Error(err);
        if (token && isConditionalConflict(err)) throw markTransient(err);
        throw err;
      }
    });
  }

  /**
   * A create that lost its answer (a dropped connection, a 5xx after the server had written) and is then refused:
   * the object may be this create's own, which its token says.
   */
  private async isOwnWrite(objectKey: string, token: string): Promise<boolean> {
    try {
      const head = await this.client.send(new HeadObjectCommand({ Bucket: this.bucket, Key: objectKey }));
      return head.Metadata?.[CREATE_TOKEN] === token;
    } catch (err) {
      if (isNotFound(err)) return false;
      throw err;
    }
  }

  private async putMultipart(
    key: string,
    objectKey: string,
    parts: AsyncGenerator<Buffer>,
    token: string | undefined,
  ): Promise<boolean> {
    const { UploadId: uploadId } = await this.attempt(`start an upload of ${key}`, () =>
      this.client.send(
        new CreateMultipartUploadCommand({
          Bucket: this.bucket,
          Key: objectKey,
          ...(token ? { Metadata: { [CREATE_TOKEN]: token } } : {}),
        }),
      ),
    );
    if (!uploadId) throw new Error(`${this.location}: the server started an upload of ${key} with no id`);
    const completed: { PartNumber: number; ETag: string }[] = [];
    const inFlight = new Set<Promise<void>>();
    let failure: { err: unknown } | undefined;
    const upload = (partNumber: number, bytes: Buffer) => {
      const done = this.attempt(`upload part ${partNumber} of ${key}`, () =>
        this.client.send(
          new UploadPartCommand({
            Bucket: this.bucket,
            Key: objectKey,
            UploadId: uploadId,
            PartNumber: partNumber,
            Body: bytes,
            ContentLength: bytes.length,
          }),
        ),
      ).then(
        ({ ETag }) => {
          completed.push({ PartNumber: partNumber, ETag: ETag! });
          // The request is over: a next part is cut into this one's buffer.
          if (bytes.length === this.partBytes && this.spareParts.length <= this.partConcurrency) {
            this.spareParts.push(bytes);
          }
        },
        (err: unknown) => void (failure ??= { err }),
      );
      const tracked = done.finally(() => {
        inFlight.delete(tracked);
        this.releaseSlot();
      });
      inFlight.add(tracked);
    };
    try {
      let partNumber = 0;
      // The next part is read while the window is full, so it is ready the moment a slot frees: at most
      // `partConcurrency` parts in flight across the backend, and one more filled per upload.
      for (;;) {
        const next = await parts.next();
        if (next.done) break;
        await this.acquireSlot();
        if (failure) {
          this.releaseSlot();
          break;
        }
        upload(++partNumber, next.value);
      }
      await Promise.all(inFlight);
      if (failure) throw failure.err;
      completed.sort((a, b) => a.PartNumber - b.PartNumber);
      return await this.complete(key, objectKey, uploadId, completed, token);
    } catch (err) {
      await Promise.allSettled(inFlight);
      await parts.return(undefined);
      await this.abort(objectKey, uploadId);
      throw err;
    }
  }

  private async complete(
    key: string,
    objectKey: string,
    uploadId: string,
    parts: { PartNumber: number; ETag: string }[],
    token: string | undefined,
  ): Promise<boolean> {
    let ambiguous = false;
    const created = await this.attempt(`complete the upload of ${key}`, async () => {
      try {
        await this.client.send(
          new CompleteMultipartUploadCommand({
            Bucket: this.bucket,
            Key: objectKey,
            UploadId: uploadId,
            MultipartUpload: { Parts: parts },
            ...(token ? { IfNoneMatch: '*' } : {}),
          }),
        );
        return true;
      } catch (err) {
        if (token && isPreconditionFailed(err)) return ambiguous ? this.isOwnWrite(objectKey, token) : false;
        // A retried completion of an upload the server had completed finds no upload: the token says whose it is.
        if (ambiguous && token && (err as S3ErrorShape).name === 'NoSuchUpload')
          return this.isOwnWrite(objectKey, token);
        ambiguous ||= isTransientS3Error(err);
        if (token && isConditionalConflict(err)) throw markTransient(err);
        throw err;
      }
    });
    // Refused: the parts are still stored under the upload until it is aborted.
    if (!created) await this.abort(objectKey, uploadId);
    return created;
  }

  /** Best effort: an upload left behind is invisible, and removeAbandonedWrites aborts it once it is old. */
  private async abort(objectKey: string, uploadId: string): Promise<void> {
    try {
      await this.attempt('abort an upload', () =>
        this.client.send(new AbortMultipartUploadCommand({ Bucket: this.bucket, Key: objectKey, UploadId: uploadId })),
      );
    } catch {
      // nothing more to do: the object was never visible
    }
  }
}

function checkRange(range: BlobRange): void {
  if (
    !Number.isSafeInteger(range.offset) ||
    range.offset < 0 ||
    !Number.isSafeInteger(range.length) ||
    range.length < 0
  )
    throw new RangeError(`invalid range ${JSON.stringify(range)}`);
}

function destroyBody(response: GetObjectCommandOutput): void {
  (response.Body as Readable | undefined)?.destroy?.();
}

/** A 409 from a conditional write is S3's "try again": the retry loop's classification, made explicit. */
function markTransient(err: unknown): unknown {
  return Object.assign(new Error('conditional write conflict', { cause: err }), { name: 'ServiceUnavailable' });
}

/**
 * The body whole if it fits in one part, else its parts. Only the generator holds the parts read ahead, and lets go
 * of each once it is uploaded: nothing keeps them for the rest of a long upload.
 */
async function lookahead(parts: AsyncGenerator<Buffer>): Promise<Buffer | AsyncGenerator<Buffer>> {
  const first = await parts.next();
  if (first.done) return Buffer.alloc(0);
  const second = await parts.next();
  if (second.done) return first.value;
  const held = [first.value, second.value];
  return (async function* () {
    try {
      while (held.length > 0) yield held.shift()!;
      yield* parts;
    } finally {
      await parts.return(undefined);
    }
  })();
}

/**
 * `body` re-cut into buffers of exactly `size` bytes (the last may be shorter), each copied once, into a buffer of
 * `spare` (parts whose upload is over) when there is one. Reused rather than left to the GC: a new buffer per part
 * left a streamed write's peak RSS about 60 MiB higher (bench/README.md, S3).
 */
async function* partsOf(body: AsyncIterable<Buffer>, size: number, spare: Buffer[]): AsyncGenerator<Buffer> {
  const next = () => spare.pop() ?? Buffer.allocUnsafe(size);
  let part = next();
  let filled = 0;
  for await (const chunk of body) {
    let from = 0;
    while (from < chunk.length) {
      const n = Math.min(size - filled, chunk.length - from);
      chunk.copy(part, filled, from, from + n);
      filled += n;
      from += n;
      if (filled === size) {
        yield part;
        part = next();
        filled = 0;
      }
    }
  }
  if (filled > 0) yield part.subarray(0, filled);
}

function regionOf(options: S3BlobBackendOptions): { region?: string } {
  if (options.region !== undefined) return { region: options.region };
  const fromEnv = process.env.AWS_REGION ?? process.env.AWS_DEFAULT_REGION;
  return options.endpoint !== undefined && !fromEnv ? { region: 'us-east-1' } : {};
}
