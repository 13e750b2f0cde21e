import { readdirSync, readFileSync } from 'node:fs';
import * as fsp from 'node:fs/promises';
import { setTimeout as delay } from 'node:timers/promises';
import { isErrnoError } from '../../errors';

/** What `/proc/<pid>/stat` says of one process (Linux). */
export interface ProcessStat {
  readonly pid: number;
  /** R, S, D, T (stopped), t (stopped by a tracer), Z (zombie), X (dead), … */
  readonly state: string;
  readonly pgrp: number;
  readonly session: number;
  /** Field 22: clock ticks after boot. With the boot id it tells a process from a later one given the same pid. */
  readonly startTime: number;
}

/** Who a process is across pid reuse and reboots: a pid alone may name a later, unrelated process. */
export interface ProcessIdentity {
  readonly pid: number;
  /** Null where there is no /proc to read it from (not Linux): the pid alone is all that is known. */
  readonly startTime: number | null;
  readonly bootId: string | null;
}

/** `/proc/<pid>/stat` reads in flight at once, for all the scans of this process together. */
const PROC_READS = 8;
/** Pauses between scans of a group that is not there yet: from the first up to the last, doubling. */
const FIRST_PAUSE_MS = 1;
const LAST_PAUSE_MS = 64;

export const hasProcfs = process.platform === 'linux';

let bootIdRead: string | null | undefined;

/** This boot's id; null without /proc. */
export function bootId(): string | null {
  bootIdRead ??= hasProcfs ? readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim() : null;
  return bootIdRead;
}

/** "pid (comm) state ppid pgrp session …": comm may hold spaces and parentheses, so fields count after the last ')'. */
export function parseProcessStat(pid: number, text: string): ProcessStat | undefined {
  const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
  const [state, , pgrp, session] = fields;
  const startTime = Number(fields[19]);
  if (state === undefined || !Number.isSafeInteger(startTime)) return undefined;
  return { pid, state, pgrp: Number(pgrp), session: Number(session), startTime };
}

/** The identity of a running process, read at once (usable right after a spawn, before the child can be reaped). */
export function identityOf(pid: number): ProcessIdentity | undefined {
  if (!hasProcfs) return isAlive(pid) ? { pid, startTime: null, bootId: null } : undefined;
  const text = readOrUndefined(() => readFileSync(`/proc/${pid}/stat`, 'utf8'));
  const stat = text === undefined ? undefined : parseProcessStat(pid, text);
  return stat && { pid, startTime: stat.startTime, bootId: bootId() };
}

/**
 * Whether `identity` names a process that still runs, and not a later one with its pid. A zombie has ended: it only
 * waits for its parent to reap it (a worker killed with -9 stays one until its supervisor does, ~1 s under load).
 */
export function isRunning(identity: ProcessIdentity): boolean {
  if (!hasProcfs) return identityOf(identity.pid) !== undefined;
  const text = readOrUndefined(() => readFileSync(`/proc/${identity.pid}/stat`, 'utf8'));
  const stat = text === undefined ? undefined : parseProcessStat(identity.pid, text);
  return stat !== undefined && !isDead(stat) && stat.startTime === identity.startTime && bootId() === identity.bootId;
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return isErrnoError(error, 'EPERM');
  }
}

/** Signals a whole process group; one that has no member left is not an error. */
export function signalGroup(pgid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pgid, signal);
  } catch (error) {
    // ESRCH: every process of the group has already exited.
    if (!isErrnoError(error, 'ESRCH')) throw error;
  }
}

/**
 * Kills a group at once, frozen members too. SIGKILL first: a stopped process dies of it, and nothing of the group
 * may run a moment longer. SIGCONT after it, so a member that somehow kept the kill pending is not left stopped.
 * The group id cannot be taken by another group in between: it stays in use while any member, even a zombie, is left.
 */
export function killGroup(pgid: number): void {
  signalGroup(pgid, 'SIGKILL');
  signalGroup(pgid, 'SIGCONT');
}

/**
 * The members of each group in `pgids`, from one scan of /proc. Members of a group need not descend from its
 * leader (an orphan is adopted by init), so only a full scan finds them all. Concurrent callers share scans, and
 * one scan reads at most PROC_READS files at a time: fifty captures freezing at once open eight files, not fifty
 * times every process's. A caller joins the next scan that starts after it asks, so it sees what its own signal did.
 */
export function scanGroups(pgids: Iterable<number>): Promise<Map<number, ProcessStat[]>> {
  return new Promise((resolve, reject) => {
    waiting.push({ pgids: new Set(pgids), resolve, reject });
    if (!scanning) void runScans();
  });
}

interface ScanRequest {
  readonly pgids: ReadonlySet<number>;
  readonly resolve: (members: Map<number, ProcessStat[]>) => void;
  readonly reject: (error: unknown) => void;
}

let waiting: ScanRequest[] = [];
let scanning = false;

async function runScans(): Promise<void> {
  scanning = true;
  try {
    while (waiting.length > 0) {
      const batch = waiting;
      waiting = [];
      const wanted = new Set(batch.flatMap(({ pgids }) => [...pgids]));
      try {
        const found = await scanProc(wanted);
        for (const { pgids, resolve } of batch) {
          resolve(new Map([...pgids].map((pgid) => [pgid, found.get(pgid) ?? []])));
        }
      } catch (error) {
        for (const { reject } of batch) reject(error);
      }
    }
  } finally {
    scanning = false;
  }
}

/**
 * One pass over /proc, read synchronously: /proc answers from memory in microseconds, while the thread pool an
 * asynchronous read waits for may be busy with a store's writes and fsyncs, which a capture's freeze (this scan
 * decides when it starts) must not wait behind. One file open at a time.
 */
async function scanProc(wanted: ReadonlySet<number>): Promise<Map<number, ProcessStat[]>> {
  const found = new Map<number, ProcessStat[]>();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const pid = Number(name);
    const text = readOrUndefined(() => readFileSync(`/proc/${pid}/stat`, 'utf8'));
    const stat = text === undefined ? undefined : parseProcessStat(pid, text);
    if (!stat || !wanted.has(stat.pgrp)) continue;
    const members = found.get(stat.pgrp);
    if (members) members.push(stat);
    else found.set(stat.pgrp, [stat]);
  }
  return found;
}

/** Visits every process in /proc, PROC_READS at a time: the open files of a scan stay bounded however many there are. */
async function forEachProcess(visit: (pid: number) => Promise<void>): Promise<void> {
  const pids = (await fsp.readdir('/proc')).filter((name) => /^\d+$/.test(name)).map(Number);
  let next = 0;
  const reader = async (): Promise<void> => {
    for (let i = next++; i < pids.length; i = next++) await visit(pids[i]!);
  };
  await Promise.all(Array.from({ length: Math.min(PROC_READS, pids.length) }, reader));
}

/** The process's stat, or undefined once it has exited. */
async function readStat(pid: number): Promise<ProcessStat | undefined> {
  const text = await fsp.readFile(`/proc/${pid}/stat`, 'utf8').catch(() => undefined);
  return text === undefined ? undefined : parseProcessStat(pid, text);
}

/** T: stopped, t: stopped by a tracer, Z/X: dead. */
const isStoppedOrDead = ({ state }: ProcessStat): boolean => 'TtZX'.includes(state);
const isDead = ({ state }: ProcessStat): boolean => 'ZX'.includes(state);

/**
 * Waits until every member of the group is stopped or gone, or `timeoutMs` has passed (SIGSTOP takes effect
 * asynchronously: a process in the middle of a write finishes it first). Resolves whether it happened.
 */
export function waitUntilGroupStopped(pgid: number, timeoutMs: number): Promise<boolean> {
  return waitForGroup(pgid, timeoutMs, (members) => members.every(isStoppedOrDead));
}

/** Waits until the group has no member left but zombies, or `timeoutMs` has passed. Resolves whether it happened. */
export function waitUntilGroupGone(pgid: number, timeoutMs: number): Promise<boolean> {
  return waitForGroup(pgid, timeoutMs, (members) => members.every(isDead));
}

async function waitForGroup(
  pgid: number,
  timeoutMs: number,
  done: (members: readonly ProcessStat[]) => boolean,
): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  for (let pauseMs = FIRST_PAUSE_MS; ; pauseMs = Math.min(pauseMs * 2, LAST_PAUSE_MS)) {
    const members = (await scanGroups([pgid])).get(pgid) ?? [];
    if (done(members)) return true;
    if (Date.now() >= deadline) return false;
    await delay(pauseMs);
  }
}

function readOrUndefined(read: () => string): string | undefined {
  try {
    return read();
  } catch (error) {
    if (isErrnoError(error, 'ENOENT', 'ESRCH')) return undefined;
    throw error;
  }
}

/**
 * The process groups with a live member whose working directory lies under `root`, each with that directory, from one
 * scan of /proc. A process whose directory was deleted is not counted. The caller's own group is never returned.
 */
export async function groupsWorkingUnder(root: string): Promise<{ pgid: number; cwd: string }[]> {
  if (!hasProcfs) return [];
  const prefix = root.endsWith('/') ? root : `${root}/`;
  const own = (await readStat(process.pid))?.pgrp;
  const found = new Map<number, string>();
  await forEachProcess(async (pid) => {
    const cwd = await fsp.readlink(`/proc/${pid}/cwd`).catch(() => undefined); // exited, or not ours to read
    if (cwd === undefined || !cwd.startsWith(prefix) || cwd.endsWith(' (deleted)')) return;
    const stat = await readStat(pid);
    if (!stat || stat.pgrp === own || isDead(stat) || found.has(stat.pgrp)) return;
    found.set(stat.pgrp, cwd);
  });
  return [...found].map(([pgid, cwd]) => ({ pgid, cwd }));
}
