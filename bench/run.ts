/**
 * Benchmark of checkpoint / pause / resume of a workspace session through the real system: a Temporal dev
 * server, the project's workers (in this process), the default ChunkedSnapshotStore and a WorkspaceRuntime on a local file
 * system, driven by the SessionClient. Physical baselines (write+fsync, read, SHA-256, tar) are measured on the
 * same file system with the same bytes, so the engine's numbers can be read as "how far from the hardware".
 *
 *   npm run bench
 *   npx tsx bench/run.ts --size-mb 100 --file-mb 5 --rounds 3
 *
 * Nothing here asserts on time: it prints (and writes to .bench/results.md) what it measured.
 */
import { execFileSync, spawn } from 'node:child_process';
import { createHash, randomBytes, randomUUID } from 'node:crypto';
import { createReadStream } from 'node:fs';
import * as fs from 'node:fs';
import * as fsp from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import { constants as perfConstants, monitorEventLoopDelay, performance, PerformanceObserver } from 'node:perf_hooks';
import type { Readable } from 'node:stream';
import { setTimeout as delay } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import * as v8 from 'node:v8';
import * as vm from 'node:vm';
import { Client, Connection } from '@temporalio/client';
import { bundleWorkflowCode, DefaultLogger, NativeConnection, Runtime } from '@temporalio/worker';
import { SessionClient, type SessionHandle } from '../src/client';
import { DEFAULT_TEMPORAL_BIN, freePort, startDevServer } from '../src/dev-server';
import type { WorkspaceRuntimeSpec } from '../src/domain/schemas';
import {
  MemoryRuntime,
  WorkspaceRuntime,
  type CapturedState,
  type ExitInfo,
  type RestoreRequest,
  type RuntimeInstanceInfo,
  type WorkspaceRuntimeOptions,
} from '../src/runtimes';
import {
  type CheckpointManifest,
  ChunkedSnapshotStore,
  Keyring,
  type NewCheckpoint,
  type SnapshotStore,
  type StateSource,
  type StoreProgress,
} from '../src/snapshots';
import { createWorkers } from '../src/worker';

const MiB = 1024 * 1024;

/** The store a worker runs by default: chunked, deduplicated, AES-256-GCM under a throwaway master key. */
function productionStore(rootDir: string): ChunkedSnapshotStore {
  return new ChunkedSnapshotStore({ rootDir, keyring: new Keyring([{ id: 'bench', key: randomBytes(32) }]) });
}

const PROJECT_DIR = path.resolve(__dirname, '..');
const RESULTS_DIR = path.join(PROJECT_DIR, '.bench');
const COMMAND = ['sh', '-c', 'while true; do sleep 1; done'];
/** Seeded through the spec (at most 256 KiB); the big incompressible files are written after start. */
const SMALL_FILES: Record<string, string> = {
  'README.md': '# bench workspace\n\nA session seeded by bench/run.ts.\n',
  'src/main.sh': '#!/bin/sh\nwhile true; do sleep 1; done\n',
  'notes/todo.txt': Array.from({ length: 500 }, (_, i) => `- item ${i}: keep this across pause and resume`).join('\n'),
};
/** Generous: a hung operation should fail the run (and clean up), not block it forever. */
const OP_TIMEOUT_MS = 10 * 60_000;

interface Options {
  sizeMiB: number;
  fileMiB: number;
  rounds: number;
}

function parseOptions(): Options {
  const { values } = parseArgs({
    options: {
      'size-mb': { type: 'string', default: '100' },
      'file-mb': { type: 'string', default: '5' },
      rounds: { type: 'string', default: '3' },
    },
  });
  const num = (name: string, raw: string | undefined, min: number): number => {
    const n = Number(raw);
    if (!Number.isFinite(n) || n < min) throw new Error(`--${name} must be a number >= ${min}, got ${raw}`);
    return n;
  };
  return {
    sizeMiB: num('size-mb', values['size-mb'], 1),
    fileMiB: num('file-mb', values['file-mb'], 0.001),
    rounds: Math.round(num('rounds', values.rounds, 1)),
  };
}

// ---- cleanup ------------------------------------------------------------------------------------------------

/** Cleanup steps, run last-registered first, each bounded in time, each failure reported but not fatal. */
class Cleanup {
  private readonly steps: { name: string; fn: () => Promise<unknown> }[] = [];
  private running?: Promise<void>;

  add(name: string, fn: () => Promise<unknown>): void {
    this.steps.push({ name, fn });
  }

  run(): Promise<void> {
    this.running ??= (async () => {
      for (const step of this.steps.reverse()) {
        try {
          await withTimeout(step.fn(), 30_000, `cleanup: ${step.name}`);
        } catch (error) {
          console.error(`cleanup of ${step.name} failed: ${errorText(error)}`);
        }
      }
    })();
    return this.running;
  }
}

async function withTimeout<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  const abort = new AbortController();
  const timeout = delay(ms, undefined, { signal: abort.signal }).then(() => {
    throw new Error(`${what} did not finish within ${ms} ms`);
  });
  timeout.catch(() => undefined);
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    abort.abort();
  }
}

function errorText(error: unknown): string {
  return error instanceof Error ? (error.stack ?? error.message) : String(error);
}

// ---- probes inside the engine (wrappers, the engine itself is untouched) -----------------------------------

/** Timestamps and counters of the one operation in flight (the bench runs one at a time). */
class Probe {
  events = new Map<string, number>();
  progressCalls = 0;
  progressMs = 0;

  reset(): void {
    this.events = new Map();
    this.progressCalls = 0;
    this.progressMs = 0;
  }

  mark(name: string): void {
    this.events.set(name, performance.now());
  }

  /** Wraps a store's progress callback (called once per chunk) to count calls and the time spent in them. */
  wrapProgress(options: StoreProgress, firstByte: string): StoreProgress {
    const inner = options.onProgress;
    return {
      ...options,
      onProgress: (bytesDone) => {
        if (this.progressCalls++ === 0) this.mark(firstByte);
        const t = performance.now();
        try {
          inner?.(bytesDone);
        } finally {
          this.progressMs += performance.now() - t;
        }
      },
    };
  }
}

/** The real runtime, with timestamps around the calls the activities make. */
class ProbedWorkspaceRuntime extends WorkspaceRuntime {
  constructor(
    options: WorkspaceRuntimeOptions,
    private readonly probe: Probe,
  ) {
    super(options);
  }

  override async capture(instanceId: string): Promise<Readable> {
    this.probe.mark('capture.call');
    const stream = await super.capture(instanceId);
    // capture() resolves once the process group is frozen; 'end' comes after the last packed byte was read.
    this.probe.mark('capture.frozen');
    stream.once('end', () => this.probe.mark('capture.packed'));
    stream.once('close', () => this.probe.mark('capture.thawed'));
    return stream;
  }

  override async captureState(instanceId: string): Promise<CapturedState> {
    this.probe.mark('capture.call');
    const captured = await super.captureState(instanceId);
    this.probe.mark('capture.frozen');
    const probe = this.probe;
    return {
      ...captured,
      stored: (checkpointId) => captured.stored(checkpointId),
      close: () => {
        captured.close();
        probe.mark('capture.thawed');
      },
      pieces: (async function* () {
        try {
          yield* captured.pieces;
          probe.mark('capture.packed');
        } finally {
          probe.mark('capture.thawed');
        }
      })(),
    };
  }

  override async restore(request: RestoreRequest<WorkspaceRuntimeSpec>): Promise<RuntimeInstanceInfo> {
    this.probe.mark('restore.call');
    const info = await super.restore(request);
    this.probe.mark('restore.started');
    return info;
  }

  override async stop(instanceId: string, options: { graceMs?: number } = {}): Promise<ExitInfo> {
    this.probe.mark('stop.call');
    try {
      return await super.stop(instanceId, options);
    } finally {
      this.probe.mark('stop.done');
    }
  }

  override async dispose(instanceId: string): Promise<void> {
    this.probe.mark('dispose.call');
    try {
      await super.dispose(instanceId);
    } finally {
      this.probe.mark('dispose.done');
    }
  }
}

/** The real store, with timestamps and a count of progress callbacks (one per chunk). */
class ProbedStore implements SnapshotStore {
  constructor(
    private readonly inner: SnapshotStore,
    private readonly probe: Probe,
  ) {}

  async write(
    checkpoint: NewCheckpoint,
    data: Readable | StateSource,
    options: StoreProgress = {},
  ): Promise<CheckpointManifest> {
    this.probe.mark('write.call');
    const manifest = await this.inner.write(checkpoint, data, this.probe.wrapProgress(options, 'write.firstByte'));
    this.probe.mark('write.done');
    return manifest;
  }

  async open(sessionId: string, checkpointId: string, options: StoreProgress = {}) {
    this.probe.mark('open.call');
    const opened = await this.inner.open(sessionId, checkpointId, this.probe.wrapProgress(options, 'open.firstByte'));
    // The verifying stream ends only after size and digest matched: every byte was read and hashed.
    opened.stream.once('end', () => this.probe.mark('open.verified'));
    return opened;
  }

  readManifest(sessionId: string, checkpointId: string): Promise<CheckpointManifest> {
    return this.inner.readManifest(sessionId, checkpointId);
  }

  verify(sessionId: string, checkpointId: string): Promise<CheckpointManifest> {
    return this.inner.verify(sessionId, checkpointId);
  }

  list(sessionId: string): Promise<CheckpointManifest[]> {
    return this.inner.list(sessionId);
  }

  delete(sessionId: string, checkpointId: string): Promise<void> {
    return this.inner.delete(sessionId, checkpointId);
  }

  claim(sessionId: string, owner: string): Promise<void> {
    return this.inner.claim(sessionId, owner);
  }
}

// ---- memory ------------------------------------------------------------------------------------------------

/** `global.gc` without --expose-gc on the command line (npm run bench passes no node flags). */
const collectGarbage: () => void = (() => {
  try {
    v8.setFlagsFromString('--expose-gc');
    const gc = vm.runInNewContext('typeof gc === "function" ? gc : undefined') as (() => void) | undefined;
    return gc ?? (() => {});
  } catch {
    return () => {};
  }
})();

interface Measured<T> {
  result: T;
  ms: number;
  t0: number;
  t1: number;
  rssBefore: number;
  rssPeak: number;
  samples: number;
  maxRssBefore: number;
  maxRssAfter: number;
  /** CPU time of this process (all its threads: event loop, libuv pool, Temporal core) during the call. */
  cpuUserMs: number;
  cpuSystemMs: number;
  /** Event-loop delay of this process during the call, max (a blocked loop stalls every stream). */
  loopDelayMaxMs: number;
  machineBusyMs: number;
  serverCpuMs: number;
  gcMajor: number;
  gcMajorMs: number;
  gcOtherMs: number;
}

/** CPU time (ms) of the whole machine (busy, not idle or iowait) and of the Temporal server process. */
interface CpuTicks {
  machineBusyMs: number;
  serverMs: number;
}

const clockTicksPerSecond = (() => {
  try {
    return Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
  } catch {
    return 100;
  }
})();
/** Set once the dev server runs, so its CPU can be told apart from this process's and everyone else's. */
let serverPid: number | undefined;

function cpuTicks(): CpuTicks {
  const toMs = (ticks: number) => (ticks * 1000) / clockTicksPerSecond;
  let machineBusyMs = 0;
  let serverMs = 0;
  try {
    // cpu  user nice system idle iowait irq softirq steal …
    const fields = fs.readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number);
    machineBusyMs = toMs(fields.reduce((a, b, i) => (i === 3 || i === 4 ? a : a + b), 0));
    if (serverPid !== undefined) {
      const stat = fs.readFileSync(`/proc/${serverPid}/stat`, 'utf8');
      const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      serverMs = toMs(Number(rest[11]) + Number(rest[12])); // utime, stime (fields 14 and 15)
    }
  } catch {
    // not Linux: the report shows zeros
  }
  return { machineBusyMs, serverMs };
}

/** GC pauses of this process's main isolate, as the perf_hooks 'gc' entries report them. */
const gcPauses: { start: number; duration: number; major: boolean }[] = [];
new PerformanceObserver((list) => {
  for (const entry of list.getEntries()) {
    const kind = (entry as { detail?: { kind?: number } }).detail?.kind;
    gcPauses.push({
      start: entry.startTime,
      duration: entry.duration,
      major: kind === perfConstants.NODE_PERFORMANCE_GC_MAJOR,
    });
  }
}).observe({ entryTypes: ['gc'] });

/** Times `fn` while sampling RSS every 50 ms; a GC first, so the baseline RSS is not inflated by garbage. */
async function measure<T>(fn: () => Promise<T>): Promise<Measured<T>> {
  collectGarbage();
  const maxRssBefore = process.resourceUsage().maxRSS * 1024;
  const rssBefore = process.memoryUsage().rss;
  let rssPeak = rssBefore;
  let samples = 0;
  const sample = (): void => {
    samples++;
    rssPeak = Math.max(rssPeak, process.memoryUsage().rss);
  };
  const timer = setInterval(sample, 50);
  const loop = monitorEventLoopDelay({ resolution: 10 });
  loop.enable();
  const cpu = process.cpuUsage();
  const ticks = cpuTicks();
  const t0 = performance.now();
  try {
    const result = await withTimeout(fn(), OP_TIMEOUT_MS, 'operation');
    const t1 = performance.now();
    const cpuUsed = process.cpuUsage(cpu);
    const ticksAfter = cpuTicks();
    sample();
    await delay(0); // the gc entries of the call reach the observer on a later tick
    const pauses = gcPauses.filter((p) => p.start >= t0 && p.start <= t1);
    const majors = pauses.filter((p) => p.major);
    return {
      result,
      ms: t1 - t0,
      t0,
      t1,
      rssBefore,
      rssPeak,
      samples,
      maxRssBefore,
      maxRssAfter: process.resourceUsage().maxRSS * 1024,
      cpuUserMs: cpuUsed.user / 1000,
      cpuSystemMs: cpuUsed.system / 1000,
      loopDelayMaxMs: loop.max / 1e6,
      machineBusyMs: ticksAfter.machineBusyMs - ticks.machineBusyMs,
      serverCpuMs: ticksAfter.serverMs - ticks.serverMs,
      gcMajor: majors.length,
      gcMajorMs: majors.reduce((a, p) => a + p.duration, 0),
      gcOtherMs: pauses.reduce((a, p) => a + (p.major ? 0 : p.duration), 0),
    };
  } finally {
    clearInterval(timer);
    loop.disable();
  }
}

// ---- files -------------------------------------------------------------------------------------------------

function dfLine(dir: string): { type: string; text: string } {
  const text = execFileSync('df', ['-T', '-P', dir], { encoding: 'utf8' }).trim();
  const fields = (text.split('\n')[1] ?? '').trim().split(/\s+/);
  return { type: fields[1] ?? 'unknown', text };
}

/** os.tmpdir() unless it is memory-backed (then the numbers would say nothing about a disk): .bench/ instead. */
function chooseTempBase(): { base: string; why: string } {
  const tmp = os.tmpdir();
  const { type } = dfLine(tmp);
  if (type === 'tmpfs' || type === 'ramfs') {
    fs.mkdirSync(RESULTS_DIR, { recursive: true });
    return { base: RESULTS_DIR, why: `${tmp} is ${type}: using the project's .bench/ instead` };
  }
  return { base: tmp, why: `os.tmpdir() (${tmp}) is ${type}` };
}

/** File sizes of the big part of the workspace: `fileMiB` each, the remainder on the last one. */
function blobSizes(options: Options): number[] {
  const total = Math.round(options.sizeMiB * MiB);
  const count = Math.max(1, Math.round(options.sizeMiB / options.fileMiB));
  const each = Math.floor(total / count);
  return Array.from({ length: count }, (_, i) => (i === count - 1 ? total - each * (count - 1) : each));
}

function blobName(i: number): string {
  return `data/blob-${String(i).padStart(3, '0')}.bin`;
}

/** Writes the workspace's content once (random, incompressible), to be copied into each session's directory. */
function writeSeed(dir: string, sizes: number[]): void {
  for (const [name, content] of Object.entries(SMALL_FILES)) {
    fs.mkdirSync(path.dirname(path.join(dir, name)), { recursive: true });
    fs.writeFileSync(path.join(dir, name), content);
  }
  fs.mkdirSync(path.join(dir, 'data'), { recursive: true });
  sizes.forEach((size, i) => {
    const fd = fs.openSync(path.join(dir, blobName(i)), 'w');
    try {
      for (let done = 0; done < size;) {
        const chunk = randomBytes(Math.min(MiB, size - done));
        fs.writeSync(fd, chunk);
        done += chunk.length;
      }
      fs.fsyncSync(fd);
    } finally {
      fs.closeSync(fd);
    }
  });
}

/** Copies the big files into a live workspace and makes them durable, so no later fsync pays for them. */
function seedWorkspace(seedDir: string, workspaceDir: string, count: number): void {
  fs.mkdirSync(path.join(workspaceDir, 'data'), { recursive: true });
  for (let i = 0; i < count; i++) {
    const target = path.join(workspaceDir, blobName(i));
    fs.copyFileSync(path.join(seedDir, blobName(i)), target);
    fsyncPath(target);
  }
  fsyncPath(path.join(workspaceDir, 'data'));
  fsyncPath(workspaceDir);
}

function fsyncPath(p: string): void {
  const fd = fs.openSync(p, 'r');
  try {
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
}

interface TreeDigest {
  files: number;
  bytes: number;
  sha256: string;
}

/** One digest over the sorted tree: every directory, every file's path, size and content hash. */
async function treeDigest(root: string): Promise<TreeDigest> {
  const tree = createHash('sha256');
  let files = 0;
  let bytes = 0;
  const walk = async (rel: string): Promise<void> => {
    for (const name of (await fsp.readdir(path.join(root, rel))).sort()) {
      const relPath = rel === '' ? name : `${rel}/${name}`;
      const stats = await fsp.lstat(path.join(root, relPath));
      if (stats.isDirectory()) {
        tree.update(`d ${relPath}\n`);
        await walk(relPath);
      } else if (stats.isFile()) {
        const hash = createHash('sha256');
        for await (const chunk of createReadStream(path.join(root, relPath), { highWaterMark: MiB })) {
          hash.update(chunk as Buffer);
        }
        tree.update(`f ${relPath} ${stats.size} ${hash.digest('hex')}\n`);
        files++;
        bytes += stats.size;
      } else {
        tree.update(`o ${relPath}\n`);
      }
    }
  };
  await walk('');
  return { files, bytes, sha256: tree.digest('hex') };
}

function run(program: string, args: string[]): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(program, args, { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.once('error', reject);
    child.once('exit', (code, signal) =>
      code === 0 ? resolve() : reject(new Error(`${program} ${args.join(' ')}: ${code ?? signal} ${stderr.trim()}`)),
    );
  });
}

/** State letter of /proc/<pid>/stat (R, S, T, Z, …), or undefined if there is no such process. */
function processState(pid: number): string | undefined {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[0];
  } catch {
    return undefined;
  }
}

// ---- baselines ---------------------------------------------------------------------------------------------

interface Baselines {
  bytes: number;
  writeMs: number[];
  readWarmMs: number[];
  readColdMs: number[] | null;
  sha256Ms: number[];
  tarCreateMs: number[];
  tarBytes: number;
  tarExtractMs: number[];
}

async function measureBaselines(dir: string, seedDir: string, bytes: number, rounds: number): Promise<Baselines> {
  fs.mkdirSync(dir, { recursive: true });
  const pool = randomBytes(8 * MiB);
  const chunkAt = (offset: number, length: number): Buffer => {
    const start = offset % pool.length;
    return pool.subarray(start, Math.min(start + length, pool.length));
  };
  const file = path.join(dir, 'sequential.bin');

  // (a) sequential write of the same byte count, 1 MiB writes, fsync before the file counts as written.
  const writeMs: number[] = [];
  for (let r = 0; r < rounds; r++) {
    fs.rmSync(file, { force: true });
    const t0 = performance.now();
    const fd = fs.openSync(file, 'w');
    for (let done = 0; done < bytes;) done += fs.writeSync(fd, chunkAt(done, Math.min(MiB, bytes - done)));
    fs.fsyncSync(fd);
    fs.closeSync(fd);
    writeMs.push(performance.now() - t0);
  }

  // (b) sequential read of it: warm (page cache, like the engine's restore of a just-written checkpoint) and
  // cold (O_DIRECT through dd: the device, bypassing the cache without dropping anyone else's cache).
  const readWarmMs: number[] = [];
  const buffer = Buffer.allocUnsafe(MiB);
  for (let r = 0; r < rounds; r++) {
    const t0 = performance.now();
    const fd = fs.openSync(file, 'r');
    while (fs.readSync(fd, buffer, 0, buffer.length, null) > 0);
    fs.closeSync(fd);
    readWarmMs.push(performance.now() - t0);
  }
  let readColdMs: number[] | null = [];
  for (let r = 0; r < rounds && readColdMs; r++) {
    const t0 = performance.now();
    try {
      await run('dd', [`if=${file}`, 'of=/dev/null', 'bs=4M', 'iflag=direct', 'status=none']);
      readColdMs.push(performance.now() - t0);
    } catch {
      readColdMs = null; // no O_DIRECT on this file system
    }
  }
  fs.rmSync(file, { force: true });

  // (c) SHA-256 in memory, 1 MiB updates.
  const sha256Ms: number[] = [];
  for (let r = 0; r < rounds; r++) {
    const t0 = performance.now();
    const hash = createHash('sha256');
    for (let done = 0; done < bytes;) {
      const chunk = chunkAt(done, Math.min(MiB, bytes - done));
      hash.update(chunk);
      done += chunk.length;
    }
    hash.digest();
    sha256Ms.push(performance.now() - t0);
  }

  // (d) a plain `tar` of the same workspace to a file, fsynced: what a straightforward copy costs; and its
  // extraction into a fresh directory (no fsync, like the engine's restore).
  const tarFile = path.join(dir, 'workspace.tar');
  const tarCreateMs: number[] = [];
  const tarExtractMs: number[] = [];
  let tarBytes = 0;
  for (let r = 0; r < rounds; r++) {
    fs.rmSync(tarFile, { force: true });
    const t0 = performance.now();
    await run('tar', ['-cf', tarFile, '-C', seedDir, '.']);
    fsyncPath(tarFile);
    tarCreateMs.push(performance.now() - t0);
    tarBytes = fs.statSync(tarFile).size;
  }
  for (let r = 0; r < rounds; r++) {
    const target = path.join(dir, `extract-${r}`);
    fs.mkdirSync(target);
    const t0 = performance.now();
    await run('tar', ['-xf', tarFile, '-C', target]);
    tarExtractMs.push(performance.now() - t0);
    fs.rmSync(target, { recursive: true, force: true });
  }
  fs.rmSync(tarFile, { force: true });
  return { bytes, writeMs, readWarmMs, readColdMs, sha256Ms, tarCreateMs, tarBytes, tarExtractMs };
}

// ---- the engine --------------------------------------------------------------------------------------------

type OpName =
  | 'checkpoint'
  | 'pause'
  | 'resume'
  | 'checkpoint2'
  | 'checkpointChanged'
  | 'stop'
  | 'direct-capture'
  | 'direct-restore';

interface OpRecord {
  op: OpName;
  round: number;
  ms: number;
  bytes: number;
  rssBefore: number;
  rssPeak: number;
  samples: number;
  maxRssBefore: number;
  maxRssAfter: number;
  cpuUserMs: number;
  cpuSystemMs: number;
  loopDelayMaxMs: number;
  machineBusyMs: number;
  serverCpuMs: number;
  gcMajor: number;
  gcMajorMs: number;
  gcOtherMs: number;
  /** Milliseconds from the client call to each probe event. */
  at: Record<string, number>;
  progressCalls: number;
  progressMs: number;
}

interface RoundCheck {
  round: number;
  original: TreeDigest;
  restored: TreeDigest;
  pidAlive: boolean;
  cwdMatches: boolean;
  stateAfterCheckpoint: string | undefined;
  oldPidGone: boolean;
}

async function timedOp<T>(
  probe: Probe,
  op: OpName,
  round: number,
  fn: () => Promise<T>,
  bytesOf: (result: T) => number,
): Promise<{ result: T; record: OpRecord }> {
  probe.reset();
  const m = await measure(fn);
  const at: Record<string, number> = {};
  for (const [name, t] of probe.events) at[name] = t - m.t0;
  return {
    result: m.result,
    record: {
      op,
      round,
      ms: m.ms,
      bytes: bytesOf(m.result),
      rssBefore: m.rssBefore,
      rssPeak: m.rssPeak,
      samples: m.samples,
      maxRssBefore: m.maxRssBefore,
      maxRssAfter: m.maxRssAfter,
      cpuUserMs: m.cpuUserMs,
      cpuSystemMs: m.cpuSystemMs,
      loopDelayMaxMs: m.loopDelayMaxMs,
      machineBusyMs: m.machineBusyMs,
      serverCpuMs: m.serverCpuMs,
      gcMajor: m.gcMajor,
      gcMajorMs: m.gcMajorMs,
      gcOtherMs: m.gcOtherMs,
      at,
      progressCalls: probe.progressCalls,
      progressMs: probe.progressMs,
    },
  };
}

async function waitUntilRunning(handle: SessionHandle): Promise<{ location: string; pid: number }> {
  const deadline = Date.now() + 60_000;
  for (;;) {
    const status = await handle.status();
    if (status.phase === 'running' && status.runtime?.pid !== undefined) {
      return { location: status.runtime.location, pid: status.runtime.pid };
    }
    if (status.phase === 'failed') throw new Error(`session failed to start: ${status.failure?.message}`);
    if (Date.now() > deadline) throw new Error(`session still ${status.phase} after 60 s`);
    await delay(50);
  }
}

async function engineRound(
  sessions: SessionClient,
  probe: Probe,
  cleanup: Cleanup,
  seedDir: string,
  blobCount: number,
  snapshotsDir: string,
  round: number,
  runId: string,
): Promise<{ records: OpRecord[]; check: RoundCheck }> {
  const sessionId = `bench-${runId}-${round}`;
  const handle = await sessions.start({
    sessionId,
    runtime: { kind: 'workspace', command: COMMAND, files: SMALL_FILES, stopGraceMs: 2_000 },
    description: 'bench/run.ts',
  });
  let ended = false;
  cleanup.add(`session ${sessionId}`, async () => {
    if (ended) return;
    // The server is in memory and goes away with the bench: terminating is enough if the stop cannot finish.
    // The session's process is stopped in any case by the workers' cleanup (WorkspaceRuntime.stopAll).
    await withTimeout(handle.stop({ checkpoint: false }), 10_000, 'stop').catch(() => handle.workflow.terminate());
  });
  const started = await waitUntilRunning(handle);
  seedWorkspace(seedDir, started.location, blobCount);

  const records: OpRecord[] = [];
  /** Times one control of this round and keeps its record. */
  const op = async <T>(name: OpName, fn: () => Promise<T>, bytesOf: (result: T) => number): Promise<T> => {
    const { result, record } = await timedOp(probe, name, round, fn, bytesOf);
    records.push(record);
    return result;
  };
  const checkpointOp = (name: OpName) =>
    op(
      name,
      () => handle.checkpoint(),
      (ref) => ref.size,
    );

  await checkpointOp('checkpoint');
  // The group must have been thawed when the capture ended (S: sleeping in `sleep 1`, R: running).
  const stateAfterCheckpoint = processState(started.pid);

  // One file rewritten: the runtime names the others as unchanged since the checkpoint just taken.
  const rewritten = path.join(started.location, blobName(0));
  fs.writeFileSync(rewritten, randomBytes(fs.statSync(rewritten).size));
  // What pause captures and resume must bring back.
  const original = await treeDigest(started.location);
  await checkpointOp('checkpointChanged');

  await op(
    'pause',
    () => handle.pause(),
    (ref) => ref.size,
  );
  const oldPidGone = processState(started.pid) === undefined;

  const resumed = await op(
    'resume',
    () => handle.resume(),
    (r) => r.restoredFrom.size,
  );
  const { pid, location } = resumed.runtime;
  const state = pid === undefined ? undefined : processState(pid);
  const pidAlive = state !== undefined && state !== 'Z' && state !== 'X';
  let cwdMatches = false;
  try {
    cwdMatches = pid !== undefined && fs.readlinkSync(`/proc/${pid}/cwd`) === location;
  } catch {
    cwdMatches = false;
  }
  const restored = await treeDigest(location);

  await checkpointOp('checkpoint2');

  await op(
    'stop',
    () => handle.stop({ checkpoint: false }),
    () => 0,
  );
  ended = true;
  // Three checkpoints of the full state per round: free the disk (and its page cache) for the next round.
  await fsp.rm(path.join(snapshotsDir, sessionId), { recursive: true, force: true });
  return {
    records,
    check: { round, original, restored, pidAlive, cwdMatches, stateAfterCheckpoint, oldPidGone },
  };
}

/**
 * The engine's data path without Temporal: the same runtime and store classes called directly, in this process,
 * on a workspace seeded the same way. What the engine costs by itself, and so what Temporal and the activity
 * around it add.
 */
async function directRound(
  runtime: WorkspaceRuntime,
  store: SnapshotStore,
  probe: Probe,
  seedDir: string,
  blobCount: number,
  round: number,
): Promise<OpRecord[]> {
  const sessionId = `direct-${round}`;
  const spec: WorkspaceRuntimeSpec = { kind: 'workspace', command: COMMAND, files: SMALL_FILES, stopGraceMs: 2_000 };
  const started = await runtime.start({ sessionId, instanceId: `${sessionId}-a`, spec });
  try {
    seedWorkspace(seedDir, started.location, blobCount);
    const checkpoint = {
      checkpointId: `${sessionId}-1`,
      sessionId,
      sequence: 1,
      parentId: null,
      runtime: { kind: runtime.kind, version: runtime.version },
      trigger: 'manual' as const,
    };
    const capture = await timedOp(
      probe,
      'direct-capture',
      round,
      async () => store.write(checkpoint, await runtime.capture(started.instanceId)),
      (manifest) => manifest.size,
    );
    const restore = await timedOp(
      probe,
      'direct-restore',
      round,
      async () => {
        const { stream } = await store.open(sessionId, checkpoint.checkpointId);
        return runtime.restore({ sessionId, instanceId: `${sessionId}-b`, spec, state: stream });
      },
      () => capture.result.size,
    );
    await runtime.dispose(restore.result.instanceId);
    await store.delete(sessionId, checkpoint.checkpointId);
    return [capture.record, restore.record];
  } finally {
    await runtime.dispose(started.instanceId);
  }
}

// ---- report ------------------------------------------------------------------------------------------------

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

const mibps = (bytes: number, ms: number): number => bytes / MiB / (ms / 1000);
const fmtMiBps = (v: number): string => `${v.toFixed(v >= 100 ? 0 : 1)} MiB/s`;
const fmtMs = (ms: number): string =>
  ms >= 1000 ? `${(ms / 1000).toFixed(2)} s` : `${ms.toFixed(ms >= 10 ? 0 : 1)} ms`;
const fmtMiB = (bytes: number): string => `${(bytes / MiB).toFixed(1)} MiB`;
const fmtSigned = (bytes: number): string => `${bytes >= 0 ? '+' : '−'}${fmtMiB(Math.abs(bytes))}`;

/** "median (min–max)" of durations. */
function spread(ms: number[]): string {
  if (ms.length === 1) return fmtMs(ms[0]!);
  return `${fmtMs(median(ms))} (${fmtMs(Math.min(...ms))}–${fmtMs(Math.max(...ms))})`;
}

/** Throughput of the median time, with the range of times. */
function throughput(bytes: number, ms: number[]): string {
  return `${fmtMiBps(mibps(bytes, median(ms)))} · ${spread(ms)}`;
}

function ratio(engineMs: number, baselineMs: number): string {
  return `${(baselineMs / engineMs).toFixed(2)}×`;
}

interface Machine {
  cpu: string;
  cores: number;
  memory: string;
  node: string;
  kernel: string;
  temporal: string;
  tempRoot: string;
  tempWhy: string;
  df: string;
  loadBefore: string;
  loadAfter: string;
}

/** A probe event, the first of several that happened, or null: the call (as a start) or its return (as an end). */
type Events = string | string[] | null;

/** Median of the spans between two probe events. */
function phaseSpan(records: OpRecord[], from: Events, to: Events): string {
  const at = (r: OpRecord, events: Events, none: number): number | undefined => {
    if (events === null) return none;
    for (const name of typeof events === 'string' ? [events] : events) if (r.at[name] !== undefined) return r.at[name];
    return undefined;
  };
  const spans: number[] = [];
  for (const r of records) {
    const start = at(r, from, 0);
    const end = at(r, to, r.ms);
    if (start !== undefined && end !== undefined) spans.push(end - start);
  }
  return spans.length ? fmtMs(median(spans)) : '—';
}

function report(options: Options, machine: Machine, b: Baselines, records: OpRecord[], checks: RoundCheck[]): string {
  const of = (op: OpName) => records.filter((r) => r.op === op);
  const ms = (op: OpName) => of(op).map((r) => r.ms);
  const stateBytes = median(of('checkpoint').map((r) => r.bytes));
  const write = median(b.writeMs);
  const readWarm = median(b.readWarmMs);
  const sha = median(b.sha256Ms);
  const tarC = median(b.tarCreateMs);
  const tarX = median(b.tarExtractMs);
  // Resume's physical floor: the slower of reading the bytes and hashing them (at the same byte count).
  const readOrHash = Math.max(readWarm, sha);
  const scale = (baselineMs: number, baselineBytes: number) => (baselineMs * stateBytes) / baselineBytes;

  const rows: string[][] = [];
  const row = (...cells: string[]) => rows.push(cells);
  row('**baseline** write + fsync, one file', throughput(b.bytes, b.writeMs), '—', '—');
  row('**baseline** read, warm (page cache)', throughput(b.bytes, b.readWarmMs), '—', '—');
  if (b.readColdMs) row('**baseline** read, cold (O_DIRECT, dd)', throughput(b.bytes, b.readColdMs), '—', '—');
  row('**baseline** SHA-256 in memory', throughput(b.bytes, b.sha256Ms), '—', '—');
  row('**baseline** `tar -c` + fsync of the workspace', throughput(b.tarBytes, b.tarCreateMs), '—', '—');
  row('**baseline** `tar -x` into a fresh dir (no fsync)', throughput(b.tarBytes, b.tarExtractMs), '—', '—');
  for (const [op, label] of [
    ['checkpoint', 'checkpoint() of the running session'],
    ['checkpointChanged', 'checkpoint() after one file was rewritten'],
    ['checkpoint2', 'checkpoint() after resume'],
    ['pause', 'pause() (checkpoint + stop + dispose)'],
  ] as const) {
    const t = ms(op);
    row(
      label,
      throughput(stateBytes, t),
      `write+fsync ${fmtMiBps(mibps(b.bytes, write))}`,
      ratio(median(t), scale(write, b.bytes)),
    );
  }
  row(
    'checkpoint() vs plain tar',
    spread(ms('checkpoint')),
    `tar -c + fsync ${fmtMs(scale(tarC, b.tarBytes))}`,
    ratio(median(ms('checkpoint')), scale(tarC, b.tarBytes)),
  );
  row(
    'resume() (call → restored process running)',
    throughput(stateBytes, ms('resume')),
    `min(read ${fmtMiBps(mibps(b.bytes, readWarm))}, sha256 ${fmtMiBps(mibps(b.bytes, sha))})`,
    ratio(median(ms('resume')), scale(readOrHash, b.bytes)),
  );
  row(
    'resume() vs plain tar -x',
    spread(ms('resume')),
    `tar -x ${fmtMs(scale(tarX, b.tarBytes))}`,
    ratio(median(ms('resume')), scale(tarX, b.tarBytes)),
  );
  row(
    'capture → store.write alone¹ (no Temporal, no heartbeats)',
    throughput(stateBytes, ms('direct-capture')),
    `write+fsync ${fmtMiBps(mibps(b.bytes, write))}`,
    ratio(median(ms('direct-capture')), scale(write, b.bytes)),
  );
  row(
    'store.open → restore alone¹ (no Temporal)',
    throughput(stateBytes, ms('direct-restore')),
    'min(read, sha256)',
    ratio(median(ms('direct-restore')), scale(readOrHash, b.bytes)),
  );
  row('stop() (no final checkpoint)', spread(ms('stop')), '—', '—');
  for (const op of ['checkpoint', 'resume'] as const) {
    const deltas = of(op).map((r) => r.rssPeak - r.rssBefore);
    const maxGrowth = of(op).map((r) => r.maxRssAfter - r.maxRssBefore);
    row(
      `peak RSS − RSS before, during ${op}()`,
      `${fmtSigned(median(deltas))} (${fmtSigned(Math.min(...deltas))}…${fmtSigned(Math.max(...deltas))}); ${median(of(op).map((r) => r.samples))} samples`,
      `state ${fmtMiB(stateBytes)}`,
      `${(median(deltas) / stateBytes).toFixed(2)} of state`,
    );
    row(`growth of maxRSS during ${op}()`, `${fmtSigned(Math.max(...maxGrowth))} (max over rounds)`, '—', '—');
  }
  const rssBefore = median(records.map((r) => r.rssBefore));
  const ok = checks.filter(
    (c) =>
      c.pidAlive &&
      c.cwdMatches &&
      c.oldPidGone &&
      c.stateAfterCheckpoint !== undefined &&
      c.stateAfterCheckpoint !== 'T' &&
      c.original.sha256 === c.restored.sha256 &&
      c.original.bytes === c.restored.bytes,
  );
  const first = checks[0]!;
  row(
    'restore verified (pid alive, cwd, tree sha256 + size)',
    `${ok.length}/${checks.length} rounds ok · ${first.original.files} files, ${first.original.bytes} bytes`,
    '—',
    '—',
  );

  const table = (header: string[], body: string[][]) =>
    [
      `| ${header.join(' | ')} |`,
      `|${header.map(() => '---').join('|')}|`,
      ...body.map((r) => `| ${r.join(' | ')} |`),
    ].join('\n');

  // Where the time goes: medians of spans between probe events, from the client's call to its return.
  const columns: OpRecord[][] = [
    of('checkpoint'),
    of('checkpoint2'),
    of('pause'),
    of('resume'),
    of('direct-capture'),
    of('direct-restore'),
  ];
  const breakdown: string[][] = [];
  const spanRow = (label: string, from: Events, to: Events) =>
    breakdown.push([label, ...columns.map((rs) => phaseSpan(rs, from, to))]);
  const fnRow = (label: string, fn: (rs: OpRecord[]) => string) =>
    breakdown.push([label, ...columns.map((rs) => (rs.length ? fn(rs) : '—'))]);
  spanRow('call → engine starts (update, workflow task, activity dispatch)', null, ['capture.call', 'open.call']);
  spanRow('freeze: SIGSTOP until /proc shows the group stopped', 'capture.call', 'capture.frozen');
  spanRow('frozen → first byte in the store', 'capture.frozen', 'write.firstByte');
  spanRow('stream: tar pack → sha256 → file (until the last byte)', 'capture.frozen', 'capture.packed');
  spanRow('process frozen in total (SIGSTOP → SIGCONT)', 'capture.call', 'capture.thawed');
  spanRow('last byte → data + manifest durable (fsync, rename, dir fsync)', 'capture.packed', 'write.done');
  spanRow('stop the process (SIGTERM → exit)', 'stop.call', 'stop.done');
  spanRow('dispose (remove the workspace dir)', 'dispose.call', 'dispose.done');
  spanRow('stream: read → sha256 verify → tar extract (until the last byte)', 'open.call', 'open.verified');
  spanRow('last byte → process running (last file, dir modes, spawn)', 'open.verified', 'restore.started');
  spanRow(
    'engine done → result in hand (activity completion, workflow task, update)',
    ['dispose.done', 'write.done', 'restore.started'],
    null,
  );
  fnRow('**total (wall time)**', (rs) => spread(rs.map((r) => r.ms)));
  fnRow('CPU of this process, user + system (all its threads: streams, hashing, workers, Temporal core)', (rs) => {
    const user = median(rs.map((r) => r.cpuUserMs));
    const sys = median(rs.map((r) => r.cpuSystemMs));
    return `${fmtMs(user)} + ${fmtMs(sys)} (${(((user + sys) / median(rs.map((r) => r.ms))) * 100).toFixed(0)}% of wall)`;
  });
  fnRow('CPU of the Temporal server · of everything else (kernel threads, other users)', (rs) => {
    const server = median(rs.map((r) => r.serverCpuMs));
    const rest = median(rs.map((r) => r.machineBusyMs - r.cpuUserMs - r.cpuSystemMs - r.serverCpuMs));
    const busy = median(rs.map((r) => r.machineBusyMs)) / (median(rs.map((r) => r.ms)) * machine.cores);
    return `${fmtMs(server)} · ${fmtMs(Math.max(0, rest))} (machine ${(busy * 100).toFixed(0)}% busy)`;
  });
  fnRow(
    'GC pauses on the main thread: major (count · time) · minor and incremental',
    (rs) =>
      `${median(rs.map((r) => r.gcMajor))} · ${fmtMs(median(rs.map((r) => r.gcMajorMs)))} · ` +
      fmtMs(median(rs.map((r) => r.gcOtherMs))),
  );
  fnRow('max event-loop delay during the call', (rs) => fmtMs(median(rs.map((r) => r.loopDelayMaxMs))));
  fnRow('progress callbacks (one per chunk) × avg chunk · time inside them (heartbeats)', (rs) => {
    const calls = median(rs.map((r) => r.progressCalls));
    const spent = median(rs.map((r) => r.progressMs));
    return calls ? `${calls} × ${(stateBytes / calls / 1024).toFixed(0)} KiB · ${fmtMs(spent)}` : '—';
  });

  const checkLines = checks.map(
    (c) =>
      `- round ${c.round}: restored pid alive ${c.pidAlive}, cwd = restored dir ${c.cwdMatches}, old pid gone ${c.oldPidGone}, ` +
      `state after checkpoint ${c.stateAfterCheckpoint ?? 'gone'}, tree sha256 ${c.original.sha256 === c.restored.sha256 ? 'equal' : 'DIFFERENT'} ` +
      `(${c.restored.files} files, ${c.restored.bytes} bytes)`,
  );

  return [
    `# durable-sessions benchmark`,
    '',
    `${new Date().toISOString()} · workspace ${options.sizeMiB} MiB: ${blobSizes(options).length} random files + ` +
      `${Object.keys(SMALL_FILES).length} small text files · checkpoint size ${stateBytes} bytes · ${options.rounds} rounds ` +
      `(one session each) · command \`${COMMAND.join(' ')}\``,
    '',
    table(['metric', 'value: median (min–max)', 'baseline', 'ratio'], rows),
    '',
    'ratio = engine throughput ÷ baseline throughput at the same byte count (= baseline time ÷ engine time); ' +
      '1.00× runs at the baseline, 0.50× takes twice as long. The workspace files are in the page cache when ' +
      'captured (written and fsynced just before), and the checkpoint is in the page cache when restored. ' +
      `RSS is of this process, which also runs the workers; it was ${fmtMiB(rssBefore)} before an operation (median).`,
    '',
    '## Where the time goes (medians, from the probes around the runtime and the store)',
    '',
    table(
      ['span', 'checkpoint', 'checkpoint after resume', 'pause', 'resume', 'capture alone¹', 'restore alone¹'],
      breakdown,
    ),
    '',
    "¹ The engine's data path without Temporal, in the same process: `WorkspaceRuntime.capture` → " +
      '`ChunkedSnapshotStore.write`, and `ChunkedSnapshotStore.open` → `WorkspaceRuntime.restore`, called directly (no ' +
      'activity, so no heartbeat per chunk), on a session seeded the same way.',
    '',
    '## Checks',
    '',
    ...checkLines,
    '',
    '## Machine',
    '',
    `- CPU: ${machine.cpu} × ${machine.cores} · memory ${machine.memory} · node ${machine.node} · ${machine.kernel}`,
    `- Temporal: ${machine.temporal} (dev server, in memory, headless)`,
    `- temp dir: ${machine.tempRoot} — ${machine.tempWhy}`,
    `- load average before: ${machine.loadBefore} · after: ${machine.loadAfter}`,
    '',
    '```',
    machine.df,
    '```',
    '',
  ].join('\n');
}

// ---- main --------------------------------------------------------------------------------------------------

async function main(cleanup: Cleanup): Promise<void> {
  const options = parseOptions();
  const loadBefore = os
    .loadavg()
    .map((l) => l.toFixed(2))
    .join(' ');
  // The bench handles SIGINT/SIGTERM itself (cleanup stops sessions through the workers, so they must still run).
  Runtime.install({ logger: new DefaultLogger('WARN'), shutdownSignals: [] });

  const { base, why } = chooseTempBase();
  const root = fs.mkdtempSync(path.join(base, 'ds-bench-'));
  cleanup.add('temp dir', () => fsp.rm(root, { recursive: true, force: true }));
  const seedDir = path.join(root, 'seed');
  const snapshotsDir = path.join(root, 'snapshots');
  const sizes = blobSizes(options);
  const totalBytes = sizes.reduce((a, b) => a + b, 0);
  console.log(
    `bench: ${options.sizeMiB} MiB in ${sizes.length} files, ${options.rounds} rounds, temp dir ${root} (${why})`,
  );
  const [load1 = 0] = os.loadavg();
  if (load1 > os.cpus().length / 2) {
    console.warn(
      `bench: warning: load average ${load1.toFixed(2)} on ${os.cpus().length} cores: other work is running, ` +
        'expect noisy numbers (see the "everything else" CPU row)',
    );
  }

  writeSeed(seedDir, sizes);
  console.log('bench: measuring baselines…');
  const baselines = await measureBaselines(path.join(root, 'baseline'), seedDir, totalBytes, options.rounds);

  console.log('bench: starting the Temporal dev server and the workers…');
  const server = await startDevServer({
    port: await freePort(),
    uiPort: null,
    logFile: path.join(root, 'temporal.log'),
  });
  cleanup.add('dev server', () => server.stop());
  serverPid = server.process.pid;
  const bundle = await bundleWorkflowCode({
    workflowsPath: require.resolve('../src/workflows'),
    logger: { trace() {}, debug() {}, info() {}, warn: console.warn, error: console.error, log() {} },
  });
  const nativeConnection = await NativeConnection.connect({ address: server.address });
  cleanup.add('worker connection', () => nativeConnection.close());
  const connection = await Connection.connect({ address: server.address });
  cleanup.add('client connection', () => connection.close());

  const probe = new Probe();
  const runId = randomUUID().slice(0, 8);
  const taskQueue = `bench-${runId}`;
  const hostTaskQueue = `${taskQueue}@host-1`;
  const workspace = new ProbedWorkspaceRuntime(
    { rootDir: path.join(root, 'workspaces'), defaultStopGraceMs: 2_000 },
    probe,
  );
  const workers = await createWorkers({
    connection: nativeConnection,
    client: new Client({ connection }),
    namespace: 'default',
    taskQueue,
    hostTaskQueue,
    deps: {
      store: new ProbedStore(productionStore(snapshotsDir), probe),
      runtimes: { workspace, memory: new MemoryRuntime() },
      hostTaskQueue,
    },
    workflowBundle: { code: bundle.code },
  });
  const running = workers.run();
  running.catch((error: unknown) => console.error(`workers stopped: ${errorText(error)}`));
  cleanup.add('workers', async () => {
    workers.shutdown();
    await running.catch(() => undefined);
    await workspace.stopAll();
  });
  const sessions = new SessionClient({ client: new Client({ connection }), taskQueue });

  const direct = new ProbedWorkspaceRuntime(
    { rootDir: path.join(root, 'direct-workspaces'), defaultStopGraceMs: 2_000 },
    probe,
  );
  cleanup.add('direct runtime', () => direct.stopAll());
  const directStore = new ProbedStore(productionStore(path.join(root, 'direct-snapshots')), probe);

  const records: OpRecord[] = [];
  const checks: RoundCheck[] = [];
  for (let round = 1; round <= options.rounds; round++) {
    const r = await engineRound(sessions, probe, cleanup, seedDir, sizes.length, snapshotsDir, round, runId);
    const alone = await directRound(direct, directStore, probe, seedDir, sizes.length, round);
    records.push(...r.records, ...alone);
    checks.push(r.check);
    const line = [...r.records, ...alone].map((rec) => `${rec.op} ${fmtMs(rec.ms)}`).join(', ');
    console.log(`bench: round ${round}/${options.rounds}: ${line}`);
  }

  let temporal = 'unknown';
  try {
    temporal = execFileSync(DEFAULT_TEMPORAL_BIN, ['--version'], { encoding: 'utf8' }).trim();
  } catch {
    // only for the report
  }
  const machine: Machine = {
    cpu: os.cpus()[0]?.model ?? 'unknown',
    cores: os.cpus().length,
    memory: `${(os.totalmem() / 1024 ** 3).toFixed(1)} GiB`,
    node: process.version,
    kernel: `${os.type()} ${os.release()}`,
    temporal,
    tempRoot: root,
    tempWhy: why,
    df: dfLine(root).text,
    loadBefore,
    loadAfter: os
      .loadavg()
      .map((l) => l.toFixed(2))
      .join(' '),
  };
  const markdown = report(options, machine, baselines, records, checks);
  console.log(`\n${markdown}`);
  fs.mkdirSync(RESULTS_DIR, { recursive: true });
  fs.writeFileSync(path.join(RESULTS_DIR, 'results.md'), markdown);
  console.log(`bench: written to ${path.relative(process.cwd(), path.join(RESULTS_DIR, 'results.md'))}`);
}

const cleanup = new Cleanup();
/** Set by SIGINT/SIGTERM: whatever the run was doing then fails, and that is not worth reporting. */
let interrupted = false;
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    interrupted = true;
    console.error(`bench: ${signal}, cleaning up…`);
    void cleanup.run().finally(() => process.exit(130));
  });
}
main(cleanup)
  .then(
    () => 0,
    (error: unknown) => {
      if (!interrupted) console.error(`bench failed: ${errorText(error)}`);
      return 1;
    },
  )
  .then(async (code) => {
    await cleanup.run();
    // The Temporal native runtime can keep the event loop alive after everything is closed.
    process.exit(interrupted ? 130 : code);
  })
  .catch((error: unknown) => {
    console.error(errorText(error));
    process.exit(1);
  });
