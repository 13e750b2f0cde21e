/** The parent's side of bench/scale/worker-process.ts: start it, ask it for its memory, stop it. */
import { spawn, type ChildProcess } from 'node:child_process';
import * as path from 'node:path';
import { residentBytes } from './procfs';
import type { WorkerMessage, WorkerProcessConfig, WorkerRequest } from './worker-process';

export interface MemorySample {
  /** VmRSS from /proc, after a full GC in the worker. */
  rss: number;
  heapUsed: number;
  /** The main thread's longest event-loop delay since the previous sample. */
  loopDelayMaxMs: number;
  /**
   * The longest call into a workflow since the previous sample, in any workflow thread (0 for none over 50 ms): the
   * SDK cuts one at 5 s by default.
   */
  workflowCallMaxMs: number;
}

export interface WorkerHandle {
  readonly pid: number;
  /** A full GC in the worker, then its resident memory and V8 heap in use. */
  sample(): Promise<MemorySample>;
  /** Shuts the worker down (its session processes stopped); SIGTERM, then SIGKILL, if it does not go. */
  stop(): Promise<void>;
}

const SCRIPT = path.join(__dirname, 'worker-process.ts');
const PROBE = path.join(__dirname, 'workflow-call-probe.cjs');

/** `profileDir`: the worker writes a V8 CPU profile of each of its threads there when it exits (`--cpu-prof`). */
export async function startWorkerProcess(config: WorkerProcessConfig, profileDir?: string): Promise<WorkerHandle> {
  const profile = profileDir ? ['--cpu-prof', '--cpu-prof-dir', profileDir] : [];
  const child = spawn(
    process.execPath,
    [...profile, '--require', PROBE, '--import', 'tsx', '--expose-gc', SCRIPT, JSON.stringify(config)],
    {
      cwd: path.resolve(__dirname, '..', '..'),
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    },
  );
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const entry = { child, exited };
  running.add(entry);
  void exited.then(() => running.delete(entry));
  try {
    await nextMessage(child, 'ready', 120_000);
  } catch (err) {
    await kill(child, exited);
    throw err;
  }
  return {
    pid: child.pid!,
    async sample() {
      const reply = nextMessage(child, 'sample', 60_000);
      child.send({ type: 'sample' } satisfies WorkerRequest);
      const { heapUsed, loopDelayMaxMs, workflowCallMaxMs } = (await reply) as Extract<
        WorkerMessage,
        { type: 'sample' }
      >;
      return { rss: residentBytes(child.pid!), heapUsed, loopDelayMaxMs, workflowCallMaxMs };
    },
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.send({ type: 'stop' } satisfies WorkerRequest);
      const gone = await Promise.race([exited.then(() => true), delay(30_000).then(() => false)]);
      if (!gone) await kill(child, exited);
    },
  };
}

/** Worker processes started and not yet exited. */
const running = new Set<{ child: ChildProcess; exited: Promise<void> }>();

/**
 * Stops every worker process still running, as `stop()` would not get to on Ctrl-C: their session processes end with
 * them, and nothing writes into the benchmark's directory once this resolves.
 */
export async function stopAllWorkerProcesses(): Promise<void> {
  await Promise.all([...running].map(({ child, exited }) => kill(child, exited)));
}

/** SIGTERM lets the worker kill its session processes on the way out; SIGKILL if even that hangs. */
async function kill(child: ChildProcess, exited: Promise<void>): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  child.kill('SIGTERM');
  if (await Promise.race([exited.then(() => true), delay(5_000).then(() => false)])) return;
  child.kill('SIGKILL');
  await exited;
}

function nextMessage(child: ChildProcess, type: WorkerMessage['type'], timeoutMs: number): Promise<WorkerMessage> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(
      () => done(new Error(`worker process sent no "${type}" within ${timeoutMs} ms`)),
      timeoutMs,
    );
    const onMessage = (message: WorkerMessage) => message.type === type && done(undefined, message);
    const onExit = (code: number | null, signal: string | null) =>
      done(new Error(`worker process exited (code ${code}, signal ${signal}) before "${type}"`));
    function done(err?: Error, message?: WorkerMessage): void {
      clearTimeout(timer);
      child.off('message', onMessage);
      child.off('exit', onExit);
      if (err) reject(err);
      else resolve(message!);
    }
    child.on('message', onMessage);
    child.once('exit', onExit);
  });
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms).unref());
}
