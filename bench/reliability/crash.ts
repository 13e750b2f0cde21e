/**
 * Scenarios 1 and 2: the worker dies (kill -9) or is stopped (SIGTERM) while sessions are being started, captured,
 * restored or drained; then the next worker starts on the same data directory with the same worker id.
 *
 * A round prepares a few sessions per operation, picks one moment for the fault, and begins each operation at its
 * own random point before it (uniform in [0, T), T the operation's duration measured without a fault), so that
 * every session is struck at an independent point of its operation by one fault and one restart.
 */
import { setTimeout as delay } from 'node:timers/promises';
import type { WorkerProcess } from './cluster';
import { progress, type Context } from './context';
import { identityOf } from '../../src/runtimes/workspace/process-table';
import type { Subject } from './judge';
import { FAST_LIVENESS, writeBlobs } from './workload';

export type Fault = 'kill' | 'term';
export type Operation = 'start' | 'capture' | 'restore';
export type Durations = Record<Operation | 'drain', number>;

const OPERATIONS: readonly Operation[] = ['start', 'capture', 'restore'];
export const FAULT_NAMES: Record<Fault, string> = { kill: 'kill -9', term: 'SIGTERM' };
/** A second SIGTERM sooner than this after the first is a copy of it (src/worker.ts): ignored. */
const DUPLICATE_SIGNAL_MS = 2_000;

export function rowName(fault: Fault, what: Operation | 'drain' | 'memory'): string {
  return what === 'memory' ? `${FAULT_NAMES[fault]}: memory sessions beside` : `${FAULT_NAMES[fault]} during ${what}`;
}

export function rowNames(fault: Fault): string[] {
  return [...OPERATIONS, 'drain' as const, 'memory' as const].map((what) => rowName(fault, what));
}

/**
 * A session ready for `operation`: not started (start); paused (restore); running with a checkpoint and, since it,
 * new files that no checkpoint holds yet, for the capture or the drain to write.
 */
async function prepare(ctx: Context, row: string, operation: Operation | 'drain', id: string): Promise<Subject> {
  if (operation === 'start') return ctx.counter(row, id, FAST_LIVENESS);
  const subject = await ctx.runningCounter(row, id, FAST_LIVENESS);
  if (operation === 'restore') {
    subject.acked.push(await subject.handle.pause());
    return subject;
  }
  subject.acked.push(await subject.handle.checkpoint());
  const status = await subject.handle.status();
  subject.blobVersions.push(await writeBlobs(status.runtime!.location));
  return subject;
}

function begin(ctx: Context, subject: Subject, operation: Operation): void {
  const call = {
    start: () => ctx.host.sessions.start(subject.spec),
    capture: () => subject.handle.checkpoint(),
    restore: () => subject.handle.resume(),
  }[operation];
  subject.begin(operation, call);
}

/**
 * How long each operation takes on this host without a fault: the windows faults are drawn from. A first pass warms
 * the fresh worker up (its first sessions are several times slower than the rest); the second begins each operation
 * at a random point of the first pass's window, as a round does, and its mean per operation is the window. A drain
 * checkpoints and stops each session, then answers: it is timed as the pause of as many sessions like a drain
 * round's at once (a real drain would cost a worker restart).
 */
export async function calibrate(ctx: Context, perOp: number): Promise<Durations> {
  const warm = await timeOperations(ctx, perOp, 'warm');
  const t = await timeOperations(ctx, perOp, 'cal', warm);
  const draining = await Promise.all(
    Array.from({ length: perOp }, (_, i) => prepare(ctx, 'calibration', 'drain', `${ctx.host.name}-cal-drain-${i}`)),
  );
  draining.push(await ctx.runningMemory('calibration', `${ctx.host.name}-cal-memory`, FAST_LIVENESS));
  const drainStarted = Date.now();
  await Promise.all(draining.map((s) => s.handle.pause()));
  const drain = Date.now() - drainStarted;
  await Promise.all(draining.map((s) => s.handle.stop({ checkpoint: false })));
  return { ...t, drain };
}

/** The mean duration of each operation, `perOp` of each at once (begun at random points of `stagger`, if given). */
async function timeOperations(
  ctx: Context,
  perOp: number,
  tag: string,
  stagger?: Record<Operation, number>,
): Promise<Record<Operation, number>> {
  const planned = OPERATIONS.flatMap((op) =>
    Array.from({ length: perOp }, (_, i) => ({ op, id: `${ctx.host.name}-${tag}-${op}-${i}` })),
  );
  const subjects = await Promise.all(planned.map(({ op, id }) => prepare(ctx, 'calibration', op, id)));
  const times = await Promise.all(
    subjects.map(async (s, i) => {
      const op = planned[i]!.op;
      await delay(Math.random() * (stagger?.[op] ?? 0));
      const started = Date.now();
      begin(ctx, s, op);
      await s.operation!.done;
      if (!s.operation!.outcome?.ok) throw new Error(`calibration: ${op} failed: ${s.operation!.outcome?.error}`);
      return Date.now() - started;
    }),
  );
  await Promise.all(subjects.map((s) => s.handle.stop({ checkpoint: false })));
  const mean = (op: Operation) => {
    const samples = times.filter((_, i) => planned[i]!.op === op);
    return Math.round(samples.reduce((a, b) => a + b, 0) / samples.length);
  };
  return { start: mean('start'), capture: mean('capture'), restore: mean('restore') };
}

/** One round of start/capture/restore under `fault`, and one memory session beside them. */
export async function operationsRound(ctx: Context, fault: Fault, round: number, perOp: number, t: Durations) {
  const worker = ctx.host.currentWorker ?? (await ctx.host.startWorker());
  const tag = `${fault}${round}`;
  const planned = OPERATIONS.flatMap((op) =>
    Array.from({ length: perOp }, (_, i) => ({ op, id: `${tag}-${op}-${i}` })),
  );
  const subjects = await Promise.all(planned.map(({ op, id }) => prepare(ctx, rowName(fault, op), op, id)));
  const memory = await ctx.runningMemory(rowName(fault, 'memory'), `${tag}-memory`, FAST_LIVENESS);
  progress(`  ${ctx.host.name}: prepared ${subjects.length + 1} sessions`);

  const faultAt = Date.now() + Math.max(...OPERATIONS.map((op) => t[op])) + 50;
  const began = subjects.map(async (subject, i) => {
    await delay(Math.max(0, faultAt - Math.random() * t[planned[i]!.op] - Date.now()));
    const started = Date.now();
    begin(ctx, subject, planned[i]!.op);
    return started;
  });
  await delay(Math.max(0, faultAt - Date.now()));
  const struck = Date.now();
  await strike(ctx, worker, fault);
  const starts = await Promise.all(began);
  subjects.forEach((s, i) => Object.assign(s.operation!, { offsetMs: struck - starts[i]!, struckAt: struck }));
  memory.begin(FAULT_NAMES[fault], () => Promise.resolve());
  await nextWorker(ctx, worker, [...subjects, memory]);
  await ctx.aftermath([...subjects, memory], `${FAULT_NAMES[fault]} round ${round} (${ctx.host.name})`);
}

/**
 * One round of a drain interrupted: SIGTERM, then kill -9 (or a second SIGTERM, which shuts down without waiting for
 * the drain once it comes later than a copy of the first would) at a random point of the drain.
 */
export async function drainRound(ctx: Context, fault: Fault, round: number, perOp: number, t: Durations) {
  const worker = ctx.host.currentWorker ?? (await ctx.host.startWorker());
  const tag = `${fault}${round}-drain`;
  const row = rowName(fault, 'drain');
  const subjects = await Promise.all(
    Array.from({ length: perOp }, (_, i) => prepare(ctx, row, 'drain', `${tag}-${i}`)),
  );
  subjects.push(await ctx.runningMemory(rowName(fault, 'memory'), `${tag}-memory`, FAST_LIVENESS));
  progress(`  ${ctx.host.name}: prepared ${subjects.length} sessions`);
  const offset = Math.random() * (fault === 'kill' ? t.drain : t.drain + DUPLICATE_SIGNAL_MS);
  for (const s of subjects) s.begin('drain', () => worker.exited());
  worker.child.kill('SIGTERM');
  await delay(offset);
  // Under way until the worker says it has drained (or the deadline passed).
  const underWay = !/drained \d+ of \d+/.test(worker.output());
  const struckAt = Date.now();
  // The memory session beside is drained too, but the counts of faults under way are of the rows' own operations.
  for (const s of subjects)
    Object.assign(s.operation!, { offsetMs: Math.round(offset), ...(s.isMemory ? {} : { struckAt, underWay }) });
  await strike(ctx, worker, fault);
  await nextWorker(ctx, worker, subjects);
  await ctx.aftermath(subjects, `${FAULT_NAMES[fault]} drain round ${round} (${ctx.host.name})`);
}

async function strike(ctx: Context, worker: WorkerProcess, fault: Fault): Promise<void> {
  if (fault === 'kill') await ctx.host.killWorker(worker);
  else if (!(await ctx.host.terminateWorker(worker)).exitedBySelf) {
    ctx.tally.findings.push(`NOTE — worker ${worker.pid} did not exit within a minute of SIGTERM: killed`);
  }
}

/**
 * Starts the next worker; whatever of the sessions' processes started before it and is still there is an orphan.
 * What the stopped worker said of its drain goes with each session's finding.
 */
async function nextWorker(ctx: Context, previous: WorkerProcess, subjects: readonly Subject[]): Promise<void> {
  const drained = previous.output().match(/^.*drained \d+ of \d+ session.*$(\n {2}not drained: .*$)*/m)?.[0];
  for (const s of subjects) s.notes.push(`the worker said: ${drained ?? 'nothing of a drain'}`);
  progress(`  ${ctx.host.name}: the worker is gone; starting the next one`);
  const next = await ctx.host.startWorker();
  const since = identityOf(next.pid)?.startTime ?? Infinity;
  const left = ctx.processes(new Set(subjects.map((s) => s.sessionId))).filter((p) => p.startTime < since);
  ctx.orphans(left, 'still alive after the next worker started');
}
