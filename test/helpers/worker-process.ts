import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { freePort } from '../../src/dev-server';
import { eventually } from './temporal';

const root = path.resolve(__dirname, '..', '..');

/** A worker started as `npm run worker` starts it: its own process, its own output. */
export interface WorkerProcess {
  readonly child: ChildProcess;
  output(): string;
  /** kill -9; resolves once the process has exited (been reaped). */
  kill(): Promise<void>;
  /** SIGTERM, as a supervisor stops a worker (it drains first); resolves with its exit code once it has exited. */
  stop(): Promise<number | null>;
}

export interface WorkerProcessOptions {
  address: string;
  taskQueue: string;
  workerId: string;
  dataDir: string;
  /** A snapshot store directory shared with other workers (default: the worker's data directory's own). */
  snapshotDir?: string;
  /** The store's settings instead, say an S3 bucket's (`DS_SNAPSHOT_STORE`, `DS_S3_*`, credentials and keys). */
  storeEnv?: NodeJS.ProcessEnv;
  /** Runs the worker under this program (its argv gets the worker's command appended). */
  wrapper?: readonly string[];
  env?: NodeJS.ProcessEnv;
  /** Wait until the worker polls (default true). */
  waitUntilPolling?: boolean;
}

export async function startWorkerProcess(options: WorkerProcessOptions): Promise<WorkerProcess> {
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    TEMPORAL_ADDRESS: options.address,
    DS_TASK_QUEUE: options.taskQueue,
    DS_WORKER_ID: options.workerId,
    DS_DATA_DIR: options.dataDir,
    ...(options.snapshotDir && { DS_SNAPSHOT_DIR: options.snapshotDir }),
    DS_SNAPSHOT_ENCRYPTION: 'none',
    ...options.storeEnv,
    // The test's client has no payload codec: the worker writes what it reads.
    DS_PAYLOAD_ENCRYPTION: 'none',
    LOG_LEVEL: 'WARN',
    ...options.env,
  };
  const command = [process.execPath, '--import', 'tsx', 'src/worker.ts'];
  const [program, ...args] = [...(options.wrapper ?? []), ...command];
  const child = spawn(program!, args, { cwd: root, env, stdio: ['pipe', 'pipe', 'pipe'] });
  let output = '';
  child.stdout.on('data', (d: Buffer) => (output += d.toString()));
  child.stderr.on('data', (d: Buffer) => (output += d.toString()));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const worker: WorkerProcess = {
    child,
    output: () => output,
    async kill() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await exited;
    },
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      await exited;
      return child.exitCode;
    },
  };
  if (options.waitUntilPolling !== false) {
    await eventually(() => child.exitCode !== null || output.includes(' polling '), 120_000).catch((err: unknown) => {
      throw new Error(`${String(err)}\n${output.slice(-2000)}`);
    });
    if (!output.includes(' polling ')) throw new Error(`the worker exited before it polled:\n${output.slice(-2000)}`);
  }
  return worker;
}

/** Pids of the processes whose command line holds `marker` (this process excluded). */
export function processesWith(marker: string): number[] {
  return fs
    .readdirSync('/proc')
    .filter((name) => /^\d+$/.test(name))
    .filter((pid) => {
      try {
        return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes(marker);
      } catch {
        return false;
      }
    })
    .map(Number)
    .filter((pid) => pid !== process.pid);
}

/** The state letter of `/proc/<pid>/stat` (R, S, T, Z, …), or undefined once the process is gone. */
export function processState(pid: number): string | undefined {
  try {
    const text = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return text.slice(text.lastIndexOf(')') + 2).split(' ')[0];
  } catch {
    return undefined;
  }
}

/**
 * The copies of a session's command that can run now: `sh` processes marked with `marker` whose parent is not marked
 * (a loop's shell forks children that carry its command line until they exec), not stopped and not dead.
 */
export function runningCopies(marker: string): number[] {
  const marked = processesWith(marker);
  return marked.filter((pid) => {
    try {
      if (!fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').startsWith('sh')) return false;
      const ppid = Number(/^PPid:\s*(\d+)/m.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]);
      const state = processState(pid);
      return !marked.includes(ppid) && state !== undefined && !'TtZX'.includes(state);
    } catch {
      return false; // exited since the listing
    }
  });
}

/** Samples `probe` every 100 ms until stopped; keeps every sample. */
export function sampleEvery100ms<T>(probe: () => T): { samples: T[]; stop(): T[] } {
  const samples: T[] = [];
  const timer = setInterval(() => samples.push(probe()), 100);
  return {
    samples,
    stop() {
      clearInterval(timer);
      return samples;
    },
  };
}

/** A TCP proxy on loopback between a worker and the Temporal server that can be cut and restored. */
export interface LoopbackProxy {
  readonly address: string;
  /** Drops every connection and refuses new ones until `restore`. */
  sever(): void;
  restore(): void;
  close(): Promise<void>;
}

export async function startLoopbackProxy(target: string): Promise<LoopbackProxy> {
  const [targetHost, targetPort] = [
    target.slice(0, target.lastIndexOf(':')),
    Number(target.slice(target.lastIndexOf(':') + 1)),
  ];
  const sockets = new Set<net.Socket>();
  let severed = false;
  const server = net.createServer((client) => {
    if (severed) {
      client.destroy();
      return;
    }
    const upstream = net.connect(targetPort, targetHost);
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on('close', () => sockets.delete(s));
      s.on('error', () => undefined);
    }
    client.on('close', () => upstream.destroy());
    upstream.on('close', () => client.destroy());
    client.pipe(upstream);
    upstream.pipe(client);
  });
  const port = await freePort();
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', resolve);
  });
  return {
    address: `127.0.0.1:${port}`,
    sever() {
      severed = true;
      for (const s of sockets) s.destroy();
    },
    restore() {
      severed = false;
    },
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
