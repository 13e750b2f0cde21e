/**
 * What S3 costs the store, against the bare SDK on the same server. One versitygw server (the one the tests use); the
 * same bytes (an AES-CTR keystream from a fixed seed: incompressible, never repeating, the same in every process) are
 * moved several ways, each in a fresh process so that its peak RSS is its own:
 *
 * - the SDK's own multipart PUT (CreateMultipartUpload, UploadPart with the backend's part size and concurrency,
 *   CompleteMultipartUpload) and GetObject: the baseline every other row is a ratio of;
 * - the blob backend's streamed `put` and `stream` (`S3BlobBackend`);
 * - the engine: a full encrypted checkpoint through `ChunkedSnapshotStore` on an `S3BlobBackend` (chunked, deduplicated,
 *   compressed where it pays, sealed, packed), and its restore; then an incremental checkpoint after 1 % of the state
 *   changed, told as the memory and workspace runtimes tell it (changed bytes and unchanged runs) and as a plain stream
 *   (every byte read and chunked again);
 * - the same full checkpoint onto a file-system backend in tmpfs: the engine alone, without the network or the server.
 *
 * Throughput rows run three times in turns, each round on a fresh prefix (a second checkpoint of the same bytes would
 * be deduplicated away); the best of each counts (the machine is shared: the best run is the one least disturbed).
 * Then the peak RSS of a larger capture and restore (2 GiB; 512 MiB with `--quick`).
 *
 *   npx tsx bench/s3.ts            # 1 GiB, RSS at 2 GiB
 *   npx tsx bench/s3.ts --quick    # 256 MiB, RSS at 512 MiB, one round
 *
 * Nothing here asserts a time: it prints what it measured, with PASS/MISS beside each target.
 */
import { execFileSync } from 'node:child_process';
import { createCipheriv, createHash, randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { Readable, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { parseArgs } from 'node:util';
import {
  CompleteMultipartUploadCommand,
  CreateMultipartUploadCommand,
  GetObjectCommand,
  S3Client,
  UploadPartCommand,
} from '@aws-sdk/client-s3';
import {
  ChunkedSnapshotStore,
  DEFAULT_PART_BYTES,
  DEFAULT_PART_CONCURRENCY,
  Keyring,
  S3BlobBackend,
  type StateSource,
  type UnchangedRange,
} from '../src/snapshots';
import { startS3Server } from '../test/helpers/s3-server';
import { table } from './markdown';
import { cpuMs } from './scale/procfs';

const { values } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    rounds: { type: 'string' },
    'part-mib': { type: 'string' },
    'part-concurrency': { type: 'string' },
    job: { type: 'string' },
  },
  strict: true,
});

const MiB = 1024 * 1024;
const PIECE = MiB;
const STATE_SEED = 'state';

interface ServerRef {
  endpoint: string;
  region: string;
  bucket: string;
  credentials: { accessKeyId: string; secretAccessKey: string };
}

type Spec =
  | { phase: 'idle' }
  | { phase: 'sdk-put' | 'sdk-get' | 'backend-put' | 'backend-get'; bytes: number; key: string }
  | { phase: 'engine-put' | 'engine-get'; bytes: number; prefix: string }
  | { phase: 'engine-local-put' | 'engine-local-get'; bytes: number; dir: string }
  | {
      phase: 'engine-incremental';
      bytes: number;
      prefix: string;
      checkpointId: string;
      /** The seed of the changed bytes: each incremental run changes the same places to new bytes. */
      changeSeed: string;
      /** Changes told by the runtime (a StateSource), or a plain stream of every byte. */
      reported: boolean;
    };

interface Job {
  server: ServerRef;
  masterKey: string;
  /** Multipart uploads: the backend's and the SDK baseline's alike. */
  parts: { bytes: number; concurrency: number };
  spec: Spec;
}

interface PhaseResult {
  seconds: number;
  bytes: number;
  /** Bytes the phase added to the bucket (engine writes). */
  uploaded: number;
  peakRssMiB: number;
  /** CPU time of the phase's process (all its threads), and of the S3 server while the phase ran. */
  cpuSeconds: number;
  serverCpuSeconds: number;
}

/**
 * What the keystream encrypts: one buffer for every call, since an incremental checkpoint reads the edges of each
 * change (hundreds of small ranges) and a MiB zeroed per range cost the bench more than the engine's own work.
 */
const ZEROS = Buffer.alloc(PIECE + 16);

/** Bytes `[from, to)` of the keystream of `seed`, in pieces of at most 1 MiB; any offset, at the cost of the bytes. */
function* keystream(seed: string, from: number, to: number): Generator<Buffer> {
  const key = createHash('sha256').update(seed).digest();
  const iv = Buffer.alloc(16);
  iv.writeBigUInt64BE(BigInt(Math.floor(from / 16)), 8);
  const cipher = createCipheriv('aes-256-ctr', key, iv);
  let skip = from % 16;
  for (let at = from; at < to;) {
    const n = Math.min(PIECE, to - at);
    const piece = cipher.update(ZEROS.subarray(0, n + skip)).subarray(skip);
    skip = 0;
    at += n;
    yield piece;
  }
}

/** 1 % of the state, in one place per 4 MiB (as bench/engine.ts changes it). */
function changesOf(bytes: number): [number, number][] {
  const places = Math.max(1, Math.round(bytes / (4 * MiB)));
  const span = Math.floor((bytes * 0.01) / places);
  return Array.from({ length: places }, (_, i) => [Math.floor(((i + 0.5) / places) * bytes), span]);
}

/** The state with its changed places, as a runtime that knows what it wrote tells it (the memory runtime does). */
function changedSource(bytes: number, changeSeed: string): StateSource {
  const unchanged = (from: number, to: number): UnchangedRange => ({
    baseOffset: from,
    length: to - from,
    read: (start, end) => Readable.from(keystream(STATE_SEED, from + start, from + end)),
  });
  async function* pieces(): AsyncGenerator<Uint8Array | UnchangedRange> {
    let at = 0;
    for (const [offset, length] of changesOf(bytes)) {
      if (offset > at) yield unchanged(at, offset);
      yield* keystream(changeSeed, offset, offset + length);
      at = offset + length;
    }
    if (at < bytes) yield unchanged(at, bytes);
  }
  return { base: 'cp-1', pieces: pieces(), close: () => undefined };
}

/** The same state as plain bytes: every byte read and chunked again. */
function* changedBytes(bytes: number, changeSeed: string): Generator<Buffer> {
  let at = 0;
  for (const [offset, length] of changesOf(bytes)) {
    yield* keystream(STATE_SEED, at, offset);
    yield* keystream(changeSeed, offset, offset + length);
    at = offset + length;
  }
  yield* keystream(STATE_SEED, at, bytes);
}

async function sdkPut(
  client: S3Client,
  ref: ServerRef,
  key: string,
  total: number,
  { bytes: partBytes, concurrency }: Job['parts'],
): Promise<void> {
  const { UploadId } = await client.send(new CreateMultipartUploadCommand({ Bucket: ref.bucket, Key: key }));
  const parts: { PartNumber: number; ETag: string }[] = [];
  const inFlight = new Set<Promise<void>>();
  let part = Buffer.allocUnsafe(partBytes);
  let filled = 0;
  let number = 0;
  const send = async (bytes: Buffer) => {
    while (inFlight.size >= concurrency) await Promise.race(inFlight);
    const PartNumber = ++number;
    const p = client
      .send(new UploadPartCommand({ Bucket: ref.bucket, Key: key, UploadId, PartNumber, Body: bytes }))
      .then(({ ETag }) => void parts.push({ PartNumber, ETag: ETag! }));
    const tracked = p.finally(() => inFlight.delete(tracked));
    inFlight.add(tracked);
  };
  for (const chunk of keystream(STATE_SEED, 0, total)) {
    for (let from = 0; from < chunk.length;) {
      const n = Math.min(partBytes - filled, chunk.length - from);
      chunk.copy(part, filled, from, from + n);
      filled += n;
      from += n;
      if (filled === partBytes) {
        await send(part);
        part = Buffer.allocUnsafe(partBytes);
        filled = 0;
      }
    }
  }
  if (filled > 0) await send(part.subarray(0, filled));
  await Promise.all(inFlight);
  parts.sort((a, b) => a.PartNumber - b.PartNumber);
  await client.send(
    new CompleteMultipartUploadCommand({ Bucket: ref.bucket, Key: key, UploadId, MultipartUpload: { Parts: parts } }),
  );
}

const checkpoint = (checkpointId: string, parentId: string | null) => ({
  checkpointId,
  sessionId: 'bench',
  sequence: parentId ? 2 : 1,
  parentId,
  runtime: { kind: 'memory', version: '1' },
  trigger: 'manual' as const,
});

const sink = () => new Writable({ write: (_chunk, _encoding, done) => done() });

async function storedBytes(backend: S3BlobBackend): Promise<number> {
  let total = 0;
  for await (const info of backend.list('')) total += info.size;
  return total;
}

/** One phase, in this process (a child of the main run): what it did, how long it took, its peak RSS. */
async function runPhase({ server: ref, masterKey, parts, spec }: Job): Promise<Omit<PhaseResult, 'serverCpuSeconds'>> {
  const keyring = new Keyring([{ id: 'bench', key: Buffer.from(masterKey, 'hex') }]);
  const backend = new S3BlobBackend({
    ...ref,
    forcePathStyle: true,
    partBytes: parts.bytes,
    partConcurrency: parts.concurrency,
    ...('prefix' in spec ? { prefix: spec.prefix } : {}),
  });
  // The SDK as the backend configures it for checksums and payload signing (the engine authenticates its objects
  // itself), otherwise its defaults: the comparison is of what runs around the requests, not of the work per byte.
  const client = new S3Client({
    ...ref,
    forcePathStyle: true,
    requestChecksumCalculation: 'WHEN_REQUIRED',
    responseChecksumValidation: 'WHEN_REQUIRED',
  });
  client.middlewareStack.add(
    (next) => async (args) => {
      const request = args.request as { method?: string; headers?: Record<string, string> };
      if (request.method === 'PUT' && request.headers) request.headers['x-amz-content-sha256'] = 'UNSIGNED-PAYLOAD';
      return next(args);
    },
    { step: 'build', name: 'unsignedPayload' },
  );
  const store = new ChunkedSnapshotStore({ backend, keyring });
  const writes = spec.phase === 'engine-put' || spec.phase === 'engine-incremental';
  const before = writes ? await storedBytes(backend) : 0;
  const started = process.hrtime.bigint();
  const cpu = process.cpuUsage();
  let bytes = 0;
  switch (spec.phase) {
    case 'idle':
      break;
    case 'sdk-put':
      await sdkPut(client, ref, spec.key, spec.bytes, parts);
      bytes = spec.bytes;
      break;
    case 'backend-put':
      await backend.put(spec.key, Readable.from(keystream(STATE_SEED, 0, spec.bytes)));
      bytes = spec.bytes;
      break;
    case 'engine-put':
      await store.write(checkpoint('cp-1', null), Readable.from(keystream(STATE_SEED, 0, spec.bytes)));
      bytes = spec.bytes;
      break;
    case 'engine-local-put': {
      const local = new ChunkedSnapshotStore({ rootDir: spec.dir, keyring });
      await local.write(checkpoint('cp-1', null), Readable.from(keystream(STATE_SEED, 0, spec.bytes)));
      bytes = spec.bytes;
      break;
    }
    case 'engine-local-get': {
      const { stream } = await new ChunkedSnapshotStore({ rootDir: spec.dir, keyring }).open('bench', 'cp-1');
      stream.on('data', (chunk: Buffer) => (bytes += chunk.length));
      await pipeline(stream, sink());
      break;
    }
    case 'engine-incremental': {
      const { checkpointId, changeSeed } = spec;
      const data = spec.reported
        ? changedSource(spec.bytes, changeSeed)
        : Readable.from(changedBytes(spec.bytes, changeSeed));
      await store.write(checkpoint(checkpointId, 'cp-1'), data);
      bytes = spec.bytes;
      break;
    }
    case 'sdk-get': {
      const { Body } = await client.send(new GetObjectCommand({ Bucket: ref.bucket, Key: spec.key }));
      for await (const chunk of Body as AsyncIterable<Buffer>) bytes += chunk.length;
      break;
    }
    case 'backend-get':
      for await (const chunk of (await backend.stream(spec.key))!) bytes += (chunk as Buffer).length;
      break;
    case 'engine-get': {
      const { stream } = await store.open('bench', 'cp-1');
      stream.on('data', (chunk: Buffer) => (bytes += chunk.length));
      await pipeline(stream, sink());
      break;
    }
  }
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  const { user, system } = process.cpuUsage(cpu);
  const uploaded = writes ? (await storedBytes(backend)) - before : 0;
  await backend.close();
  client.destroy();
  return {
    seconds,
    bytes,
    uploaded,
    peakRssMiB: process.resourceUsage().maxRSS / 1024,
    cpuSeconds: (user + system) / 1e6,
  };
}

/** The server's process (versitygw listening on the endpoint's port), for its CPU time. */
function serverPid(endpoint: string): number {
  const listen = `127.0.0.1:${new URL(endpoint).port}`;
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const argv = fs.readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0');
      if (path.basename(argv[0] ?? '') === 'versitygw' && argv.includes(listen)) return Number(entry);
    } catch {
      // gone meanwhile
    }
  }
  throw new Error(`no versitygw process listens on ${listen}`);
}

function inChild(job: Job, server: number): PhaseResult {
  // The server writes to a disk: the last phase's dirty pages are flushed now, not during this one.
  execFileSync('sync');
  const serverBefore = cpuMs(server);
  // (--no-warnings: the SDK's notice about future Node versions, once per process, is noise here.)
  const out = execFileSync(
    process.execPath,
    ['--no-warnings', '--import', 'tsx', __filename, '--job', JSON.stringify(job)],
    { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] },
  );
  const result = {
    ...(JSON.parse(out.trim().split('\n').pop()!) as Omit<PhaseResult, 'serverCpuSeconds'>),
    serverCpuSeconds: (cpuMs(server) - serverBefore) / 1000,
  };
  const expected = 'bytes' in job.spec ? job.spec.bytes : 0;
  if (result.bytes !== expected) throw new Error(`${job.spec.phase} moved ${result.bytes} bytes, not ${expected}`);
  return result;
}

const mibs = (r: PhaseResult) => r.bytes / MiB / r.seconds;
const verdict = (ok: boolean) => (ok ? 'PASS' : '**MISS**');

async function main(): Promise<void> {
  const total = (values.quick ? 256 : 1024) * MiB;
  const rssBytes = (values.quick ? 512 : 2048) * MiB;
  const rounds = Number(values.rounds ?? (values.quick ? 1 : 3));
  const server = await startS3Server({ bucket: 'ds-bench' });
  const localDir = fs.mkdtempSync(path.join(fs.existsSync('/dev/shm') ? '/dev/shm' : os.tmpdir(), 'ds-s3-bench-'));
  try {
    const ref: ServerRef = {
      endpoint: server.endpoint,
      region: server.region,
      bucket: server.bucket,
      credentials: server.credentials,
    };
    const masterKey = randomBytes(32).toString('hex');
    const parts = {
      bytes: Number(values['part-mib'] ?? DEFAULT_PART_BYTES / MiB) * MiB,
      concurrency: Number(values['part-concurrency'] ?? DEFAULT_PART_CONCURRENCY),
    };
    const pid = serverPid(server.endpoint);
    const run = (spec: Spec) => inChild({ server: ref, masterKey, parts, spec }, pid);
    const best = new Map<string, PhaseResult>();
    const keep = (name: string, result: PhaseResult) => {
      const held = best.get(name);
      if (!held || result.seconds < held.seconds) best.set(name, result);
    };
    // A child that loads the same code and moves nothing: the floor under every peak below.
    const idle = run({ phase: 'idle' });
    for (let round = 0; round < rounds; round++) {
      const prefix = `engine-${round}`;
      // Every other round in the reverse order, so that no row always runs first (on a server still settling).
      const turns = <T>(list: T[]) => (round % 2 === 0 ? list : [...list].reverse());
      for (const spec of turns<Spec>([
        { phase: 'sdk-put', bytes: total, key: 'bench/sdk' },
        { phase: 'backend-put', bytes: total, key: 'bench/backend' },
        { phase: 'engine-put', bytes: total, prefix },
      ])) {
        keep(spec.phase, run(spec));
      }
      for (const spec of turns<Spec>([
        { phase: 'sdk-get', bytes: total, key: 'bench/sdk' },
        { phase: 'backend-get', bytes: total, key: 'bench/backend' },
        { phase: 'engine-get', bytes: total, prefix },
      ])) {
        keep(spec.phase, run(spec));
      }
      const incremental = (n: number, reported: boolean) =>
        run({
          phase: 'engine-incremental',
          bytes: total,
          prefix,
          checkpointId: `cp-${n}`,
          changeSeed: `change-${n}`,
          reported,
        });
      keep('incremental-reported', incremental(2, true));
      keep('incremental-stream', incremental(3, false));
      const dir = path.join(localDir, 'store');
      fs.rmSync(dir, { recursive: true, force: true });
      keep('engine-local-put', run({ phase: 'engine-local-put', bytes: total, dir }));
      keep('engine-local-get', run({ phase: 'engine-local-get', bytes: total, dir }));
    }
    fs.rmSync(path.join(localDir, 'store'), { recursive: true, force: true });
    const rssPut = run({ phase: 'engine-put', bytes: rssBytes, prefix: 'rss' });
    const rssGet = run({ phase: 'engine-get', bytes: rssBytes, prefix: 'rss' });

    const get = (name: string) => best.get(name)!;
    const sdkPut = get('sdk-put');
    const sdkGet = get('sdk-get');
    const ratioRow = (what: string, sdk: PhaseResult, ours: PhaseResult) => {
      const ratio = mibs(ours) / mibs(sdk);
      return [
        what,
        mibs(sdk).toFixed(0),
        mibs(ours).toFixed(0),
        `${ratio.toFixed(2)}×`,
        verdict(ratio >= 0.8),
        sdk.peakRssMiB.toFixed(0),
        ours.peakRssMiB.toFixed(0),
      ];
    };
    const size = `${total / MiB} MiB`;
    console.log(
      `\nS3 on versitygw: ${size} of incompressible state, parts of ${parts.bytes / MiB} MiB, ` +
        `${parts.concurrency} in flight, best of ${rounds}; an idle process peaks at ` +
        `${idle.peakRssMiB.toFixed(0)} MiB RSS; load average ${os
          .loadavg()
          .map((l) => l.toFixed(1))
          .join(' ')}\n`,
    );
    console.log(
      table(
        [size, 'SDK (MiB/s)', 'ours (MiB/s)', 'ratio', '≥ 0.8', 'SDK peak RSS (MiB)', 'our peak RSS (MiB)'],
        [
          ratioRow('backend: streamed write', sdkPut, get('backend-put')),
          ratioRow('backend: streamed read', sdkGet, get('backend-get')),
          ratioRow('engine: full encrypted checkpoint', sdkPut, get('engine-put')),
          ratioRow('engine: restore', sdkGet, get('engine-get')),
        ],
      ),
    );
    const full = get('engine-put');
    const incrementalRow = (what: string, r: PhaseResult) => {
      const bytesShare = r.uploaded / full.uploaded;
      const timeShare = r.seconds / full.seconds;
      return [
        what,
        `${(r.uploaded / MiB).toFixed(1)} MiB (${(bytesShare * 100).toFixed(2)} %)`,
        `${r.seconds.toFixed(2)} s (${(timeShare * 100).toFixed(1)} %)`,
        verdict(bytesShare <= 0.03 && timeShare <= 0.1),
        r.peakRssMiB.toFixed(0),
      ];
    };
    console.log(
      `\n${table(
        [
          `incremental, 1 % of ${size} changed in ${changesOf(total).length} places`,
          `uploaded (of the full one's ${(full.uploaded / MiB).toFixed(0)} MiB)`,
          `time (of the full one's ${full.seconds.toFixed(2)} s)`,
          '≤ 3 % bytes, ≤ 10 % time',
          'peak RSS (MiB)',
        ],
        [
          incrementalRow('changes told by the runtime', get('incremental-reported')),
          incrementalRow('a plain stream (every byte chunked again)', get('incremental-stream')),
        ],
      )}`,
    );
    // Where the time goes: on 2 cores the engine's work per byte and the server's compete for the same CPU.
    const cpuRow = (what: string, r: PhaseResult) => [
      what,
      `${r.seconds.toFixed(2)} s`,
      `${mibs(r).toFixed(0)}`,
      `${r.cpuSeconds.toFixed(2)} s`,
      `${r.serverCpuSeconds.toFixed(2)} s`,
      `${((r.cpuSeconds + r.serverCpuSeconds) / r.seconds).toFixed(2)}`,
    ];
    console.log(
      `\n${table(
        [`${size}, best run`, 'wall', 'MiB/s', 'CPU of the process', 'CPU of the server', 'cores busy'],
        [
          cpuRow('SDK multipart PUT', sdkPut),
          cpuRow('engine: full checkpoint on S3', full),
          cpuRow('engine: full checkpoint on tmpfs (no server)', get('engine-local-put')),
          cpuRow('SDK GET', sdkGet),
          cpuRow('engine: restore from S3', get('engine-get')),
          cpuRow('engine: restore from tmpfs (no server)', get('engine-local-get')),
        ],
      )}`,
    );
    const rssRow = (what: string, r: PhaseResult) => [
      what,
      `${mibs(r).toFixed(0)} MiB/s`,
      r.peakRssMiB.toFixed(0),
      verdict(r.peakRssMiB < 256),
    ];
    console.log(
      `\n${table(
        [`${rssBytes / MiB} MiB on S3`, 'throughput', 'peak RSS (MiB)', '< 256 MiB'],
        [rssRow('capture (full encrypted checkpoint)', rssPut), rssRow('restore', rssGet)],
      )}`,
    );
  } finally {
    fs.rmSync(localDir, { recursive: true, force: true });
    await server.stop();
  }
}

if (values.job) {
  runPhase(JSON.parse(values.job) as Job).then(
    (result) => {
      console.log(JSON.stringify(result));
      // The chunk pool's threads would keep the process alive.
      process.exit(0);
    },
    (err: unknown) => {
      console.error(err);
      process.exit(1);
    },
  );
} else {
  main().catch((err: unknown) => {
    console.error(err);
    process.exitCode = 1;
  });
}
