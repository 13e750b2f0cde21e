/**
 * Chunker benchmark: what DEFAULT_CHUNKER in src/snapshots/engine/chunker.ts is chosen from.
 *
 *   npx tsx bench/chunker.ts                 # 256 MiB of random data, best of 5 passes
 *   npx tsx bench/chunker.ts --mb 64 --runs 3
 *
 * For scale, on the same buffer: a plain `for` loop summing the bytes (about the fastest a JavaScript loop touches
 * memory) and SHA-256 (node:crypto), which the engine runs over every chunk anyway. Then, for each candidate option
 * set: the chunk count and mean chunk size, the manifest entries per GiB of state, chunking throughput (in memory,
 * and streamed in 64 KiB pieces as fs.createReadStream reads by default, or 1 MiB pieces: chunks that span pieces
 * are copied into a fresh Buffer, chunks inside one are not), chunking + SHA-256 of every chunk, and the bytes an
 * incremental checkpoint writes after 1% of the state changed in 20 scattered places (for a 16 MiB and a full-size
 * state: the cost is about one chunk per place, so it depends on how dense the places are).
 *
 * Throughput is the best of `--runs` passes (the machine may be shared); nothing here asserts on time.
 */
import { createHash, randomFillSync } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { Chunker, DEFAULT_CHUNKER, type ChunkerOptions } from '../src/snapshots/engine/chunker';

const KiB = 1024;
const MiB = 1024 * KiB;
const CANDIDATES: ChunkerOptions[] = [
  { minSize: 1 * KiB, avgSize: 4 * KiB, maxSize: 16 * KiB },
  { minSize: 4 * KiB, avgSize: 16 * KiB, maxSize: 64 * KiB },
  { minSize: 16 * KiB, avgSize: 64 * KiB, maxSize: 256 * KiB },
  { minSize: 64 * KiB, avgSize: 256 * KiB, maxSize: 1 * MiB },
];
const CHANGED_FRACTION = 0.01;
const CHANGED_PLACES = 20;
/** The 16 MiB case varies a lot with where the places fall (one chunk each): mean of this many 16 MiB states. */
const DENSE_TRIALS = 5;

const { values: args } = parseArgs({
  options: { mb: { type: 'string', default: '256' }, runs: { type: 'string', default: '5' } },
});
const size = Number(args.mb) * MiB;
const runs = Number(args.runs);

/** Best throughput in MB/s (10^6 bytes) of `fn` over `bytes` bytes. */
function best(bytes: number, fn: () => void): number {
  let fastest = Infinity;
  for (let i = 0; i < runs; i++) {
    const start = performance.now();
    fn();
    fastest = Math.min(fastest, performance.now() - start);
  }
  return bytes / 1e6 / (fastest / 1000);
}

async function bestAsync(bytes: number, fn: () => Promise<void>): Promise<number> {
  let fastest = Infinity;
  for (let i = 0; i < runs; i++) {
    const start = performance.now();
    await fn();
    fastest = Math.min(fastest, performance.now() - start);
  }
  return bytes / 1e6 / (fastest / 1000);
}

async function* pieces(data: Buffer, size: number): AsyncGenerator<Buffer> {
  for (let at = 0; at < data.length; at += size) yield data.subarray(at, at + size);
}

function splitPass(chunker: Chunker, data: Buffer): number {
  let n = 0;
  for (const chunk of chunker.split(data)) n ^= chunk.length;
  return n;
}

async function streamPass(chunker: Chunker, data: Buffer, pieceSize: number): Promise<number> {
  let n = 0;
  for await (const chunk of chunker.chunks(pieces(data, pieceSize))) n ^= chunk.length;
  return n;
}

function hashPass(chunker: Chunker, data: Buffer): number {
  let n = 0;
  for (const chunk of chunker.split(data)) n ^= createHash('sha256').update(chunk).digest()[0]!;
  return n;
}

/** The baseline: the simplest loop that reads every byte. */
function sumBytes(data: Uint8Array): number {
  let sum = 0;
  for (let i = 0; i < data.length; i++) sum = (sum + data[i]!) | 0;
  return sum;
}

function digest(chunk: Buffer): string {
  return createHash('sha256').update(chunk).digest('base64');
}

/**
 * Overwrites CHANGED_FRACTION of a copy of `state` in CHANGED_PLACES places (one at a random offset in each
 * 1/CHANGED_PLACES of it) and returns the share of the new state's bytes that lie in chunks the old state lacks.
 */
function writtenAfterScatteredChange(chunker: Chunker, state: Buffer, seed: number): number {
  const known = new Set<string>();
  for (const chunk of chunker.split(state)) known.add(digest(chunk));
  const changed = Buffer.from(state);
  const stretch = Math.floor(state.length / CHANGED_PLACES);
  const run = Math.floor((state.length * CHANGED_FRACTION) / CHANGED_PLACES);
  let x = seed;
  for (let place = 0; place < CHANGED_PLACES; place++) {
    x = (Math.imul(x, 1103515245) + 12345) >>> 0;
    randomFillSync(changed, place * stretch + (x % (stretch - run)), run);
  }
  let written = 0;
  for (const chunk of chunker.split(changed)) if (!known.has(digest(chunk))) written += chunk.length;
  return written / state.length;
}

function pad(cells: (string | number)[], widths: number[]): string {
  return cells.map((c, i) => String(c).padStart(widths[i]!)).join('  ');
}

async function main(): Promise<void> {
  const data = randomFillSync(Buffer.allocUnsafe(size));
  const states = size >= DENSE_TRIALS * 16 * MiB ? data : randomFillSync(Buffer.allocUnsafe(DENSE_TRIALS * 16 * MiB));
  console.log(`chunker bench: ${size / MiB} MiB random data, best of ${runs} passes, node ${process.version}\n`);

  let sink = 0;
  const sumRate = best(size, () => {
    sink ^= sumBytes(data);
  });
  const shaRate = best(size, () => {
    sink ^= createHash('sha256').update(data).digest()[0]!;
  });
  console.log(`baseline  for-loop byte sum   ${sumRate.toFixed(0).padStart(6)} MB/s`);
  console.log(`baseline  SHA-256 (one pass)  ${shaRate.toFixed(0).padStart(6)} MB/s\n`);

  const columns: [string, string][] = [
    ['min/avg/max', 'KiB'],
    ['chunks', ''],
    ['mean size', 'bytes'],
    ['chunks/GiB', ''],
    ['split', 'MB/s'],
    ['stream 64K', 'MB/s'],
    ['stream 1M', 'MB/s'],
    ['+SHA-256', 'MB/s'],
    ['1% of 16MiB', 'written*'],
    [`1% of ${size / MiB}MiB`, 'written'],
  ];
  const widths = columns.map(([title]) => Math.max(title.length, 9));
  console.log(
    pad(
      columns.map(([title]) => title),
      widths,
    ),
  );
  console.log(
    pad(
      columns.map(([, unit]) => unit),
      widths,
    ),
  );
  // Warm up every code path with every option set first: otherwise whichever set runs first is measured with
  // code V8 optimized for less varied feedback (consistently ~40% slower here, whatever the set).
  for (const options of CANDIDATES) {
    const chunker = new Chunker(options);
    sink ^= splitPass(chunker, data) ^ hashPass(chunker, data);
    sink ^= (await streamPass(chunker, data, 64 * KiB)) ^ (await streamPass(chunker, data, MiB));
  }
  for (const options of CANDIDATES) {
    const chunker = new Chunker(options);
    const count = [...chunker.split(data)].length;
    const splitRate = best(size, () => {
      sink ^= splitPass(chunker, data);
    });
    const streamRate = await bestAsync(size, async () => {
      sink ^= await streamPass(chunker, data, 64 * KiB);
    });
    const bigPieceRate = await bestAsync(size, async () => {
      sink ^= await streamPass(chunker, data, MiB);
    });
    const hashRate = best(size, () => {
      sink ^= hashPass(chunker, data);
    });
    let dense = 0;
    for (let k = 0; k < DENSE_TRIALS; k++) {
      dense +=
        writtenAfterScatteredChange(chunker, states.subarray(k * 16 * MiB, (k + 1) * 16 * MiB), k + 1) / DENSE_TRIALS;
    }
    const sparse = writtenAfterScatteredChange(chunker, data, 1);
    const label = [options.minSize, options.avgSize, options.maxSize].map((s) => s / KiB).join('/');
    const isDefault = JSON.stringify(options) === JSON.stringify(DEFAULT_CHUNKER);
    console.log(
      pad(
        [
          (isDefault ? '*' : '') + label,
          count,
          Math.round(size / count),
          Math.round((count * 1024) / (size / MiB)),
          splitRate.toFixed(0),
          streamRate.toFixed(0),
          bigPieceRate.toFixed(0),
          hashRate.toFixed(0),
          `${(dense * 100).toFixed(1)}%`,
          `${(sparse * 100).toFixed(1)}%`,
        ],
        widths,
      ),
    );
  }
  console.log(`\n* = DEFAULT_CHUNKER; written* = mean over ${DENSE_TRIALS} states`);
  if (sink === 0.5) console.log(sink); // keeps the measured work observable
}

main().catch((err: unknown) => {
  console.error(err);
  process.exitCode = 1;
});
