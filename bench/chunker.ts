/**
 * Chunker benchmark: what DEFAULT_CHUNKER in src/snapshots/engine/chunker.ts is chosen from.
 *
 *   npx tsx bench/chunker.ts                 # 256 MiB of random data, best of 5 passes
 *   npx tsx bench/chunker.ts --mb 64 --runs 3
 *
 * For scale, on the same buffer: a plain `for` loop summing the bytes of a Buffer passed as an argument, as the
 * chunker gets it (V8 checks every access; over a module-level constant it can drop the checks and runs ~2x as
 * fast), and SHA-256 (node:crypto), which the engine runs over every chunk anyway. Then, for each candidate option
 * set: the chunk count and mean chunk size, the manifest entries per GiB of state, chunking throughput (in memory,
 * and streamed in 64 KiB pieces as fs.createReadStream reads by default, or 1 MiB pieces: chunks that span pieces
 * are copied into a fresh Buffer, chunks inside one are not), chunking + SHA-256 of every chunk, and the bytes an
 * incremental checkpoint writes after 1% of the state changed in 20 scattered places (for a 16 MiB and a full-size
 * state: the cost is about one chunk per place, so it depends on how dense the places are).
 *
 * Throughput is the best of `--runs` passes, taken round robin (the machine may be shared); nothing here asserts
 * on time.
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
  { minSize: 8 * KiB, avgSize: 32 * KiB, maxSize: 128 * KiB },
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

/** Milliseconds `fn` takes. */
async function time(fn: () => unknown): Promise<number> {
  const start = performance.now();
  await fn();
  return performance.now() - start;
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

  const chunkers = CANDIDATES.map((options) => new Chunker(options));
  // Round robin: every pass measures everything once, and each cell keeps its fastest pass. A burst of load from
  // elsewhere then costs one pass of each cell rather than all passes of one row, and no option set runs with code
  // V8 specialized for it alone (measured in a row, whichever set came first ran markedly slower).
  const measures: [string, (chunker: Chunker) => unknown][] = [
    ['split', (chunker) => splitPass(chunker, data)],
    ['stream64K', (chunker) => streamPass(chunker, data, 64 * KiB)],
    ['stream1M', (chunker) => streamPass(chunker, data, MiB)],
    ['sha', (chunker) => hashPass(chunker, data)],
  ];
  const fastest = new Map<string, number>();
  const keep = (key: string, ms: number) => fastest.set(key, Math.min(fastest.get(key) ?? Infinity, ms));
  for (let pass = 0; pass < runs; pass++) {
    keep('sum', await time(() => sumBytes(data)));
    keep('sha256', await time(() => createHash('sha256').update(data).digest()));
    for (const [i, chunker] of chunkers.entries()) {
      for (const [name, measure] of measures) keep(`${name} ${i}`, await time(() => measure(chunker)));
    }
  }
  const rate = (key: string) => (size / 1e6 / (fastest.get(key)! / 1000)).toFixed(0);
  console.log(`baseline  for-loop byte sum   ${rate('sum').padStart(6)} MB/s`);
  console.log(`baseline  SHA-256 (one pass)  ${rate('sha256').padStart(6)} MB/s\n`);

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
  for (const [i, chunker] of chunkers.entries()) {
    const { options } = chunker;
    let count = 0;
    for (const chunk of chunker.split(data)) count += chunk.length > 0 ? 1 : 0;
    let dense = 0;
    for (let k = 0; k < DENSE_TRIALS; k++) {
      const state = states.subarray(k * 16 * MiB, (k + 1) * 16 * MiB);
      dense += writtenAfterScatteredChange(chunker, state, k + 1) / DENSE_TRIALS;
    }
    const sparse = writtenAfterScatteredChange(chunker, data, 1);
    const label = [options.minSize, options.avgSize, options.maxSize].map((s) => s / KiB).join('/');
    const isDefault = JSON.stringify(options) === JSON.stringify(DEFAULT_CHUNKER);
    const cells = [
      (isDefault ? '*' : '') + label,
      count,
      Math.round(size / count),
      Math.round((count * 1024) / (size / MiB)),
      ...measures.map(([name]) => rate(`${name} ${i}`)),
      `${(dense * 100).toFixed(1)}%`,
      `${(sparse * 100).toFixed(1)}%`,
    ];
    console.log(pad(cells, widths));
  }
  console.log(`\n* = DEFAULT_CHUNKER; written* = mean over ${DENSE_TRIALS} states`);
}

main().catch((err: unknown) => {
  console.error(err);
  process.exitCode = 1;
});
