/**
 * Scenario 5: remote sessions. Two reference sandbox hosts and two workers on one task queue, separate processes that
 * share nothing but the provider protocol, the Temporal server and a snapshot store directory (as
 * test/providers/remote-sessions.test.ts runs them). Faults: kill -9 of the worker that drives a sandbox (idle, or
 * while a checkpoint exports, a pause or a resume is under way), kill -9 of a sandbox host, hostile providers (slow,
 * dropped, truncated, oversized or garbage exports, driven through RemoteRuntime into the snapshot engine as the
 * capture activity drives them), and a worker whose fencing token the session has moved past.
 */
import { randomBytes, randomInt } from 'node:crypto';
import * as fs from 'node:fs';
import * as http from 'node:http';
import type * as net from 'node:net';
import * as path from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { Client, Connection } from '@temporalio/client';
import { pack } from 'tar-stream';
import type { RuntimeInstanceRef, SessionStatus } from '../../src/api';
import { SessionClient, type SessionHandle } from '../../src/client';
import { freePort } from '../../src/dev-server';
import { messageOf } from '../../src/errors';
import { RemoteRuntime, StaleFenceError } from '../../src/providers/remote-runtime';
import { RuntimeBusyError, RuntimeFailedError } from '../../src/runtimes';
import { withFence } from '../../src/runtimes/fence';
import { encodeTarHeader } from '../../src/runtimes/tar';
import { ChunkedSnapshotStore, Keyring } from '../../src/snapshots';
import { readAll } from '../../test/helpers/checkpoints';
import { startSandboxHost, type SandboxHostProcess } from '../../test/helpers/sandbox-host';
import { runningCopies, startWorkerProcess, type WorkerProcess } from '../../test/helpers/worker-process';
import type { Cluster } from './cluster';
import { markerPrefix, progress } from './context';
import { sessionProcesses, type LeakedFile } from './host';
import type { Verdict } from './judge';
import type { Tally } from './tally';

export interface RemotePlan {
  /** kill -9 trials of the driving worker, taken in turn at each kill point. */
  workerKills: number;
  /** kill -9 trials of a sandbox host. */
  hostKills: number;
}

export const KILL_POINTS = ['idle', 'checkpoint', 'pause', 'resume'] as const;
type KillPoint = (typeof KILL_POINTS)[number];

export const REMOTE_ROWS = {
  worker: 'remote: kill -9 of the driving worker',
  host: 'remote: kill -9 of a sandbox host',
  hostile: 'remote: hostile provider',
  stale: 'remote: stale fencing token',
} as const;

export function remoteRowNames(): string[] {
  return Object.values(REMOTE_ROWS);
}

const WORKERS = ['alpha', 'beta'] as const;
type WorkerName = (typeof WORKERS)[number];
/** How long a session has, once the fault is over, to run again where it should. */
const SETTLE_MS = 120_000;
/** How long a sandbox host may be out of reach before its sandboxes count as lost (the workers' DS_SANDBOX_LOST_MS). */
const LOST_MS = 3_000;
/** A worker's RSS may grow by this much over a hostile export: the export is streamed, never held. */
const RSS_BOUND_MiB = 128;
/** The most an export may send in the oversized trial (RemoteRuntime's maxExportBytes). */
const EXPORT_LIMIT = 64 * 1024 * 1024;
const MiB = 1024 * 1024;

/** The one remote fleet of a run: its hosts, workers, client and the sessions it started. */
class Fleet {
  readonly hosts: SandboxHostProcess[] = [];
  readonly workers = new Map<WorkerName, WorkerProcess>();
  readonly token = randomBytes(24).toString('base64url');
  readonly taskQueue = `reliability-remote-${randomBytes(3).toString('hex')}`;
  readonly sessions: SessionClient;
  private readonly started = new Set<string>();

  constructor(
    readonly cluster: Cluster,
    readonly tally: Tally,
    readonly runId: string,
    private readonly connection: Connection,
  ) {
    this.sessions = new SessionClient({ client: new Client({ connection }), taskQueue: this.taskQueue });
  }

  get dir(): string {
    return path.join(this.cluster.dir, 'remote');
  }

  async startHost(index: number, port?: number): Promise<SandboxHostProcess> {
    const host = await startSandboxHost(path.join(this.dir, 'hosts', String(index)), {
      DS_SANDBOX_HOST_TOKEN: this.token,
      ...(port ? { DS_SANDBOX_HOST_PORT: String(port) } : {}),
    });
    this.hosts[index] = host;
    return host;
  }

  /** Every worker knows both hosts; a host restarted keeps its port, so its URL stays what the workers were given. */
  async startWorker(name: WorkerName): Promise<WorkerProcess> {
    const worker = await startWorkerProcess({
      address: this.cluster.address,
      taskQueue: this.taskQueue,
      workerId: name,
      dataDir: path.join(this.dir, 'workers', name),
      snapshotDir: path.join(this.dir, 'snapshots'),
      env: {
        DS_SANDBOX_HOSTS: this.hosts.map((h) => h.url).join(','),
        DS_SANDBOX_TOKEN: this.token,
        DS_SANDBOX_LOST_MS: String(LOST_MS),
      },
    });
    this.workers.set(name, worker);
    return worker;
  }

  workerOf(runtime: RuntimeInstanceRef): WorkerName | undefined {
    return WORKERS.find((n) => runtime.hostTaskQueue === `${this.taskQueue}@${n}`);
  }

  hostOf(runtime: { location: string }): SandboxHostProcess | undefined {
    return this.hosts.find((h) => runtime.location.startsWith(`${h.url}/`));
  }

  marker(sessionId: string): string {
    return `${markerPrefix(this.runId)}${sessionId}`;
  }

  /** A counter sandbox: counts in the file `n` from what it finds there, and logs each start's value to `starts`. */
  async start(sessionId: string): Promise<SessionHandle> {
    const script =
      'n=$(cat n 2>/dev/null || echo 0); echo "$n" >> starts; ' +
      'while :; do n=$((n+1)); echo $n > n.tmp; mv n.tmp n; sleep 0.1; done';
    this.started.add(sessionId);
    return this.sessions.start({
      sessionId,
      runtime: { kind: 'remote', command: ['sh', '-c', script, this.marker(sessionId)] },
      liveness: { heartbeatTimeoutMs: 3_000, hostTimeoutMs: 3_000 },
    });
  }

  /** The sandbox's directory on its host: `<root>/<session id>/<sandbox id>`. */
  sandboxDir(sessionId: string, runtime: RuntimeInstanceRef): string {
    return path.join(this.hostOf(runtime)?.rootDir ?? '/nonexistent', sessionId, runtime.instanceId);
  }

  copies(sessionId: string): number[] {
    return runningCopies(this.marker(sessionId));
  }

  /** Stops the session and counts whatever of its processes outlives that as orphaned. */
  async finish(row: string, session: SessionHandle): Promise<void> {
    await session.stop({ checkpoint: false }).catch(() => undefined);
    const marker = this.marker(session.sessionId);
    const gone = await until(async () => processesOf(marker).length === 0, 20_000);
    if (!gone) this.tally.orphans(row, processesOf(marker), `${session.sessionId}: after the session was stopped`);
    // Nor may anything of its sandboxes stay on a host's disk (a host killed -9 clears what it left when it restarts).
    const files = () => this.hosts.flatMap((h) => filesUnder(path.join(h.rootDir, session.sessionId)));
    await until(async () => files().length === 0, 20_000);
    this.tally.leaks(() => row, files(), `${session.sessionId}: on a sandbox host after the session was stopped`);
  }

  async close(): Promise<void> {
    await Promise.all([...this.workers.values()].map((w) => w.kill()));
    await Promise.all(this.hosts.map((h) => h.stop()));
    await this.connection.close().catch(() => undefined);
    const left = processesOf(markerPrefix(this.runId));
    if (left.length > 0) this.tally.orphans(REMOTE_ROWS.worker, left, 'after the hosts were stopped');
  }
}

function processesOf(marker: string) {
  return sessionProcesses(marker, '/nonexistent');
}

async function until<T>(
  probe: () => Promise<T | false | undefined>,
  ms: number,
  everyMs = 200,
): Promise<T | undefined> {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await probe().catch(() => undefined);
    if (value) return value;
    if (Date.now() > deadline) return undefined;
    await delay(everyMs);
  }
}

function filesUnder(dir: string): LeakedFile[] {
  if (!fs.existsSync(dir)) return [];
  return fs
    .readdirSync(dir, { withFileTypes: true, recursive: true })
    .filter((e) => e.isFile())
    .map((e) => {
      const file = path.join(e.parentPath, e.name);
      return { path: file, bytes: fs.statSync(file, { throwIfNoEntry: false })?.size ?? 0 };
    });
}

function count(dir: string): number {
  try {
    return Number(fs.readFileSync(path.join(dir, 'n'), 'utf8').trim() || 0);
  } catch {
    return 0;
  }
}

function starts(dir: string): number[] {
  try {
    return fs.readFileSync(path.join(dir, 'starts'), 'utf8').trim().split('\n').map(Number);
  } catch {
    return [];
  }
}

/** Runs every remote row on a fleet of its own; stops it at the end, whatever happens. */
export async function remoteScenarios(cluster: Cluster, tally: Tally, runId: string, plan: RemotePlan): Promise<void> {
  const fleet = new Fleet(cluster, tally, runId, await Connection.connect({ address: cluster.address }));
  cluster.closers.push(() => fleet.close());
  await Promise.all([fleet.startHost(0), fleet.startHost(1)]);
  // One at a time: each bundles the workflow code at start, and the machine may have two cores.
  for (const name of WORKERS) await fleet.startWorker(name);
  for (let trial = 1; trial <= plan.workerKills; trial++) {
    const point = KILL_POINTS[(trial - 1) % KILL_POINTS.length]!;
    progress(`remote: kill -9 of the driving worker, ${point}, trial ${trial}`);
    await workerKill(fleet, point, trial);
  }
  for (let trial = 1; trial <= plan.hostKills; trial++) {
    progress(`remote: kill -9 of a sandbox host, trial ${trial}`);
    await hostKill(fleet, trial);
  }
  progress('remote: hostile providers');
  await hostileProviders(fleet);
}

/** A running counter session that has counted a few and has a checkpoint; what was counted when it was asked for. */
async function counting(fleet: Fleet, sessionId: string) {
  const session = await fleet.start(sessionId);
  const runtime = (await session.status()).runtime!;
  const dir = fleet.sandboxDir(sessionId, runtime);
  await until(async () => count(dir) >= 3, 30_000);
  const counted = count(dir);
  const checkpoint = await session.checkpoint();
  return { session, runtime, dir, counted, checkpoint };
}

/**
 * kill -9 of the worker driving a sandbox, at `point`. The session must go on on the other worker: the same sandbox
 * and process when it was running, one copy at every sample (every 100 ms); every checkpoint it was handed still
 * verifies; a resume struck mid-import restores the newest checkpoint. The idle trials also try the worker the
 * session moved past (the stale fencing token row).
 */
async function workerKill(fleet: Fleet, point: KillPoint, trial: number): Promise<void> {
  const row = REMOTE_ROWS.worker;
  const sessionId = `remote-kill-${point}-${trial}-${randomBytes(2).toString('hex')}`;
  const { session, runtime, dir, counted, checkpoint } = await counting(fleet, sessionId);
  const acked = [checkpoint.checkpointId];
  let durable = counted;
  const problems: { verdict: Verdict; detail: string }[] = [];
  if (point === 'resume') {
    // Paused first: the resume the kill strikes imports its state into a new sandbox.
    durable = count(dir);
    acked.push((await session.pause()).checkpointId);
  }
  const [firstPid] = fleet.copies(sessionId);
  const driver = fleet.workerOf(runtime)!;
  let samples = 0;
  let most = 0;
  const sampler = setInterval(() => {
    const copies = fleet.copies(sessionId);
    samples++;
    most = Math.max(most, copies.length);
    if (copies.length > 1) problems.push({ verdict: 'corrupt', detail: `two copies running: ${copies.join(', ')}` });
  }, 100);
  let answer: Promise<string> | undefined;
  let killed = false;
  try {
    const began = Date.now();
    if (point === 'checkpoint') answer = session.checkpoint().then((c) => (acked.push(c.checkpointId), 'ok'));
    if (point === 'pause') answer = session.pause().then((c) => (acked.push(c.checkpointId), 'ok'));
    if (point === 'resume') answer = session.resume().then(() => 'ok');
    answer = answer?.catch((e: unknown) => `failed: ${messageOf(e)}`);
    // Every other pause trial (the first among them) strikes once the pause's checkpoint is recorded: while its
    // worker stops the sandbox. The others strike at random, while it exports or stops.
    const afterCapture = point === 'pause' && Math.floor((trial - 1) / KILL_POINTS.length) % 2 === 0;
    if (afterCapture) {
      const before = (await session.status()).checkpointCount;
      await until(async () => (await session.status()).checkpointCount > before, 30_000, 5);
    } else if (answer) await delay(randomInt(0, 400));
    const struckAt = Date.now() - began;
    await fleet.workers.get(driver)!.kill();
    killed = true;
    const answered = answer ? await answer : 'no operation';
    const status = await until(async () => {
      const s = await session.status();
      const live = s.runtime && fleet.workerOf(s.runtime) !== driver;
      return (s.phase === 'running' && live) || s.phase === 'paused' || s.phase === 'failed' ? s : undefined;
    }, SETTLE_MS);
    const note = `${point}: the kill came ${struckAt} ms after the control began; it answered: ${answered}`;
    const verdict = await judgeKill(fleet, session, point, { status, firstPid, runtime, durable, acked, problems });
    if (most > 1) fleet.tally.doubled(row);
    const judged =
      most > 1 && verdict.verdict === 'survived'
        ? { verdict: 'corrupt' as const, detail: `${most} copies ran at once` }
        : verdict;
    record(fleet.tally, row, sessionId, judged, note);
    const now = await session.status();
    const how = now.runtime?.instanceId === runtime.instanceId ? 'the same sandbox taken over' : 'restored';
    fleet.tally.findings.push(`NOTE — ${row}: ${note}; then ${how}; ${samples} samples, most copies at once ${most}`);
    if (point === 'idle' && status?.runtime) await staleFence(fleet, session, runtime, status.runtime);
  } finally {
    clearInterval(sampler);
    // Only once the session has settled: until then the other worker is the only one that can take it.
    if (killed) await fleet.startWorker(driver);
  }
  await fleet.finish(row, session);
}

interface KillFacts {
  status: SessionStatus | undefined;
  firstPid: number | undefined;
  runtime: RuntimeInstanceRef;
  durable: number;
  acked: string[];
  problems: { verdict: Verdict; detail: string }[];
}

async function judgeKill(
  fleet: Fleet,
  session: SessionHandle,
  point: KillPoint,
  facts: KillFacts,
): Promise<{ verdict: Verdict; detail: string }> {
  const { status, problems } = facts;
  if (!status) return { verdict: 'stuck', detail: `not running on the other worker within ${SETTLE_MS} ms` };
  if (status.phase === 'failed') return { verdict: 'lost', detail: `failed: ${status.failure?.message ?? '?'}` };
  if (problems.length > 0) return problems[0]!;
  let now = status;
  // A pause the kill struck may have finished (the other worker finished it); the session resumes from it.
  if (now.phase === 'paused') {
    await session.resume();
    now = await session.status();
  }
  const runtime = now.runtime;
  if (!runtime) return { verdict: 'stuck', detail: `no runtime in phase ${now.phase}` };
  const dir = fleet.sandboxDir(session.sessionId, runtime);
  const copies = await until(async () => {
    const c = fleet.copies(session.sessionId);
    return c.length === 1 && c;
  }, 30_000);
  if (!copies) return { verdict: 'stuck', detail: `copies running: ${fleet.copies(session.sessionId).join(', ')}` };
  const sameSandbox = runtime.instanceId === facts.runtime.instanceId;
  if ((point === 'idle' || point === 'checkpoint') && !sameSandbox)
    return { verdict: 'lost', detail: `restored into ${runtime.instanceId} instead of taking the sandbox over` };
  if (sameSandbox && copies[0] !== facts.firstPid)
    return { verdict: 'lost', detail: `the same sandbox runs another process (${copies[0]}, was ${facts.firstPid})` };
  if (!sameSandbox) {
    const from = (await until(async () => starts(dir).length > 1 && starts(dir), 30_000)) || starts(dir);
    if ((from[from.length - 1] ?? -1) < facts.durable)
      return { verdict: 'lost', detail: `restarted from ${from.join(',')}, under the checkpointed ${facts.durable}` };
  } else if (count(dir) < facts.durable) {
    return { verdict: 'lost', detail: `counts ${count(dir)}, under the checkpointed ${facts.durable}` };
  }
  const verified = await session.verify();
  for (const id of facts.acked) {
    const result = verified.find((v) => v.checkpointId === id);
    if (result?.status !== 'ok') return { verdict: 'lost', detail: `checkpoint ${id} handed out: ${result?.status}` };
  }
  const bad = verified.filter((v) => v.status !== 'ok');
  if (bad.length > 0) return { verdict: 'corrupt', detail: `checkpoints that do not verify: ${JSON.stringify(bad)}` };
  return { verdict: 'survived', detail: '' };
}

function record(
  tally: Tally,
  row: string,
  sessionId: string,
  outcome: { verdict: Verdict; detail: string },
  note = '',
) {
  tally.trial(row, outcome.verdict, `session ${sessionId}: ${outcome.detail}${note ? `\n  ${note}` : ''}`);
}

/**
 * The worker the session moved past (generation 1, cut off while another took over) tries to stop and export the
 * sandbox: the host refuses both, and the sandbox runs on as it did.
 */
async function staleFence(
  fleet: Fleet,
  session: SessionHandle,
  before: RuntimeInstanceRef,
  after: RuntimeInstanceRef,
): Promise<void> {
  const row = REMOTE_ROWS.stale;
  const copies = fleet.copies(session.sessionId);
  const stale = new RemoteRuntime({ url: fleet.hosts.map((h) => h.url), token: fleet.token });
  const tries: Record<string, () => Promise<unknown>> = {
    stop: () => stale.stop(before.instanceId, { graceMs: 0 }),
    export: async () => (await stale.capture(before.instanceId)).destroy(),
  };
  for (const [name, call] of Object.entries(tries)) {
    const refused = await withFence(1, call).then(
      () => undefined,
      (e: unknown) => e,
    );
    const still = fleet.copies(session.sessionId);
    const unchanged = still.length === 1 && still[0] === copies[0] && after.instanceId === before.instanceId;
    if (!(refused instanceof StaleFenceError))
      fleet.tally.trial(row, 'corrupt', `${name} with generation 1 was not refused: ${messageOf(refused ?? 'ok')}`);
    else if (!unchanged)
      fleet.tally.trial(
        row,
        'corrupt',
        `${name} was refused, yet the sandbox changed: ${copies.join(',')} → ${still.join(',')}`,
      );
    else fleet.tally.trial(row, 'survived', '');
  }
}

/**
 * kill -9 of the sandbox host of a running session with a checkpoint: its sandboxes die with it; the session must be
 * restored on the other host from that checkpoint (the counter starts again from at least the checkpointed count),
 * one copy, nothing of the old sandbox left running.
 */
async function hostKill(fleet: Fleet, trial: number): Promise<void> {
  const row = REMOTE_ROWS.host;
  const sessionId = `remote-host-${trial}-${randomBytes(2).toString('hex')}`;
  const { session, runtime, dir } = await counting(fleet, sessionId);
  await until(async () => count(dir) >= 5, 30_000);
  const counted = count(dir);
  const checkpoint = await session.checkpoint({ label: 'before the host dies' });
  const index = fleet.hosts.indexOf(fleet.hostOf(runtime)!);
  const host = fleet.hosts[index]!;
  const port = Number(new URL(host.url).port);
  host.child.kill('SIGKILL');
  await host.stop();
  const outcome = await (async (): Promise<{ verdict: Verdict; detail: string }> => {
    const status = await until(async () => {
      const s = await session.status();
      return (s.phase === 'running' && s.runtime?.instanceId !== runtime.instanceId) || s.phase === 'failed'
        ? s
        : undefined;
    }, SETTLE_MS);
    if (!status) return { verdict: 'stuck', detail: `not restored within ${SETTLE_MS} ms` };
    if (status.phase === 'failed') return { verdict: 'lost', detail: `failed: ${status.failure?.message ?? '?'}` };
    if (fleet.hostOf(status.runtime!) === host) return { verdict: 'stuck', detail: 'restored on the host that died' };
    if (status.lastRestore?.checkpointId !== checkpoint.checkpointId)
      return { verdict: 'lost', detail: `restored ${status.lastRestore?.checkpointId}, not the newest checkpoint` };
    const again = fleet.sandboxDir(sessionId, status.runtime!);
    const from = (await until(async () => starts(again).length > 1 && starts(again), 30_000)) || starts(again);
    if ((from[1] ?? -1) < counted)
      return { verdict: 'corrupt', detail: `restarted from ${from.join(',')}, not the checkpointed ${counted}` };
    const copies = await until(async () => fleet.copies(sessionId).length === 1, 30_000);
    if (!copies) return { verdict: 'corrupt', detail: `copies running: ${fleet.copies(sessionId).join(', ')}` };
    return { verdict: 'survived', detail: '' };
  })();
  record(fleet.tally, row, sessionId, outcome);
  // The host comes back on its port for the trials after this one, and clears what its killed sandboxes left.
  await fleet.startHost(index, port);
  await fleet.finish(row, session);
}

/** An HTTP server on loopback that answers every export with `bad` (after one good export, the parent). */
async function hostileHost(
  good: Buffer,
  bad: (response: http.ServerResponse) => void,
): Promise<{ url: string; close(): Promise<void> }> {
  let exports = 0;
  const sockets = new Set<net.Socket>();
  const server = http.createServer((request, response) => {
    if (exports++ === 0) {
      response.writeHead(200, EXPORT_HEADERS);
      response.end(good);
      return;
    }
    bad(response);
  });
  server.on('connection', (s) => (sockets.add(s), s.once('close', () => sockets.delete(s))));
  const port = await freePort();
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${port}`,
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

const EXPORT_HEADERS = { 'content-type': 'application/x-tar', 'DS-Export-Format': 'tar/1' };

/** Writes for ever, at the pace the client reads, until the connection is gone. */
async function endless(response: http.ServerResponse): Promise<void> {
  const piece = randomBytes(MiB);
  const header = encodeTarHeader({ name: 'huge.bin', type: 'file', mode: 0o644, mtime: 0, size: 2 ** 40 });
  response.write(header);
  while (!response.destroyed) {
    if (!response.write(piece))
      await new Promise<void>((resolve) => {
        const done = () => {
          response.off('drain', done).off('close', done);
          resolve();
        };
        response.once('drain', done).once('close', done);
      });
  }
}

/**
 * Exports from providers that misbehave, streamed into a real encrypted store as the capture activity streams them:
 * each must fail typed (busy when a retry may help, failed when not), the worker's memory must stay bounded, and the
 * store must list and verify exactly what it held before (nothing half-visible).
 */
async function hostileProviders(fleet: Fleet): Promise<void> {
  const row = REMOTE_ROWS.hostile;
  const archive = pack();
  archive.entry({ name: 'state.bin', mode: 0o644, mtime: new Date(0) }, randomBytes(8 * MiB + 123));
  archive.finalize();
  const good = await readAll(archive);
  const cases: [string, (r: http.ServerResponse) => void, typeof RuntimeBusyError | typeof RuntimeFailedError][] = [
    ['answers slowly (past the timeout)', () => undefined, RuntimeBusyError],
    [
      'stalls mid-export',
      (r) => (r.writeHead(200, EXPORT_HEADERS), r.write(good.subarray(0, 2 * MiB))),
      RuntimeBusyError,
    ],
    [
      'drops the connection mid-export',
      (r) => (r.writeHead(200, EXPORT_HEADERS), r.write(good.subarray(0, 4 * MiB), () => r.socket?.destroy())),
      RuntimeBusyError,
    ],
    [
      'sends less than its Content-Length',
      (r) => (
        r.writeHead(200, { ...EXPORT_HEADERS, 'content-length': String(good.length) }),
        r.write(good.subarray(0, good.length - 5000), () => r.socket?.destroy())
      ),
      RuntimeBusyError,
    ],
    [
      'ends a truncated tar cleanly',
      (r) => (r.writeHead(200, EXPORT_HEADERS), r.end(good.subarray(0, good.length / 2))),
      RuntimeFailedError,
    ],
    [
      'sends an endless stream (oversized)',
      (r) => (r.writeHead(200, EXPORT_HEADERS), void endless(r)),
      RuntimeFailedError,
    ],
    [
      'declares an oversized Content-Length',
      (r) => (r.writeHead(200, { ...EXPORT_HEADERS, 'content-length': String(4 * EXPORT_LIMIT) }), r.write(good)),
      RuntimeFailedError,
    ],
    [
      'sends garbage',
      (r) => (r.writeHead(200, EXPORT_HEADERS), r.end(Buffer.concat([randomBytes(8192), Buffer.alloc(1024)]))),
      RuntimeFailedError,
    ],
    [
      'answers an HTML page',
      (r) => (r.writeHead(502, { 'content-type': 'text/html' }), r.end('<html>502 Bad Gateway</html>')),
      RuntimeFailedError,
    ],
  ];
  for (const [name, bad, expected] of cases) {
    const dir = path.join(fleet.dir, 'hostile', String(cases.findIndex((c) => c[0] === name)));
    const store = new ChunkedSnapshotStore({
      rootDir: dir,
      keyring: new Keyring([{ id: 'k1', key: randomBytes(32) }]),
    });
    const host = await hostileHost(good, bad);
    try {
      const runtime = new RemoteRuntime({ url: host.url, token: 't', timeoutMs: 1_000, maxExportBytes: EXPORT_LIMIT });
      const capture = async (sequence: number, parentId: string | null) =>
        store.write(
          {
            checkpointId: `cp-${sequence}`,
            sessionId: 's1',
            sequence,
            parentId,
            runtime: { kind: 'remote', version: '1' },
            trigger: 'manual',
          },
          await runtime.capture('sandbox-1'),
        );
      await capture(1, null);
      global.gc?.();
      const base = process.memoryUsage().rss;
      let peak = base;
      const sampler = setInterval(() => (peak = Math.max(peak, process.memoryUsage().rss)), 20);
      const error = await capture(2, 'cp-1').then(
        () => undefined,
        (e: unknown) => e,
      );
      clearInterval(sampler);
      const grewMiB = (peak - base) / MiB;
      const listed = (await store.list('s1')).map((m) => m.checkpointId);
      const verified = await store.verifyLineage('s1').catch(() => []);
      const whole = listed.length === 1 && verified.every((v) => v.status === 'ok') && verified.length === 1;
      const detail = `${name}: ${error ? `${(error as Error).constructor.name}: ${messageOf(error)}` : 'stored'}`;
      if (!whole) fleet.tally.trial(row, 'corrupt', `${detail}; the store lists ${listed.join(', ')}`);
      else if (!(error instanceof expected)) fleet.tally.trial(row, 'corrupt', `${detail}; expected ${expected.name}`);
      else if (grewMiB > RSS_BOUND_MiB)
        fleet.tally.trial(row, 'corrupt', `${detail}; RSS grew ${grewMiB.toFixed(0)} MiB, over ${RSS_BOUND_MiB}`);
      else fleet.tally.trial(row, 'survived', '');
      fleet.tally.findings.push(
        `NOTE — ${row}: ${detail.slice(0, 200)}; RSS grew ${grewMiB.toFixed(1)} MiB; store lists ${listed.join(', ')}`,
      );
    } finally {
      await host.close();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  }
}
