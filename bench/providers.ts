/**
 * The provider protocol against a raw HTTP transfer of the same bytes between the same two processes, in one run.
 *
 * A sandbox host process (`createSandboxHost`, served as `npm run sandbox-host` serves it, on its own root under a
 * temporary directory) holds a sandbox whose directory holds the state: incompressible bytes (an AES-CTR keystream)
 * and, without `--quick`, text-like log lines. This process is the worker. Per state, in turns (the order reversed
 * every other round), the same tar bytes move:
 *
 * - **raw** (the baseline): a plain HTTP GET of the export's tar, served by a bare `node:http` server in the host
 *   process from a file on the host's disk, written by a bare `http.get` into a file beside the store; and a plain PUT
 *   of that file, written by the host into a file on its disk. Storage to storage, as a checkpoint and a restore
 *   move them, with nothing between the socket and the file;
 * - **ours**: `RemoteRuntime.capture` (the host freezes the sandbox and tars its directory) into the snapshot engine
 *   (chunked, deduplicated, compressed where it pays, encrypted) on a file-system store in tmpfs; and the store's
 *   stream into `RemoteRuntime.restore` (an import the host extracts into a new sandbox and starts);
 * - where the time goes: the protocol alone (an export read and dropped, an import of the tar file) and the engine
 *   alone (the tar file into the store, the store's stream dropped), with the CPU of both processes per phase.
 *
 * Each round writes into a fresh store (a second checkpoint of the same bytes would be deduplicated away); the best
 * round counts, and the spread of all is printed beside it. Then the peak RSS (VmHWM) of a fresh worker-side process
 * that exports a 2 GiB sandbox through the engine into a store, restores it into a new sandbox, and writes the same
 * amount of bytes it makes itself into a store (the engine alone); and the host's peak meanwhile.
 *
 *   npx tsx bench/providers.ts           # 256 MiB, 3 rounds, RSS at 2 GiB (2 runs)
 *   npx tsx bench/providers.ts --quick   # 64 MiB incompressible only, 1 round, RSS at 256 MiB
 *   --size-mib N, --rss-mib N, --rounds N (0: the RSS rows only), --text (the text-like state with --quick)
 *
 * Nothing here asserts a time: it prints what it measured, with PASS/MISS beside each target.
 */
import { execFile, execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { createCipheriv, createHash, randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import * as http from 'node:http';
import type { AddressInfo } from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import { Readable, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { parseArgs, promisify } from 'node:util';
import { freePort } from '../src/dev-server';
import { RemoteRuntime } from '../src/providers/remote-runtime';
import { ChunkedSnapshotStore, Keyring } from '../src/snapshots';
import { table } from './markdown';
import { cpuMs } from './scale/procfs';

const { values } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    rounds: { type: 'string' },
    'size-mib': { type: 'string' },
    'rss-mib': { type: 'string' },
    text: { type: 'boolean' },
    host: { type: 'boolean', default: false },
    job: { type: 'string' },
  },
  strict: true,
});

const MiB = 1024 * 1024;
const execFileAsync = promisify(execFile);
const PIECE = MiB;
const SESSION = 'bench';
const SPEC = { kind: 'remote' as const, command: ['sleep', '3600'], stopGraceMs: 0 };
/** Files of the sandbox's state: one file per 64 MiB, so that the tar holds more than one record. */
const FILE_BYTES = 64 * MiB;

// ---------------------------------------------------------------------------------------------------------------
// The host process: the protocol's app served as src/providers/sandbox-host.ts serves it, and a bare HTTP server
// beside it for the raw transfer.

async function runHost(): Promise<void> {
  // Loaded here: the worker's side (this process's other roles, and the RSS jobs above all) never loads the host's.
  const { serve } = await import('@hono/node-server');
  const { createSandboxHost, MAX_HEADER_BYTES } = await import('../src/providers/host-app');
  const env = process.env;
  const rootDir = env.DS_SANDBOX_HOST_ROOT!;
  const rawDir = env.BENCH_RAW_DIR!;
  const host = createSandboxHost({ rootDir, token: env.DS_SANDBOX_HOST_TOKEN!, log: () => undefined });
  await host.runtime.recoverHost();
  process.on('exit', () => host.runtime.killAll());
  const server = serve({
    fetch: host.app.fetch,
    port: Number(env.DS_SANDBOX_HOST_PORT),
    hostname: '127.0.0.1',
    serverOptions: { maxHeaderSize: MAX_HEADER_BYTES, requestTimeout: 0 },
  });
  await new Promise<void>((resolve, reject) => server.once('listening', resolve).once('error', reject));
  // The raw baseline: a file streamed to the socket, the socket streamed to a file. No auth, no routing, no tar.
  const raw = http.createServer((req, res) => {
    const file = path.join(rawDir, path.basename(req.url ?? 'none'));
    const done = (error?: unknown) => {
      res.statusCode = error ? 500 : 200;
      res.end();
    };
    if (req.method === 'GET') pipeline(fs.createReadStream(file), res).catch(() => res.destroy());
    else pipeline(req, fs.createWriteStream(file)).then(() => done(), done);
  });
  raw.requestTimeout = 0;
  await new Promise<void>((resolve) => raw.listen(Number(env.BENCH_RAW_PORT), '127.0.0.1', resolve));
  console.log(`sandbox host listening on ${(server.address() as AddressInfo).port}`);
  process.stdin.on('end', () => process.exit(0)).on('error', () => process.exit(0));
  process.stdin.resume();
  process.once('SIGTERM', () => {
    server.close();
    raw.close();
    void host.runtime.stopAll().finally(() => process.exit(0));
  });
}

interface HostRef {
  url: string;
  rawUrl: string;
  token: string;
  rootDir: string;
  rawDir: string;
}

async function startHost(rootDir: string, rawDir: string): Promise<HostRef & { child: ChildProcess }> {
  const [port, rawPort] = [await freePort(), await freePort()];
  const token = randomBytes(24).toString('base64url');
  const child = spawn(process.execPath, ['--import', 'tsx', __filename, '--host'], {
    env: {
      ...process.env,
      DS_SANDBOX_HOST_PORT: String(port),
      DS_SANDBOX_HOST_ROOT: rootDir,
      DS_SANDBOX_HOST_TOKEN: token,
      BENCH_RAW_DIR: rawDir,
      BENCH_RAW_PORT: String(rawPort),
    },
    // Its stdin is this process's pipe: however the bench ends, the host and its sandboxes end with it.
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  await new Promise<void>((resolve, reject) => {
    let out = '';
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString();
      if (out.includes('listening on')) resolve();
    });
    child.once('exit', (code) => reject(new Error(`the sandbox host exited (${code}) before it listened`)));
  });
  return { url: `http://127.0.0.1:${port}`, rawUrl: `http://127.0.0.1:${rawPort}`, token, rootDir, rawDir, child };
}

// ---------------------------------------------------------------------------------------------------------------
// The state.

type StateKind = 'random' | 'text';

/** Unique bytes, made fast: an AES-CTR keystream (incompressible) or numbered log lines (text-like, compressible). */
function* stateBytes(kind: StateKind, seed: string, size: number): Generator<Buffer> {
  const cipher = createCipheriv('aes-256-ctr', createHash('sha256').update(seed).digest(), Buffer.alloc(16));
  const zeros = Buffer.alloc(PIECE);
  let line = 0;
  for (let done = 0; done < size; done += PIECE) {
    const n = Math.min(PIECE, size - done);
    if (kind === 'random') {
      yield cipher.update(zeros.subarray(0, n));
      continue;
    }
    const parts: string[] = [];
    let length = 0;
    while (length < n) {
      const s =
        `2026-12-06T12:00:${String(line % 60).padStart(2, '0')}Z INFO session=${line % 977} step=${line} ` +
        `tool=shell exit=0 msg="ran \`npm test\` in /work/${line % 31}"\n`;
      parts.push(s);
      length += s.length;
      line++;
    }
    yield Buffer.from(parts.join('')).subarray(0, n);
  }
}

/** Writes the state into a sandbox's directory, as its command would have: files of {@link FILE_BYTES}. */
async function fillSandbox(dir: string, kind: StateKind, size: number): Promise<void> {
  for (let at = 0, n = 0; at < size; at += FILE_BYTES, n++) {
    const bytes = Math.min(FILE_BYTES, size - at);
    await pipeline(stateBytes(kind, `${kind}-${n}`, bytes), fs.createWriteStream(path.join(dir, `part-${n}.bin`)));
  }
}

// ---------------------------------------------------------------------------------------------------------------
// The phases, in this process (the worker's side).

interface Phase {
  seconds: number;
  bytes: number;
  /** CPU of this process (all its threads) and of the host process while the phase ran. */
  cpuSeconds: number;
  hostCpuSeconds: number;
}

function counted(onBytes: (n: number) => void) {
  return new Writable({
    write(chunk: Buffer, _encoding, done) {
      onBytes(chunk.length);
      done();
    },
  });
}

async function measure(hostPid: number, fn: () => Promise<number>): Promise<Phase> {
  // The last phase's dirty pages (the host's disk) are written back now, not during this one.
  execFileSync('sync');
  const hostBefore = cpuMs(hostPid);
  const cpu = process.cpuUsage();
  const started = process.hrtime.bigint();
  const bytes = await fn();
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  const { user, system } = process.cpuUsage(cpu);
  return { seconds, bytes, cpuSeconds: (user + system) / 1e6, hostCpuSeconds: (cpuMs(hostPid) - hostBefore) / 1000 };
}

function rawGet(url: string, file: string): Promise<number> {
  return new Promise((resolve, reject) => {
    http
      .get(url, (res) => {
        if (res.statusCode !== 200) return reject(new Error(`raw GET answered ${res.statusCode}`));
        let bytes = 0;
        res.on('data', (chunk: Buffer) => (bytes += chunk.length));
        pipeline(res, fs.createWriteStream(file)).then(() => resolve(bytes), reject);
      })
      .on('error', reject);
  });
}

function rawPut(url: string, file: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const size = fs.statSync(file).size;
    const req = http.request(url, { method: 'PUT', headers: { 'content-length': size } }, (res) => {
      res.resume();
      res.on('end', () => (res.statusCode === 200 ? resolve(size) : reject(new Error(`raw PUT: ${res.statusCode}`))));
    });
    req.on('error', reject);
    pipeline(fs.createReadStream(file), req).catch(reject);
  });
}

const checkpoint = (checkpointId: string, runtime: RemoteRuntime) => ({
  checkpointId,
  sessionId: SESSION,
  sequence: 1,
  parentId: null,
  runtime: { kind: runtime.kind, version: runtime.version },
  trigger: 'manual' as const,
});

// ---------------------------------------------------------------------------------------------------------------
// The RSS job: a fresh worker-side process that exports a sandbox into a store, or restores it from there.

interface RssJob {
  op: 'idle' | 'capture' | 'restore' | 'engine';
  /** Of `engine`: the state's bytes, made in the process (no host, no HTTP). */
  bytes?: number;
  url: string;
  token: string;
  sandboxId: string;
  storeDir: string;
  masterKey: string;
}

interface RssResult {
  seconds: number;
  bytes: number;
  peakRssMiB: number;
  hostPeakRssMiB?: number;
}

async function runRssJob(job: RssJob): Promise<RssResult> {
  const runtime = new RemoteRuntime({ url: job.url, token: job.token });
  const store = new ChunkedSnapshotStore({ rootDir: job.storeDir, keyring: keyringOf(job.masterKey) });
  const started = process.hrtime.bigint();
  let bytes = 0;
  if (job.op === 'capture') {
    bytes = (await store.write(checkpoint('cp-rss', runtime), await runtime.capture(job.sandboxId))).size;
  } else if (job.op === 'engine') {
    const state = Readable.from(stateBytes('random', 'engine', job.bytes!));
    bytes = (await store.write(checkpoint('cp-engine', runtime), state)).size;
  } else if (job.op === 'restore') {
    const { manifest, stream } = await store.open(SESSION, 'cp-rss');
    await runtime.restore({ sessionId: SESSION, instanceId: job.sandboxId, spec: SPEC, state: stream });
    bytes = manifest.size;
  }
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  const hwm = /^VmHWM:\s+(\d+) kB$/m.exec(fs.readFileSync('/proc/self/status', 'utf8'));
  return { seconds, bytes, peakRssMiB: Number(hwm![1]) / 1024 };
}

async function inChild(job: RssJob): Promise<RssResult> {
  // Not execFileSync: this process's idle connections to the host must see the host close them meanwhile.
  const { stdout } = await execFileAsync(
    process.execPath,
    ['--import', 'tsx', __filename, '--job', JSON.stringify(job)],
    {
      encoding: 'utf8',
      maxBuffer: 16 * MiB,
    },
  );
  return JSON.parse(stdout.trim().split('\n').pop()!) as RssResult;
}

/** `fn`'s result with the host's peak RSS while it ran (VmHWM, reset first through clear_refs). */
async function withHostPeak(hostPid: number, fn: () => Promise<RssResult>): Promise<RssResult> {
  fs.writeFileSync(`/proc/${hostPid}/clear_refs`, '5');
  const result = await fn();
  const hwm = /^VmHWM:\s+(\d+) kB$/m.exec(fs.readFileSync(`/proc/${hostPid}/status`, 'utf8'));
  return { ...result, hostPeakRssMiB: Number(hwm![1]) / 1024 };
}

function keyringOf(masterKey: string): Keyring {
  return new Keyring([{ id: 'bench', key: Buffer.from(masterKey, 'hex') }]);
}

// ---------------------------------------------------------------------------------------------------------------

const mibs = (p: Phase) => p.bytes / MiB / p.seconds;
const verdict = (ok: boolean) => (ok ? 'PASS' : '**MISS**');
const spread = (list: Phase[]) => {
  const rates = list.map(mibs).sort((a, b) => a - b);
  return rates.length > 1 ? `${rates[0]!.toFixed(0)}–${rates.at(-1)!.toFixed(0)}` : rates[0]!.toFixed(0);
};

function printThroughput(results: Map<string, Phase[]>, kinds: StateKind[], size: number, rounds: number): void {
  const all = (name: string) => results.get(name)!;
  const best = (name: string) => all(name).reduce((a, b) => (a.seconds <= b.seconds ? a : b));
  const rows: string[][] = [];
  for (const kind of kinds) {
    const label = kind === 'random' ? 'incompressible' : 'text-like';
    for (const [what, rawName, oursName] of [
      ['checkpoint', 'raw-get', 'ours-capture'],
      ['restore', 'raw-put', 'ours-restore'],
    ] as const) {
      const raw = best(`${kind}:${rawName}`);
      const ours = best(`${kind}:${oursName}`);
      const ratio = mibs(ours) / mibs(raw);
      rows.push([
        `${label}: ${what}`,
        `${mibs(raw).toFixed(0)} (${spread(all(`${kind}:${rawName}`))})`,
        `${mibs(ours).toFixed(0)} (${spread(all(`${kind}:${oursName}`))})`,
        `${ratio.toFixed(2)}×`,
        verdict(ratio >= 0.8),
      ]);
    }
  }
  console.log(
    table(
      [`${size / MiB} MiB, best of ${rounds} (spread)`, 'raw HTTP (MiB/s)', 'ours (MiB/s)', 'ratio', '≥ 0.8'],
      rows,
    ),
  );
  const cpuRows: string[][] = [];
  for (const kind of kinds) {
    for (const [name, what] of [
      ['raw-get', 'raw GET: host file → socket → worker file'],
      ['protocol-export', 'protocol export alone: freeze, tar, HTTP, dropped'],
      ['engine-write', 'engine alone: tar file → store'],
      ['ours-capture', 'ours: export → engine → store'],
      ['raw-put', 'raw PUT: worker file → socket → host file'],
      ['protocol-import', 'protocol import alone: tar file → HTTP → extract'],
      ['engine-read', 'engine alone: store → dropped'],
      ['ours-restore', 'ours: store → engine → import'],
    ] as const) {
      const p = best(`${kind}:${name}`);
      cpuRows.push([
        `${kinds.length > 1 ? `${kind}: ` : ''}${what}`,
        `${p.seconds.toFixed(2)} s`,
        spread(all(`${kind}:${name}`)),
        `${p.cpuSeconds.toFixed(2)} s`,
        `${p.hostCpuSeconds.toFixed(2)} s`,
      ]);
    }
  }
  console.log(
    `\n${table(
      ['where the time goes (best run)', 'wall', 'MiB/s (spread)', 'CPU of the worker', 'CPU of the host'],
      cpuRows,
    )}`,
  );
}

async function main(): Promise<void> {
  const size = Number(values['size-mib'] ?? (values.quick ? 64 : 256)) * MiB;
  const rssBytes = Number(values['rss-mib'] ?? (values.quick ? 256 : 2048)) * MiB;
  const rounds = Number(values.rounds ?? (values.quick ? 1 : 3));
  const kinds: StateKind[] = rounds === 0 ? [] : (values.text ?? !values.quick) ? ['random', 'text'] : ['random'];
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ds-providers-bench-'));
  // The store and the worker's files: tmpfs where there is one, so that the worker's disk is not what is measured.
  const shmRoot = fs.existsSync('/dev/shm') ? '/dev/shm' : os.tmpdir();
  const shm = fs.mkdtempSync(path.join(shmRoot, 'ds-providers-bench-'));
  const rawDir = path.join(tmp, 'raw');
  fs.mkdirSync(rawDir);
  const host = await startHost(path.join(tmp, 'root'), rawDir);
  const hostPid = host.child.pid!;
  const runtime = new RemoteRuntime({ url: host.url, token: host.token, timeoutMs: 120_000 });
  const masterKey = randomBytes(32).toString('hex');
  const keyring = keyringOf(masterKey);
  let ids = 0;
  const sandboxDir = (id: string) => path.join(host.rootDir, SESSION, id);
  try {
    const results = new Map<string, Phase[]>();
    const keep = (name: string, phase: Phase, expected: number) => {
      if (phase.bytes !== expected) throw new Error(`${name} moved ${phase.bytes} bytes, not ${expected}`);
      results.set(name, [...(results.get(name) ?? []), phase]);
    };
    const tarSizes = new Map<StateKind, number>();
    for (const kind of kinds) {
      const source = `source-${kind}`;
      await runtime.start({ sessionId: SESSION, instanceId: source, spec: SPEC });
      await fillSandbox(sandboxDir(source), kind, size);
      // The tar the export makes, as the raw rows move it: on the host's disk and beside the store.
      const tarFile = path.join(shm, `${kind}.tar`);
      await pipeline(await runtime.capture(source), fs.createWriteStream(tarFile));
      fs.copyFileSync(tarFile, path.join(rawDir, `${kind}.tar`));
      const tarBytes = fs.statSync(tarFile).size;
      tarSizes.set(kind, tarBytes);
      for (let round = 0; round < rounds; round++) {
        const storeDir = path.join(shm, `store-${kind}-${round}`);
        const engineDir = path.join(shm, `engine-${kind}-${round}`);
        const store = new ChunkedSnapshotStore({ rootDir: storeDir, keyring });
        const engineStore = new ChunkedSnapshotStore({ rootDir: engineDir, keyring });
        const turns = <T>(list: T[]) => (round % 2 === 0 ? list : [...list].reverse());
        const down: [string, () => Promise<number>][] = [
          ['raw-get', () => rawGet(`${host.rawUrl}/${kind}.tar`, path.join(shm, 'download.tar'))],
          [
            'ours-capture',
            async () => (await store.write(checkpoint('cp-1', runtime), await runtime.capture(source))).size,
          ],
          [
            'protocol-export',
            async () => {
              let bytes = 0;
              await pipeline(
                await runtime.capture(source),
                counted((n) => (bytes += n)),
              );
              return bytes;
            },
          ],
          [
            'engine-write',
            async () =>
              (
                await engineStore.write(
                  checkpoint('cp-1', runtime),
                  fs.createReadStream(tarFile, { highWaterMark: MiB }),
                )
              ).size,
          ],
        ];
        for (const [name, fn] of turns(down)) keep(`${kind}:${name}`, await measure(hostPid, fn), tarBytes);
        fs.rmSync(path.join(shm, 'download.tar'), { force: true });

        const restored: string[] = [];
        const restore = async (state: Readable) => {
          const instanceId = `restored-${++ids}`;
          restored.push(instanceId);
          await runtime.restore({ sessionId: SESSION, instanceId, spec: SPEC, state });
          return tarBytes;
        };
        const up: [string, () => Promise<number>][] = [
          ['raw-put', () => rawPut(`${host.rawUrl}/upload.tar`, tarFile)],
          ['ours-restore', async () => restore((await store.open(SESSION, 'cp-1')).stream)],
          ['protocol-import', () => restore(fs.createReadStream(tarFile, { highWaterMark: MiB }))],
          [
            'engine-read',
            async () => {
              const { stream } = await engineStore.open(SESSION, 'cp-1');
              let bytes = 0;
              await pipeline(
                stream,
                counted((n) => (bytes += n)),
              );
              return bytes;
            },
          ],
        ];
        for (const [name, fn] of turns(up)) keep(`${kind}:${name}`, await measure(hostPid, fn), tarBytes);
        if (round === 0) {
          // What came back is what went out: the restored sandbox's files, byte for byte.
          const digest = async (dir: string) => {
            const hash = createHash('sha256');
            for (const name of fs.readdirSync(dir).sort()) {
              hash.update(name);
              for await (const chunk of fs.createReadStream(path.join(dir, name))) hash.update(chunk as Buffer);
            }
            return hash.digest('hex');
          };
          if ((await digest(sandboxDir(restored[0]!))) !== (await digest(sandboxDir(source)))) {
            throw new Error('a restored sandbox does not hold the bytes of its source');
          }
        }
        for (const id of restored) await runtime.dispose(id);
        fs.rmSync(path.join(rawDir, 'upload.tar'), { force: true });
        fs.rmSync(storeDir, { recursive: true, force: true });
        fs.rmSync(engineDir, { recursive: true, force: true });
      }
      await runtime.dispose(source);
      fs.rmSync(tarFile, { force: true });
      fs.rmSync(path.join(rawDir, `${kind}.tar`), { force: true });
    }

    // Peak RSS of a fresh worker-side process: an export of a large sandbox into a store, and its restore; and the
    // host's peak meanwhile (VmHWM, reset before each job).
    await runtime.start({ sessionId: SESSION, instanceId: 'source-rss', spec: SPEC });
    await fillSandbox(sandboxDir('source-rss'), 'random', rssBytes);
    const rssRuns = rounds > 1 ? 2 : 1;
    const job = { url: host.url, token: host.token, masterKey, bytes: rssBytes };
    const idle = await inChild({ ...job, op: 'idle', sandboxId: 'none', storeDir: path.join(shm, 'none') });
    const rss = { engine: [] as RssResult[], capture: [] as RssResult[], restore: [] as RssResult[] };
    for (let run = 0; run < rssRuns; run++) {
      const storeDir = path.join(shm, `store-rss-${run}`);
      rss.engine.push(
        await withHostPeak(hostPid, () => inChild({ ...job, op: 'engine', sandboxId: 'none', storeDir })),
      );
      fs.rmSync(storeDir, { recursive: true, force: true });
      rss.capture.push(
        await withHostPeak(hostPid, () => inChild({ ...job, op: 'capture', sandboxId: 'source-rss', storeDir })),
      );
      const sandboxId = `restored-rss-${run}`;
      rss.restore.push(await withHostPeak(hostPid, () => inChild({ ...job, op: 'restore', sandboxId, storeDir })));
      await runtime.dispose(sandboxId);
      fs.rmSync(storeDir, { recursive: true, force: true });
    }
    await runtime.dispose('source-rss');

    const load = os
      .loadavg()
      .map((l) => l.toFixed(1))
      .join(' ');
    console.log(
      `\nProvider protocol on loopback: ${size / MiB} MiB per state, ${rounds} round(s), store: a file-system ` +
        `ChunkedSnapshotStore in ${shmRoot} (encrypted); host root ${os.tmpdir()}; load average ${load}\n`,
    );
    if (rounds > 0) printThroughput(results, kinds, size, rounds);
    const rssRow = (what: string, runs: RssResult[]) => {
      const peaks = runs.map((r) => r.peakRssMiB).sort((x, y) => x - y);
      const hostPeaks = runs.map((r) => r.hostPeakRssMiB!).sort((x, y) => x - y);
      const range = (list: number[]) =>
        list.length > 1 ? `${list[0]!.toFixed(0)}–${list.at(-1)!.toFixed(0)}` : list[0]!.toFixed(0);
      const fastest = runs.reduce((x, y) => (x.seconds <= y.seconds ? x : y));
      return [
        what,
        `${(fastest.bytes / MiB / fastest.seconds).toFixed(0)} MiB/s`,
        range(peaks),
        verdict(peaks.at(-1)! < 256),
        range(hostPeaks),
      ];
    };
    console.log(
      `\n${table(
        [
          `${rssBytes / MiB} MiB, a fresh worker process (${rssRuns} run${rssRuns > 1 ? 's' : ''})`,
          'throughput',
          'worker peak RSS (VmHWM, MiB)',
          '< 256 MiB',
          'host peak RSS (MiB)',
        ],
        [
          rssRow('export → engine → store', rss.capture),
          rssRow('store → engine → import', rss.restore),
          rssRow('engine alone: bytes made in the process → store', rss.engine),
        ],
      )}\n\nA process that loads the same code and moves nothing peaks at ${idle.peakRssMiB.toFixed(0)} MiB.`,
    );
  } finally {
    host.child.kill('SIGTERM');
    await new Promise((resolve) => host.child.once('exit', resolve));
    fs.rmSync(tmp, { recursive: true, force: true });
    fs.rmSync(shm, { recursive: true, force: true });
  }
}

if (values.host) {
  runHost().catch((error: unknown) => {
    console.error(error);
    process.exit(1);
  });
} else if (values.job) {
  runRssJob(JSON.parse(values.job) as RssJob).then(
    (result) => {
      console.log(JSON.stringify(result));
      // The chunk pool's threads would keep the process alive.
      process.exit(0);
    },
    (error: unknown) => {
      console.error(error);
      process.exit(1);
    },
  );
} else {
  main().then(
    // The chunk pool's threads would keep the process alive.
    () => process.exit(0),
    (error: unknown) => {
      console.error(error);
      process.exit(1);
    },
  );
}
