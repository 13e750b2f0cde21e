/**
 * Chunk codec benchmark: compression ratio and single-core compress / decompress throughput (MB per CPU-second, so
 * that other work on a shared machine skews it less) of every candidate codec on chunk-sized inputs (64 KiB and
 * 256 KiB, the engine's average and maximum chunk), for four kinds of state:
 *
 *   - text:   generated source code, JSON logs and a conversation transcript (deterministic, seeded);
 *   - random: crypto-random bytes (incompressible: what already-compressed files and encrypted data look like);
 *   - js:     the first MiBs of this repo's node_modules/**\/*.js, tarred (a real, text-heavy workspace);
 *   - tree:   evenly spaced 1 MiB windows over a tar of the whole node_modules (real mix: JS, maps, JSON and
 *             native binaries).
 *
 *   npx tsx bench/codec.ts                       # 32 MiB per data set
 *   npx tsx bench/codec.ts --mb 64 --only zstd   # codecs whose name contains "zstd"
 *   npx tsx bench/codec.ts --parallel            # also: 1 vs 2 cores (worker_threads, libuv pool)
 *   npx tsx bench/codec.ts --parallel-only       # only that (wall-clock: run it on an otherwise idle machine)
 *
 * Optional codecs (lz4-napi, zstd-napi, @mongodb-js/zstd) are measured when they can be loaded and skipped
 * otherwise; to measure one without adding it to the project, install it elsewhere and point NODE_PATH there:
 *   (cd /tmp/codec-eval && npm i zstd-napi) && NODE_PATH=/tmp/codec-eval/node_modules npx tsx bench/codec.ts
 *
 * "pipeline" rows are the engine's own `compressChunk` / `decompressChunk` (default codec, the incompressible-data
 * probe and the stored-as-`none` fallback included); "ref" rows are other stages of the checkpoint pipeline on the
 * same bytes, for scale. Nothing here asserts on time: it prints what it measured.
 */
import { createCipheriv, createHash, randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import { createRequire } from 'node:module';
import * as os from 'node:os';
import * as path from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs, promisify } from 'node:util';
import { Worker } from 'node:worker_threads';
import * as zlib from 'node:zlib';
import {
  CODECS,
  compressChunk,
  decompressChunk,
  defaultCodec,
  isCodecAvailable,
  type CodecId,
} from '../src/snapshots/engine/codec';

const KiB = 1024;
const MiB = 1024 * KiB;
const CHUNK_SIZES = [64 * KiB, 256 * KiB];
/** Each measurement repeats passes over its data set until at least this much time has been spent. */
const MIN_MEASURE_MS = 400;
const NODE_MODULES = path.resolve(__dirname, '..', 'node_modules');

// ---------------------------------------------------------------------------------------------------------------
// Codecs under test

interface BenchCodec {
  readonly name: string;
  /** Where it comes from: `node:zlib`, or the npm package and version that provides it. */
  readonly source: string;
  compress(plain: Buffer): Buffer | Promise<Buffer>;
  decompress(data: Buffer, size: number): Buffer | Promise<Buffer>;
  /** For the pipeline rows: the codec a compressed chunk was stored with (`none` when compression did not pay). */
  storedAs?(data: Buffer): CodecId;
}

/** Loads an optional package from the usual resolution paths plus NODE_PATH; undefined when it is not installed. */
function loadOptional<T>(name: string): { module: T; version: string } | undefined {
  const load = createRequire(__filename);
  let entry: string;
  try {
    entry = load.resolve(name);
  } catch {
    return undefined;
  }
  // `name/package.json` may be hidden by the package's "exports": find it by walking up from the entry point.
  let version = '?';
  for (let dir = path.dirname(entry); dir !== path.dirname(dir); dir = path.dirname(dir)) {
    const file = path.join(dir, 'package.json');
    if (!fs.existsSync(file)) continue;
    const pkg = JSON.parse(fs.readFileSync(file, 'utf8')) as { name?: string; version?: string };
    if (pkg.name === name) {
      version = pkg.version ?? '?';
      break;
    }
  }
  return { module: load(entry) as T, version };
}

function zlibCodecs(): BenchCodec[] {
  const codecs: BenchCodec[] = [];
  for (const level of [1, 6]) {
    codecs.push({
      name: `gzip-${level}`,
      source: 'node:zlib',
      compress: (b) => zlib.gzipSync(b, { level }),
      decompress: (b, size) => zlib.gunzipSync(b, { maxOutputLength: Math.max(size, 1) }),
    });
    codecs.push({
      name: `deflate-raw-${level}`,
      source: 'node:zlib',
      compress: (b) => zlib.deflateRawSync(b, { level }),
      decompress: (b, size) => zlib.inflateRawSync(b, { maxOutputLength: Math.max(size, 1) }),
    });
  }
  for (const quality of [1, 2, 3, 4]) {
    codecs.push({
      name: `brotli-${quality}`,
      source: 'node:zlib',
      compress: (b) =>
        zlib.brotliCompressSync(b, {
          params: {
            [zlib.constants.BROTLI_PARAM_QUALITY]: quality,
            [zlib.constants.BROTLI_PARAM_LGWIN]: 18,
            [zlib.constants.BROTLI_PARAM_SIZE_HINT]: b.length,
          },
        }),
      decompress: (b, size) => zlib.brotliDecompressSync(b, { maxOutputLength: Math.max(size, 1) }),
    });
  }
  return codecs;
}

interface Lz4Napi {
  compressSync(data: Buffer): Buffer;
  uncompressSync(data: Uint8Array): Buffer;
}

interface ZstdNapi {
  Compressor: new () => { setParameters(p: Record<string, unknown>): void; compress(b: Uint8Array): Buffer };
  Decompressor: new () => { decompress(b: Uint8Array): Buffer };
}

interface MongoZstd {
  compress(data: Buffer, level?: number): Promise<Buffer>;
  decompress(data: Buffer): Promise<Buffer>;
}

function optionalCodecs(): { codecs: BenchCodec[]; missing: string[] } {
  const codecs: BenchCodec[] = [];
  const missing: string[] = [];
  const lz4 = loadOptional<Lz4Napi>('lz4-napi');
  if (lz4) {
    const { module: m, version } = lz4;
    codecs.push({
      name: 'lz4',
      source: `lz4-napi@${version}`,
      compress: (b) => m.compressSync(b),
      decompress: (b) => m.uncompressSync(b),
    });
  } else missing.push('lz4-napi');

  const zstd = loadOptional<ZstdNapi>('zstd-napi');
  if (zstd) {
    const { module: m, version } = zstd;
    const decompressor = new m.Decompressor();
    for (const level of [-1, 1, 3]) {
      // One reused context per level, as the engine would hold one: allocating a ZSTD_CCtx per chunk costs more
      // than compressing a 64 KiB chunk at the fast levels.
      const compressor = new m.Compressor();
      compressor.setParameters({ compressionLevel: level, checksumFlag: false, contentSizeFlag: true });
      codecs.push({
        name: `zstd-${level}`,
        source: `zstd-napi@${version}`,
        compress: (b) => compressor.compress(b),
        decompress: (b) => decompressor.decompress(b),
      });
    }
  } else missing.push('zstd-napi');

  const mongo = loadOptional<MongoZstd>('@mongodb-js/zstd');
  if (mongo) {
    const { module: m, version } = mongo;
    for (const level of [1, 3]) {
      codecs.push({
        name: `mzstd-${level} (async)`,
        source: `@mongodb-js/zstd@${version}`,
        compress: (b) => m.compress(b, level),
        decompress: (b) => m.decompress(b),
      });
    }
  } else missing.push('@mongodb-js/zstd');
  return { codecs, missing };
}

/** The engine's own codec module, as the chunk pipeline calls it: default codec, and each codec forced. */
function pipelineCodecs(): BenchCodec[] {
  const variants: [string, CodecId | undefined][] = [
    [`compressChunk (default: ${codecName(defaultCodec())})`, undefined],
    ...(['brotli', 'zstd'] as const)
      .filter((name) => isCodecAvailable(CODECS[name]) && CODECS[name] !== defaultCodec())
      .map((name): [string, CodecId] => [`compressChunk (${name})`, CODECS[name]]),
  ];
  return variants.map(([name, codec]) => {
    const stored = new WeakMap<Buffer, CodecId>();
    return {
      name,
      source: 'pipeline',
      compress: (b) => {
        const out = compressChunk(b, codec === undefined ? {} : { codec });
        stored.set(out.data, out.codec);
        return out.data;
      },
      decompress: (b, size) => decompressChunk(stored.get(b)!, b, size),
      storedAs: (b) => stored.get(b)!,
    };
  });
}

function codecName(id: CodecId): string {
  return Object.entries(CODECS).find(([, v]) => v === id)![0];
}

/** Other stages of the checkpoint pipeline, on the same bytes (compress column only). */
function referenceCodecs(): BenchCodec[] {
  const key = randomBytes(32);
  return [
    {
      name: 'memcpy',
      source: 'ref',
      compress: (b) => Buffer.from(b),
      decompress: (b) => Buffer.from(b),
    },
    {
      name: 'sha256',
      source: 'ref',
      compress: (b) => createHash('sha256').update(b).digest(),
      decompress: (b) => b,
    },
    {
      name: 'aes-256-gcm',
      source: 'ref',
      compress: (b) => {
        const cipher = createCipheriv('aes-256-gcm', key, randomBytes(12));
        return Buffer.concat([cipher.update(b), cipher.final(), cipher.getAuthTag()]);
      },
      decompress: (b) => b,
    },
  ];
}

// ---------------------------------------------------------------------------------------------------------------
// Data sets

/** mulberry32: a tiny seeded PRNG, so the generated text is the same on every run and machine. */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const WORDS = (
  'the of and to a in is it you that he was for on are with as I his they be at one have this from or had by hot ' +
  'word but what some we can out other were all there when up use your how said an each she which do their time if ' +
  'will way about many then them write would like so these her long make thing see him two has look more day could ' +
  'go come did number sound no most people my over know water than call first who may down side been now find any ' +
  'new work part take get place made live where after back little only round man year came show every good me give ' +
  'our under name very through just form sentence great think say help low line differ turn cause much mean before ' +
  'move right boy old too same tell does set three want air well also play small end put home read hand port large ' +
  'spell add even land here must big high such follow act why ask men change went light kind off need house picture ' +
  'try us again animal point mother world near build self earth father session checkpoint snapshot worker restore ' +
  'resume pause workflow activity runtime chunk manifest store digest error retry timeout process file directory'
).split(' ');

const IDENTS = (
  'session checkpoint snapshot chunk manifest store runtime worker activity workflow client handle request ' +
  'response buffer stream state event timer signal query update result error options config context logger ' +
  'metrics cache index entry record batch queue task job lease lock key value size offset length digest hash ' +
  'parent child node tree path file dir user account token id name status progress count total limit'
).split(' ');
const VERBS = 'get set create update delete load save read write parse format resolve build start stop run apply'.split(
  ' ',
);
const TYPES = ['string', 'number', 'boolean', 'Buffer', 'Uint8Array', 'Date', 'unknown', 'void'];

/** Picks from `items` with a Zipf-like skew (a few very common items, a long tail), as natural text does. */
function zipf<T>(rand: () => number, items: readonly T[]): T {
  const r = rand();
  return items[Math.min(items.length - 1, Math.floor(items.length * r * r * r))]!;
}

function pick<T>(rand: () => number, items: readonly T[]): T {
  return items[Math.floor(rand() * items.length)]!;
}

function sentence(rand: () => number, words = 6 + Math.floor(rand() * 14)): string {
  const out: string[] = [];
  for (let i = 0; i < words; i++) out.push(zipf(rand, WORDS));
  const s = out.join(' ');
  return s.charAt(0).toUpperCase() + s.slice(1) + pick(rand, ['.', '.', '.', '?', '!']);
}

const cap = (s: string): string => s.charAt(0).toUpperCase() + s.slice(1);

function identifier(rand: () => number): string {
  return zipf(rand, IDENTS) + (rand() < 0.5 ? cap(zipf(rand, IDENTS)) : '');
}

function sourceFile(rand: () => number): string {
  const lines: string[] = [`import { ${cap(identifier(rand))} } from './${zipf(rand, IDENTS)}';`, ''];
  const functions = 3 + Math.floor(rand() * 6);
  for (let f = 0; f < functions; f++) {
    const name = pick(rand, VERBS) + cap(identifier(rand));
    const params = Array.from({ length: Math.floor(rand() * 4) }, () => `${identifier(rand)}: ${pick(rand, TYPES)}`);
    lines.push(`/** ${sentence(rand)} */`);
    lines.push(`export async function ${name}(${params.join(', ')}): Promise<${pick(rand, TYPES)}> {`);
    const statements = 2 + Math.floor(rand() * 10);
    for (let s = 0; s < statements; s++) {
      const v = identifier(rand);
      switch (Math.floor(rand() * 5)) {
        case 0:
          lines.push(`  const ${v} = await this.${zipf(rand, IDENTS)}.${pick(rand, VERBS)}(${identifier(rand)});`);
          break;
        case 1:
          lines.push(`  if (${v} === undefined || ${v}.${zipf(rand, IDENTS)} > ${Math.floor(rand() * 4096)}) {`);
          lines.push(`    throw new ${cap(identifier(rand))}Error(\`${sentence(rand, 5)} \${${v}}\`);`);
          lines.push('  }');
          break;
        case 2:
          lines.push(`  for (const ${v} of ${identifier(rand)}.${zipf(rand, IDENTS)}s) {`);
          lines.push(`    total += ${v}.${zipf(rand, IDENTS)};`);
          lines.push('  }');
          break;
        case 3:
          lines.push(`  // ${sentence(rand)}`);
          break;
        default:
          lines.push(`  log.${pick(rand, ['debug', 'info', 'warn'])}('${sentence(rand, 4)}', { ${v} });`);
      }
    }
    lines.push(`  return ${identifier(rand)};`, '}', '');
  }
  return lines.join('\n');
}

function hex(rand: () => number, length: number): string {
  let s = '';
  for (let i = 0; i < length; i++) s += '0123456789abcdef'[Math.floor(rand() * 16)];
  return s;
}

function logLines(rand: () => number, clock: { ms: number }, sessions: string[]): string {
  const lines: string[] = [];
  for (let i = 0; i < 200; i++) {
    clock.ms += Math.floor(rand() * 2000);
    lines.push(
      JSON.stringify({
        ts: new Date(clock.ms).toISOString(),
        level: zipf(rand, ['info', 'debug', 'warn', 'error']),
        logger: `${zipf(rand, IDENTS)}.${zipf(rand, IDENTS)}`,
        msg: `${pick(rand, VERBS)} ${zipf(rand, IDENTS)} ${pick(rand, ['done', 'started', 'failed', 'retrying'])}`,
        sessionId: zipf(rand, sessions),
        requestId: hex(rand, 32),
        attempt: 1 + Math.floor(rand() * rand() * 5),
        durationMs: Math.floor(rand() * rand() * 30_000),
        bytes: Math.floor(rand() * 10 * MiB),
        ...(rand() < 0.1 ? { error: sentence(rand) } : {}),
      }),
    );
  }
  return lines.join('\n') + '\n';
}

function transcript(rand: () => number): string {
  const turns: string[] = [];
  for (let t = 0; t < 20; t++) {
    turns.push(`### User\n\n${Array.from({ length: 1 + Math.floor(rand() * 3) }, () => sentence(rand)).join(' ')}\n`);
    const parts: string[] = ['### Assistant\n'];
    for (let p = 0; p < 1 + Math.floor(rand() * 4); p++) {
      const r = rand();
      if (r < 0.2) parts.push('```ts\n' + sourceFile(rand).slice(0, 600) + '\n```');
      else if (r < 0.4) parts.push(Array.from({ length: 3 }, () => `- ${sentence(rand, 8)}`).join('\n'));
      else parts.push(Array.from({ length: 2 + Math.floor(rand() * 5) }, () => sentence(rand)).join(' '));
    }
    turns.push(parts.join('\n\n') + '\n');
  }
  return turns.join('\n');
}

/** Source code, JSON logs and transcript, interleaved in ~1 MiB runs (a chunk is mostly of one kind, as in a tree). */
function textData(bytes: number): Buffer {
  const rand = prng(42);
  const clock = { ms: Date.UTC(2025, 0, 1) };
  const sessions = Array.from({ length: 40 }, () => `sess-${hex(rand, 8)}`);
  const generators = [() => sourceFile(rand), () => logLines(rand, clock, sessions), () => transcript(rand)];
  const parts: Buffer[] = [];
  let total = 0;
  for (let g = 0; total < bytes; g = (g + 1) % generators.length) {
    for (let run = 0; run < MiB && total < bytes;) {
      const piece = Buffer.from(generators[g]!(), 'utf8');
      parts.push(piece);
      run += piece.length;
      total += piece.length;
    }
  }
  return Buffer.concat(parts).subarray(0, bytes);
}

/** A minimal ustar header, so the tars below look like what a workspace runtime streams. */
function tarHeader(name: string, size: number): Buffer {
  const h = Buffer.alloc(512);
  h.write(name.slice(-99), 0, 'utf8');
  h.write('0000644\0', 100);
  h.write('0001750\0', 108);
  h.write('0001750\0', 116);
  h.write(size.toString(8).padStart(11, '0') + '\0', 124);
  h.write('14723672740\0', 136);
  h.write('        ', 148);
  h.write('0', 156);
  h.write('ustar\0' + '00', 257);
  let sum = 0;
  for (const byte of h) sum += byte;
  h.write(sum.toString(8).padStart(6, '0') + '\0 ', 148);
  return h;
}

function walk(dir: string, out: string[]): string[] {
  for (const entry of fs.readdirSync(dir, { withFileTypes: true }).sort((a, b) => (a.name < b.name ? -1 : 1))) {
    const p = path.join(dir, entry.name);
    if (entry.isDirectory()) walk(p, out);
    else if (entry.isFile()) out.push(p);
  }
  return out;
}

function tarOf(files: string[], limit: number): Buffer {
  const parts: Buffer[] = [];
  let total = 0;
  for (const file of files) {
    if (total >= limit) break;
    const body = fs.readFileSync(file);
    const padding = Buffer.alloc((512 - (body.length % 512)) % 512);
    parts.push(tarHeader(path.relative(NODE_MODULES, file), body.length), body, padding);
    total += 512 + body.length + padding.length;
  }
  return Buffer.concat(parts);
}

function nodeModulesData(bytes: number): { js: Buffer; tree: Buffer } | undefined {
  if (!fs.existsSync(NODE_MODULES)) return undefined;
  const files = walk(NODE_MODULES, []);
  const js = tarOf(
    files.filter((f) => f.endsWith('.js')),
    bytes,
  ).subarray(0, bytes);
  const whole = tarOf(files, Infinity);
  const windows = Math.max(1, Math.floor(bytes / MiB));
  const stride = Math.max(MiB, Math.floor(whole.length / windows));
  const tree = Buffer.concat(
    Array.from({ length: windows }, (_, i) => whole.subarray(i * stride, i * stride + MiB)),
  ).subarray(0, bytes);
  return { js, tree };
}

// ---------------------------------------------------------------------------------------------------------------
// Measurement

interface Row {
  data: string;
  chunk: number;
  codec: string;
  source: string;
  ratio: number;
  storedNone: number;
  compressMBps: number;
  decompressMBps: number;
}

function chunksOf(data: Buffer, size: number): Buffer[] {
  const chunks: Buffer[] = [];
  for (let off = 0; off + size <= data.length; off += size) chunks.push(data.subarray(off, off + size));
  return chunks;
}

/**
 * Runs `fn` over all inputs, repeating passes until MIN_MEASURE_MS of CPU time; returns MB (10^6 bytes) per CPU
 * second of this process (process.cpuUsage: user + system, all threads). CPU time rather than wall time, so that
 * other work on a shared machine does not count against the codec; for a synchronous codec it is its one-core speed.
 */
async function throughput<T>(inputs: T[], sizes: number[], fn: (input: T, i: number) => unknown): Promise<number> {
  let bytes = 0;
  const cpu0 = process.cpuUsage();
  let cpuMs = 0;
  do {
    for (let i = 0; i < inputs.length; i++) {
      const out = fn(inputs[i]!, i);
      if (out instanceof Promise) await out;
      bytes += sizes[i]!;
    }
    const used = process.cpuUsage(cpu0);
    cpuMs = (used.user + used.system) / 1000;
  } while (cpuMs < MIN_MEASURE_MS);
  return bytes / 1e3 / cpuMs;
}

async function measure(codec: BenchCodec, data: string, chunks: Buffer[]): Promise<Row> {
  const bytes = chunks.reduce((a, c) => a + c.length, 0);
  // Warm-up (JIT, lazily created contexts) and the outputs decompression is measured on.
  const compressed: Buffer[] = [];
  for (const c of chunks) compressed.push(await codec.compress(c));
  const reference = codec.source === 'ref';
  if (!reference) {
    for (let i = 0; i < chunks.length; i++) {
      const back = await codec.decompress(compressed[i]!, chunks[i]!.length);
      if (!back.equals(chunks[i]!)) throw new Error(`${codec.name}: round trip of chunk ${i} of ${data} differs`);
    }
  }
  const stored = compressed.reduce((a, c) => a + c.length, 0);
  const storedAs = codec.storedAs;
  const storedNone = storedAs ? compressed.filter((c) => storedAs(c) === CODECS.none).length / chunks.length : NaN;
  const sizes = chunks.map((c) => c.length);
  const compressMBps = await throughput(chunks, sizes, (c) => codec.compress(c));
  const decompressMBps = reference
    ? NaN
    : await throughput(compressed, sizes, (c, i) => codec.decompress(c, sizes[i]!));
  return {
    data,
    chunk: chunks[0]!.length,
    codec: codec.name,
    source: codec.source,
    ratio: reference ? NaN : bytes / stored,
    storedNone,
    compressMBps,
    decompressMBps,
  };
}

function printTable(rows: Row[]): void {
  const header = ['data', 'chunk', 'codec', 'from', 'ratio', 'compress MB/s', 'decompress MB/s', 'stored none'];
  const fmt = (n: number, digits = 0): string => (Number.isNaN(n) ? '' : n.toFixed(digits));
  const lines = rows.map((r) => [
    r.data,
    `${r.chunk / KiB}K`,
    r.codec,
    r.source,
    fmt(r.ratio, 2),
    fmt(r.compressMBps),
    r.storedNone === 1 ? 'no-op' : fmt(r.decompressMBps),
    Number.isNaN(r.storedNone) ? '' : `${(r.storedNone * 100).toFixed(0)}%`,
  ]);
  console.log(`| ${header.join(' | ')} |`);
  console.log(`|${header.map((_, i) => (i >= 4 ? ' ---: ' : ' --- ')).join('|')}|`);
  for (const l of lines) console.log(`| ${l.join(' | ')} |`);
}

// ---------------------------------------------------------------------------------------------------------------
// 1 core vs 2 cores

/**
 * Worker-thread body: compresses every chunk it is sent with the named codec and answers with the compressed size.
 * Plain JS (eval), so it needs no TypeScript loader; it covers brotli-1 and zstd-napi's zstd-1.
 */
const WORKER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
const zlib = require('node:zlib');
let compress;
if (workerData.codec === 'brotli-1') compress = (b) => zlib.brotliCompressSync(b, { params: {
  [zlib.constants.BROTLI_PARAM_QUALITY]: 1, [zlib.constants.BROTLI_PARAM_LGWIN]: 18 } });
else { const z = require(workerData.zstdBinding); const c = new z.CCtx(); const out = Buffer.alloc(z.compressBound(1 << 18));
  compress = (b) => out.subarray(0, c.compress(out, b, 1)); }
parentPort.on('message', (chunk) => parentPort.postMessage(compress(Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength)).length));
`;

interface Rate {
  /** MB/s of wall-clock time: what the machine delivered, other load included. */
  wall: number;
  /** MB per CPU-second of this process, all threads: the cost, whatever else runs on the machine. */
  cpu: number;
}

const fmtRate = (r: Rate): string => `${r.wall.toFixed(0)} (${r.cpu.toFixed(0)})`;

/** Rates of `run` (one pass over `bytes`), repeated until MIN_MEASURE_MS after one warm-up pass. */
async function rate(bytes: number, run: () => Promise<void>): Promise<Rate> {
  await run();
  let passes = 0;
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  do {
    await run();
    passes++;
  } while (performance.now() - t0 < MIN_MEASURE_MS);
  const cpu = process.cpuUsage(cpu0);
  const mb = (bytes * passes) / 1e6;
  return { wall: mb / ((performance.now() - t0) / 1000), cpu: mb / ((cpu.user + cpu.system) / 1e6) };
}

/** `workers` worker_threads, each kept two chunks ahead (chunks are copied to the worker, as a pool would). */
async function workerPool(codecName: string, chunks: Buffer[], workers: number): Promise<Rate> {
  const zstdBinding = codecName.startsWith('zstd') ? createRequire(__filename).resolve('zstd-napi/binding') : undefined;
  const pool = Array.from(
    { length: workers },
    () => new Worker(WORKER_SOURCE, { eval: true, workerData: { codec: codecName, zstdBinding } }),
  );
  try {
    const bytes = chunks.reduce((a, c) => a + c.length, 0);
    // Standalone copies: posting a view of the big data set buffer would clone all of its ArrayBuffer.
    const own = chunks.map((c) => new Uint8Array(c));
    return await rate(bytes, async () => {
      let next = 0;
      await Promise.all(
        pool.map(
          (w) =>
            new Promise<void>((resolve) => {
              let inFlight = 0;
              const send = (): void => {
                while (inFlight < 2 && next < chunks.length) {
                  w.postMessage(own[next++]);
                  inFlight++;
                }
                if (inFlight === 0) {
                  w.off('message', onMessage);
                  resolve();
                }
              };
              const onMessage = (): void => {
                inFlight--;
                send();
              };
              w.on('message', onMessage);
              send();
            }),
        ),
      );
    });
  } finally {
    await Promise.all(pool.map((w) => w.terminate()));
  }
}

/** An async codec API (libuv thread pool, 4 threads by default) with `depth` calls in flight. */
async function inFlight(compress: (b: Buffer) => Promise<unknown>, chunks: Buffer[], depth: number): Promise<Rate> {
  const bytes = chunks.reduce((a, c) => a + c.length, 0);
  return rate(bytes, async () => {
    let next = 0;
    await Promise.all(
      Array.from({ length: depth }, async () => {
        while (next < chunks.length) await compress(chunks[next++]!);
      }),
    );
  });
}

const ASYNC_COMPRESS: Record<string, ((b: Buffer) => Promise<unknown>) | undefined> = {
  'brotli-1': promisify((b: Buffer, cb: (err: Error | null, out: Buffer) => void) =>
    zlib.brotliCompress(
      b,
      { params: { [zlib.constants.BROTLI_PARAM_QUALITY]: 1, [zlib.constants.BROTLI_PARAM_LGWIN]: 18 } },
      cb,
    ),
  ),
};

async function parallelTable(datasets: [string, Buffer][], extra: BenchCodec[]): Promise<void> {
  console.log(
    `\n1 vs 2 cores, compress only, 64K chunks: MB/s of wall-clock time (MB per CPU-second of the process); ` +
      `load average ${os.loadavg()[0]!.toFixed(1)}:\n`,
  );
  console.log('| data | codec | sync, 1 thread | 2 worker_threads | async API, 1 / 2 / 4 in flight |');
  console.log('| --- | --- | ---: | ---: | ---: |');
  const mongo = extra.find((c) => c.name.startsWith('mzstd-1'));
  const names = ['brotli-1'];
  if (extra.some((c) => c.name === 'zstd-1')) names.push('zstd-1');
  if (mongo) names.push(mongo.name);
  for (const [data, buf] of datasets) {
    const chunks = chunksOf(buf, 64 * KiB);
    const bytes = chunks.reduce((a, c) => a + c.length, 0);
    for (const name of names) {
      const codec = [...zlibCodecs(), ...extra].find((c) => c.name === name)!;
      const isAsync = name.includes('async');
      const sync = isAsync
        ? ''
        : fmtRate(
            await rate(bytes, async () => {
              for (const c of chunks) codec.compress(c) as Buffer; // the non-async codecs are synchronous
            }),
          );
      const workers = isAsync ? '' : fmtRate(await workerPool(name, chunks, 2));
      const asyncCompress =
        name === mongo?.name ? (b: Buffer) => Promise.resolve(mongo.compress(b)) : ASYNC_COMPRESS[name];
      const depths: string[] = [];
      for (const depth of asyncCompress ? [1, 2, 4] : [])
        depths.push(fmtRate(await inFlight(asyncCompress!, chunks, depth)));
      console.log(`| ${data} | ${name} | ${sync} | ${workers} | ${depths.join(' / ')} |`);
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      mb: { type: 'string', default: '32' },
      only: { type: 'string' },
      parallel: { type: 'boolean', default: false },
      'parallel-only': { type: 'boolean', default: false },
    },
  });
  const bytes = Math.max(1, Number(values.mb)) * MiB;
  const { codecs: extra, missing } = optionalCodecs();
  const codecs = [...referenceCodecs(), ...zlibCodecs(), ...extra, ...pipelineCodecs()].filter(
    (c) => !values.only || c.source === 'ref' || c.name.includes(values.only) || c.source === 'pipeline',
  );
  if (missing.length > 0) console.log(`skipped (not installed): ${missing.join(', ')}\n`);

  const datasets: [string, Buffer][] = [
    ['text', textData(bytes)],
    ['random', randomBytes(bytes)],
  ];
  const nm = nodeModulesData(bytes);
  if (nm) datasets.push(['js', nm.js], ['tree', nm.tree]);
  else console.log(`skipped js/tree: ${NODE_MODULES} not found\n`);

  console.log(
    `node ${process.version}, ${os.cpus()[0]?.model}, ${os.cpus().length} cores, load average ` +
      `${os.loadavg()[0]!.toFixed(1)}; ${values.mb} MiB per data set; MB = 10^6 bytes; MB/s = MB per CPU-second of this process (so other load does not skew it); ` +
      'one thread unless marked (async)\n',
  );
  if (values['parallel-only']) return parallelTable(datasets, extra);
  const rows: Row[] = [];
  for (const [name, data] of datasets) {
    for (const size of CHUNK_SIZES) {
      const chunks = chunksOf(data, size);
      for (const codec of codecs) rows.push(await measure(codec, name, chunks));
    }
  }
  printTable(rows);

  if (values.parallel) await parallelTable(datasets, extra);
}

main().catch((err: unknown) => {
  console.error(err);
  process.exitCode = 1;
});
