/**
 * What the S3 blob backend costs against the bare SDK. One versitygw server (the one the tests use); the same bytes are
 * written and read four ways, each in a fresh process so that its peak RSS is its own: the backend's streamed `put`
 * and `stream`, and the SDK's own multipart PUT (CreateMultipartUpload, UploadPart with the same part size and
 * concurrency, CompleteMultipartUpload) and GetObject. Each is run three times, in turns; the best of each counts
 * (the machine is shared: the best run is the one least disturbed).
 *
 *   npx tsx bench/s3.ts            # 1 GiB
 *   npx tsx bench/s3.ts --quick    # 256 MiB
 *
 * PASS when the backend reaches 0.8 of the SDK's throughput. Nothing here asserts a time: it prints what it measured.
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { parseArgs } from 'node:util';
import {
  CompleteMultipartUploadCommand,
  CreateMultipartUploadCommand,
  GetObjectCommand,
  S3Client,
  UploadPartCommand,
} from '@aws-sdk/client-s3';
import { DEFAULT_PART_BYTES, DEFAULT_PART_CONCURRENCY, S3BlobBackend } from '../src/snapshots';
import { startS3Server } from '../test/helpers/s3-server';
import { table } from './markdown';

const { values } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    phase: { type: 'string' },
    server: { type: 'string' },
    bytes: { type: 'string' },
  },
  strict: true,
});

const MiB = 1024 * 1024;
const ROUNDS = 3;
type Phase = 'backend-put' | 'sdk-put' | 'backend-get' | 'sdk-get' | 'idle';

interface ServerRef {
  endpoint: string;
  region: string;
  bucket: string;
  credentials: { accessKeyId: string; secretAccessKey: string };
}
interface PhaseResult {
  seconds: number;
  bytes: number;
  peakRssMiB: number;
}

/** `total` bytes as 1 MiB chunks cut from a 16 MiB random pool: nothing near the object's size is ever held. */
async function* source(total: number): AsyncIterable<Buffer> {
  const pool = randomBytes(16 * MiB);
  for (let sent = 0; sent < total;) {
    const n = Math.min(MiB, total - sent);
    const at = sent % pool.length;
    yield pool.subarray(at, Math.min(at + n, pool.length));
    sent += Math.min(n, pool.length - at);
  }
}

async function sdkPut(client: S3Client, ref: ServerRef, key: string, total: number): Promise<void> {
  const { UploadId } = await client.send(new CreateMultipartUploadCommand({ Bucket: ref.bucket, Key: key }));
  const parts: { PartNumber: number; ETag: string }[] = [];
  const inFlight = new Set<Promise<void>>();
  let part = Buffer.allocUnsafe(DEFAULT_PART_BYTES);
  let filled = 0;
  let number = 0;
  const send = async (bytes: Buffer) => {
    while (inFlight.size >= DEFAULT_PART_CONCURRENCY) await Promise.race(inFlight);
    const PartNumber = ++number;
    const p = client
      .send(new UploadPartCommand({ Bucket: ref.bucket, Key: key, UploadId, PartNumber, Body: bytes }))
      .then(({ ETag }) => void parts.push({ PartNumber, ETag: ETag! }));
    const tracked = p.finally(() => inFlight.delete(tracked));
    inFlight.add(tracked);
  };
  for await (const chunk of source(total)) {
    for (let from = 0; from < chunk.length;) {
      const n = Math.min(DEFAULT_PART_BYTES - filled, chunk.length - from);
      chunk.copy(part, filled, from, from + n);
      filled += n;
      from += n;
      if (filled === DEFAULT_PART_BYTES) {
        await send(part);
        part = Buffer.allocUnsafe(DEFAULT_PART_BYTES);
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

/** One phase, in this process (a child of the main run): what it did, how long it took, its peak RSS. */
async function runPhase(phase: Phase, ref: ServerRef, total: number): Promise<PhaseResult> {
  const backend = new S3BlobBackend({ ...ref, forcePathStyle: true });
  // The SDK as the backend configures it for checksums (the engine authenticates its objects itself), otherwise its
  // defaults: the comparison is of the streaming around the requests, not of the work per byte.
  const client = new S3Client({
    ...ref,
    forcePathStyle: true,
    requestChecksumCalculation: 'WHEN_REQUIRED',
    responseChecksumValidation: 'WHEN_REQUIRED',
  });
  const started = process.hrtime.bigint();
  let bytes = 0;
  switch (phase) {
    case 'backend-put':
      await backend.put('bench/backend', source(total));
      bytes = total;
      break;
    case 'sdk-put':
      await sdkPut(client, ref, 'bench/sdk', total);
      bytes = total;
      break;
    case 'backend-get':
      for await (const chunk of (await backend.stream('bench/backend'))!) bytes += (chunk as Buffer).length;
      break;
    case 'idle':
      bytes = total;
      break;
    case 'sdk-get': {
      const { Body } = await client.send(new GetObjectCommand({ Bucket: ref.bucket, Key: 'bench/sdk' }));
      for await (const chunk of Body as AsyncIterable<Buffer>) bytes += chunk.length;
      break;
    }
  }
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  await backend.close();
  client.destroy();
  return { seconds, bytes, peakRssMiB: process.resourceUsage().maxRSS / 1024 };
}

function inChild(phase: Phase, ref: ServerRef, total: number): PhaseResult {
  const out = execFileSync(
    process.execPath,
    ['--import', 'tsx', __filename, '--phase', phase, '--server', JSON.stringify(ref), '--bytes', String(total)],
    { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] },
  );
  const result = JSON.parse(out.trim().split('\n').pop()!) as PhaseResult;
  if (result.bytes !== total) throw new Error(`${phase} moved ${result.bytes} bytes, not ${total}`);
  return result;
}

async function main(): Promise<void> {
  const total = (values.quick ? 256 : 1024) * MiB;
  const server = await startS3Server({ bucket: 'ds-bench' });
  try {
    const ref: ServerRef = {
      endpoint: server.endpoint,
      region: server.region,
      bucket: server.bucket,
      credentials: server.credentials,
    };
    const best: Record<Exclude<Phase, 'idle'>, PhaseResult | undefined> = {
      'sdk-put': undefined,
      'backend-put': undefined,
      'sdk-get': undefined,
      'backend-get': undefined,
    };
    // A child that loads the same code and moves nothing: the floor under every peak below.
    const idle = inChild('idle', ref, total);
    for (let round = 0; round < ROUNDS; round++) {
      for (const phase of Object.keys(best) as (keyof typeof best)[]) {
        const result = inChild(phase, ref, total);
        if (!best[phase] || result.seconds < best[phase].seconds) best[phase] = result;
      }
    }
    const mibs = (r: PhaseResult) => r.bytes / MiB / r.seconds;
    const row = (what: string, sdk: PhaseResult, ours: PhaseResult) => {
      const ratio = mibs(ours) / mibs(sdk);
      return [
        what,
        mibs(sdk).toFixed(0),
        mibs(ours).toFixed(0),
        `${ratio.toFixed(2)}×`,
        ratio >= 0.8 ? 'PASS' : 'MISS',
        sdk.peakRssMiB.toFixed(0),
        ours.peakRssMiB.toFixed(0),
      ];
    };
    console.log(
      `S3 backend against the SDK's own multipart PUT and GET: ${total / MiB} MiB on versitygw, ` +
        `parts of ${DEFAULT_PART_BYTES / MiB} MiB, ${DEFAULT_PART_CONCURRENCY} in flight, best of ${ROUNDS}; ` +
        `an idle process peaks at ${idle.peakRssMiB.toFixed(0)} MiB RSS`,
    );
    console.log(
      table(
        ['', 'SDK (MiB/s)', 'backend (MiB/s)', 'ratio', '≥ 0.8', 'SDK peak RSS (MiB)', 'backend peak RSS (MiB)'],
        [
          row('streamed write', best['sdk-put']!, best['backend-put']!),
          row('streamed read', best['sdk-get']!, best['backend-get']!),
        ],
      ),
    );
  } finally {
    await server.stop();
  }
}

if (values.phase) {
  runPhase(values.phase as Phase, JSON.parse(values.server!) as ServerRef, Number(values.bytes))
    .then((result) => console.log(JSON.stringify(result)))
    .catch((err: unknown) => {
      console.error(err);
      process.exit(1);
    });
} else {
  main().catch((err: unknown) => {
    console.error(err);
    process.exitCode = 1;
  });
}
