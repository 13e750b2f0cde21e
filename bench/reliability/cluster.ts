/**
 * The system under test, as an operator runs it: a Temporal dev server persisting to a SQLite file, and hosts — a
 * data directory, a worker id and a task queue each — whose real worker processes (`node --import tsx
 * src/worker.ts`) are started, killed and restarted as the scenarios say. Hosts do not share a queue: a session
 * of one is only ever recovered by that host's next worker. Everything listens on 127.0.0.1, and everything started
 * here is killed by `close`.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { Client, Connection } from '@temporalio/client';
import { SessionClient } from '../../src/client';
import { loadConfig } from '../../src/config';
import { freePort, startDevServer, type DevServer } from '../../src/dev-server';
import { PayloadEncryptionCodec, sessionDataConverter } from '../../src/payloads';
import { ChunkedSnapshotStore, Keyring, S3BlobBackend } from '../../src/snapshots';

const PROJECT_DIR = path.resolve(__dirname, '..', '..');
/** A worker bundles the workflow code at start: on a busy 2-core machine that takes a while. */
const WORKER_READY_MS = 120_000;
/** Longer than the drain deadline the workers are given, so a graceful stop is never cut short here. */
const WORKER_EXIT_MS = 60_000;
const DRAIN_TIMEOUT_MS = 30_000;
const MASTER_KEY_ID = 'reliability-1';
const PAYLOAD_KEY_ID = 'reliability-payloads-1';

/** One worker process and what it printed. */
export interface WorkerProcess {
  readonly child: ChildProcess;
  readonly pid: number;
  output(): string;
  /** Resolves once the process has exited (at once if it has). */
  exited(): Promise<void>;
}

/** A host whose snapshot store is a bucket: its workers reach it at `workerEndpoint`, this process at `endpoint`. */
export interface HostBucket {
  bucket: string;
  prefix: string;
  region: string;
  credentials: { accessKeyId: string; secretAccessKey: string };
  /** Where this process reads the store, past whatever stands between the workers and the server. */
  endpoint: string;
  /** Where the workers reach the server (a fault-injecting proxy, say). */
  workerEndpoint: string;
}

export class Cluster {
  readonly hosts: Host[] = [];
  /** What scenarios started beside the cluster (an S3 server, a proxy): stopped by `close`, before the temp dir goes. */
  readonly closers: (() => Promise<void>)[] = [];
  readonly masterKey = randomBytes(32);
  /** Payloads are encrypted, as the embedded default and compose run them; the workers and the client share it. */
  readonly payloadKey = randomBytes(32);
  private server?: DevServer;
  private connection?: Connection;

  private constructor(
    readonly dir: string,
    readonly port: number,
  ) {}

  /** A fresh temp dir, a dev server on a free port and a client connection; no host yet. */
  static async start(): Promise<Cluster> {
    const cluster = new Cluster(fs.mkdtempSync(path.join(os.tmpdir(), 'ds-reliability-')), await freePort());
    try {
      await cluster.startServer();
      cluster.connection = await Connection.connect({ address: cluster.address });
      return cluster;
    } catch (error) {
      await cluster.close();
      throw error;
    }
  }

  get address(): string {
    return `127.0.0.1:${this.port}`;
  }

  get client(): Client {
    if (!this.connection) throw new Error('the cluster is not started');
    const codec = new PayloadEncryptionCodec(new Keyring([{ id: PAYLOAD_KEY_ID, key: this.payloadKey }]));
    return new Client({ connection: this.connection, dataConverter: sessionDataConverter(codec) });
  }

  /** Starts the dev server on this cluster's port and SQLite file (again, after an outage). */
  async startServer(): Promise<void> {
    this.server = await startDevServer({
      port: this.port,
      uiPort: null,
      dbFilename: path.join(this.dir, 'temporal.sqlite'),
      logFile: path.join(this.dir, 'temporal.log'),
      startTimeoutMs: 90_000,
    });
  }

  /** kill -9 of the dev server; resolves once it is gone. */
  async killServer(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    if (server) await killGroup(server.process);
  }

  /** A host of its own: data directory, worker id and task queue; no worker yet. */
  host(name: string, bucket?: HostBucket): Host {
    const host = new Host(this, name, bucket);
    this.hosts.push(host);
    return host;
  }

  /** Kills every worker and the server; removes the temp dir unless it is to be kept (its logs, data, SQLite). */
  async close({ keep = false } = {}): Promise<void> {
    for (const host of this.hosts) for (const worker of host.workers) await killGroup(worker.child);
    await this.connection?.close().catch(() => undefined);
    await this.killServer();
    for (const close of this.closers.splice(0).reverse()) await close().catch(() => undefined);
    if (!keep) fs.rmSync(this.dir, { recursive: true, force: true });
  }
}

export class Host {
  readonly taskQueue: string;
  readonly workerId: string;
  readonly dataDir: string;
  readonly workspaceDir: string;
  readonly snapshotDir: string;
  readonly sessions: SessionClient;
  /** Every worker this host has had, in order; the last one is the current one while it lives. */
  readonly workers: WorkerProcess[] = [];
  private storeOpened?: ChunkedSnapshotStore;

  constructor(
    private readonly cluster: Cluster,
    readonly name: string,
    /** Unset: the store is a directory of the host's data directory. */
    readonly bucket?: HostBucket,
  ) {
    this.taskQueue = `reliability-${name}`;
    this.workerId = `host-${name}`;
    this.dataDir = path.join(cluster.dir, name);
    this.workspaceDir = path.join(this.dataDir, 'workspaces');
    this.snapshotDir = path.join(this.dataDir, 'snapshots');
    this.sessions = new SessionClient({ client: cluster.client, taskQueue: this.taskQueue });
  }

  /** The environment of this host's workers, as an operator would set it. */
  workerEnv(): NodeJS.ProcessEnv {
    const env: NodeJS.ProcessEnv = {};
    // The worker refuses `DS_` variables it does not know: pass on only what is not the worker's own.
    for (const [name, value] of Object.entries(process.env)) if (!/^(DS_|TEMPORAL_)/.test(name)) env[name] = value;
    return {
      ...env,
      TEMPORAL_ADDRESS: this.cluster.address,
      DS_TASK_QUEUE: this.taskQueue,
      DS_WORKER_ID: this.workerId,
      DS_DATA_DIR: this.dataDir,
      DS_MASTER_KEYS: `${MASTER_KEY_ID}:${this.cluster.masterKey.toString('base64')}`,
      DS_PAYLOAD_KEYS: `${PAYLOAD_KEY_ID}:${this.cluster.payloadKey.toString('base64')}`,
      DS_DRAIN_TIMEOUT_MS: String(DRAIN_TIMEOUT_MS),
      DS_STOP_GRACE_MS: '2000',
      LOG_LEVEL: 'WARN',
      ...(this.bucket
        ? {
            DS_SNAPSHOT_STORE: `s3://${this.bucket.bucket}/${this.bucket.prefix}`,
            DS_S3_ENDPOINT: this.bucket.workerEndpoint,
            DS_S3_REGION: this.bucket.region,
            DS_S3_FORCE_PATH_STYLE: 'true',
            AWS_ACCESS_KEY_ID: this.bucket.credentials.accessKeyId,
            AWS_SECRET_ACCESS_KEY: this.bucket.credentials.secretAccessKey,
            // Nothing to ask an instance metadata service on this machine.
            AWS_EC2_METADATA_DISABLED: 'true',
          }
        : {}),
    };
  }

  /** Starts a worker process and resolves once it polls (after it has fenced what a dead predecessor left). */
  async startWorker(): Promise<WorkerProcess> {
    const number = this.workers.length + 1;
    const log = fs.openSync(path.join(this.cluster.dir, `${this.name}-worker-${number}.log`), 'a');
    // Its own process group, as a supervisor gives it: a signal to it is not a signal to this process.
    const child = spawn(process.execPath, ['--import', 'tsx', 'src/worker.ts'], {
      cwd: PROJECT_DIR,
      env: this.workerEnv(),
      detached: true,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const killOnExit = () => child.kill('SIGKILL');
    process.once('exit', killOnExit);
    let output = '';
    const append = (d: Buffer) => {
      output += d.toString();
      fs.writeSync(log, d);
    };
    child.stdout.on('data', append);
    child.stderr.on('data', append);
    const exited = new Promise<void>((resolve) =>
      child.once('exit', () => {
        process.off('exit', killOnExit);
        fs.closeSync(log);
        resolve();
      }),
    );
    const worker: WorkerProcess = { child, pid: child.pid!, output: () => output, exited: () => exited };
    this.workers.push(worker);
    const deadline = Date.now() + WORKER_READY_MS;
    while (!output.includes(' polling ')) {
      if (child.exitCode !== null || child.signalCode !== null) {
        throw new Error(`${this.name} worker ${number} exited before it polled:\n${output.slice(-4000)}`);
      }
      if (Date.now() > deadline) {
        await killGroup(child);
        throw new Error(`${this.name} worker ${number} did not poll within ${WORKER_READY_MS} ms`);
      }
      await delay(50);
    }
    return worker;
  }

  get currentWorker(): WorkerProcess | undefined {
    const last = this.workers[this.workers.length - 1];
    return last && last.child.exitCode === null && last.child.signalCode === null ? last : undefined;
  }

  /** kill -9 of the worker process alone (its sessions' process groups are their own, as in production). */
  async killWorker(worker: WorkerProcess): Promise<void> {
    worker.child.kill('SIGKILL');
    await worker.exited();
  }

  /** SIGTERM, as a supervisor stops a worker; resolves once it has exited (kill -9 if it takes too long). */
  async terminateWorker(worker: WorkerProcess): Promise<{ exitedBySelf: boolean }> {
    worker.child.kill('SIGTERM');
    const exited = await settlesWithin(worker.exited(), WORKER_EXIT_MS);
    if (!exited) await this.killWorker(worker);
    return { exitedBySelf: exited };
  }

  /**
   * The snapshot store this host's workers write, opened here to read what its checkpoints hold (a bucket directly,
   * past any proxy in the workers' way).
   */
  store(): ChunkedSnapshotStore {
    const b = this.bucket;
    this.storeOpened ??= new ChunkedSnapshotStore({
      ...(b ? { backend: new S3BlobBackend({ ...b, forcePathStyle: true }) } : { rootDir: this.snapshotDir }),
      tenant: loadConfig(this.workerEnv()).snapshots.tenant,
      keyring: new Keyring([{ id: MASTER_KEY_ID, key: this.cluster.masterKey }]),
    });
    return this.storeOpened;
  }
}

/** SIGKILL to a child's whole process group (it was started detached), and waits until the child is gone. */
async function killGroup(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const gone = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  try {
    process.kill(-child.pid!, 'SIGKILL');
  } catch {
    child.kill('SIGKILL');
  }
  await gone;
}

/** Whether `promise` settles within `ms` (the timer does not outlive the answer, so it holds no process open). */
export async function settlesWithin(promise: Promise<unknown>, ms: number): Promise<boolean> {
  const stop = new AbortController();
  try {
    return await Promise.race([
      promise.then(
        () => true,
        () => true,
      ),
      delay(ms, false, { signal: stop.signal }),
    ]);
  } finally {
    stop.abort();
  }
}
