import { spawn, type ChildProcess } from 'node:child_process';
import * as fsp from 'node:fs/promises';
import type { WorkspaceRuntimeSpec } from '../../domain/schemas';
import { isErrnoError, toError } from '../../errors';
import type { ExitInfo, ForkOrigin, StartRequest } from '../session-runtime';
import { RuntimeFailedError } from '../session-runtime';
import { instanceIdentity, workspaceEnvironment } from './env';
import { removeInstanceRecord, writeInstanceRecord } from './instance-records';
import { hasProcfs, identityOf, signalGroup, waitUntilGroupStopped, type ProcessIdentity } from './process-table';
import type { CommittedIndex } from './tree-index';
import type { UserIdentity } from './user';

/** How long a capture waits for SIGSTOP to take effect before walking the directory anyway. */
const FREEZE_SETTLE_MS = 1_000;

/** A live instance of the workspace runtime: the process group its command leads, and the base of its next capture. */
export interface WorkspaceInstance {
  readonly sessionId: string;
  readonly instanceId: string;
  readonly dir: string;
  readonly logPath: string;
  readonly pid: number;
  readonly startedAt: string;
  readonly stopGraceMs: number | undefined;
  /** Settles once the command has exited and `exit` is set. */
  readonly exited: Promise<ExitInfo>;
  exit?: ExitInfo;
  /** The write of its instance record; its removal, once the command has exited, waits for it. */
  recorded?: Promise<void>;
  /** Set by `killAll`: the group has been sent SIGKILL. */
  killed: boolean;
  stopRequested: boolean;
  stopping?: Promise<ExitInfo>;
  /** Captures in progress; the group is frozen while this is above zero. */
  freezeCount: number;
  /** Settles once every process of a freshly frozen group has actually stopped. */
  frozen?: Promise<void>;
  /**
   * The layout of the last capture that was stored, or of the checkpoint the instance was restored from: what
   * `captureState` names unchanged runs against.
   */
  committed?: CommittedIndex;
  /** Set by `stop`: captures still in flight no longer commit their index. */
  indexDropped: boolean;
  /** The process that ends the group once this worker is gone (see {@link holdLifeline}). */
  lifeline?: ChildProcess;
  /** Set while its host fences it off (it cannot renew its lease): the freeze that holds the group, until lifted. */
  fence?: Promise<() => void>;
}

/** What spawning an instance needs of its runtime. */
export interface SpawnContext {
  /** Where the instance's record is written, and removed again once the command has exited. */
  readonly stateDir: string;
  readonly envAllow: readonly string[];
  /** Makes the instance known to the runtime; called as soon as the process exists. */
  register(instance: WorkspaceInstance): void;
}

/**
 * Spawns the command in `dir` as the leader of its own process group, with its output appended to `logPath`, and
 * starts writing its instance record (`recorded`), which the caller awaits.
 */
export async function spawnInstance(
  context: SpawnContext,
  request: StartRequest<WorkspaceRuntimeSpec> & { forkedFrom?: ForkOrigin },
  dir: string,
  logPath: string,
  user: UserIdentity | undefined,
  committed: CommittedIndex | undefined,
): Promise<WorkspaceInstance> {
  const [program, ...args] = request.spec.command;
  if (program === undefined) throw new RuntimeFailedError('command must name a program');
  // The worker's: the command writes to it through the descriptor it is given, and no one else reads it.
  const log = await fsp.open(logPath, 'a', 0o600);
  try {
    const child = spawn(program, args, {
      cwd: dir,
      // Built from an allow-list, never the worker's whole environment: that holds its keys and credentials.
      env: workspaceEnvironment(
        process.env,
        context.envAllow,
        request.spec.env,
        user,
        instanceIdentity(request.sessionId, request.instanceId, request.forkedFrom),
      ),
      // Supplementary groups are dropped by libuv along with the switch.
      ...(user && { uid: user.uid, gid: user.gid }),
      // Its own process group: signals reach everything the command starts, and a Ctrl-C aimed at the
      // worker's terminal does not reach the session.
      detached: true,
      stdio: ['ignore', log.fd, log.fd],
    });
    const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
      child.once('exit', (code, signal) => resolve({ code, signal })),
    );
    await new Promise<void>((resolve, reject) => {
      child.once('spawn', resolve);
      child.once('error', reject);
    });
    if (child.pid === undefined) throw new Error('spawned process has no pid');
    const pid = child.pid;
    // Read before anything is awaited: until then the child cannot have been reaped, so its pid is still its own.
    const identity = identityOf(pid);
    const instance: WorkspaceInstance = {
      sessionId: request.sessionId,
      instanceId: request.instanceId,
      dir,
      logPath,
      pid,
      startedAt: new Date().toISOString(),
      stopGraceMs: request.spec.stopGraceMs,
      killed: false,
      stopRequested: false,
      freezeCount: 0,
      committed,
      indexDropped: false,
      exited: exited.then(async ({ code, signal }) => {
        instance.exit = { exitCode: code, signal, requested: instance.stopRequested };
        // The group must not outlive its leader: a child that ignored SIGTERM, or one left behind by a
        // command that exited by itself, would run on unaccounted for. The group id cannot have been
        // reused yet: it stays taken while any member lives.
        signalGroup(pid, 'SIGKILL');
        releaseLifeline(instance);
        // The write must land before the removal. A record left behind names a process that is gone: harmless.
        await instance.recorded?.catch(() => undefined);
        await removeInstanceRecord(context.stateDir, instance.instanceId).catch(() => undefined);
        return instance.exit;
      }),
    };
    // Registered at once, so that `killAll` reaches it from here on.
    context.register(instance);
    holdLifeline(instance);
    if (identity) {
      instance.recorded = recordInstance(context.stateDir, instance, identity);
      instance.recorded.catch(() => undefined); // awaited by launch
    }
    return instance;
  } catch (error) {
    throw new RuntimeFailedError(spawnFailureMessage(program, request.spec.command, error), { cause: error });
  } finally {
    // The child holds its own copy of the descriptor.
    await log.close();
  }
}

/**
 * Reads its standard input, whose other end only this worker holds, until end of file; then kills the group named by
 * its argument. The kernel closes a process's descriptors however it ends (kill -9 and the OOM killer included), so
 * the group goes within milliseconds of its worker, even when no worker starts again on the host. SIGCONT after
 * SIGKILL: a frozen member must not keep the kill pending.
 */
const LIFELINE_SCRIPT = 'while read -r _; do :; done; kill -s KILL -- "-$1"; kill -s CONT -- "-$1"';

/**
 * Gives the instance's group a lifeline: a small shell, in a process group and session of its own (so that neither a
 * capture's SIGSTOP of the session's group nor a Ctrl-C aimed at the worker reaches it), that ends the group once this
 * worker is gone. Node opens the pipe close-on-exec, so no other child of the worker holds its write end. Node has no
 * PR_SET_PDEATHSIG, and the command's own children could not be given one anyway. A process of the session that
 * leaves the group (setsid, setpgid) leaves its lifeline too.
 */
function holdLifeline(instance: WorkspaceInstance): void {
  if (instance.exit) return;
  const lifeline = spawn('/bin/sh', ['-c', LIFELINE_SCRIPT, 'ds-lifeline', String(instance.pid)], {
    cwd: '/',
    env: {},
    detached: true,
    stdio: ['pipe', 'ignore', 'ignore'],
  });
  instance.lifeline = lifeline;
  // Neither keeps the worker's event loop alive; the pipe stays open as long as the worker lives.
  lifeline.unref();
  (lifeline.stdin as (NodeJS.WritableStream & { unref?: () => void }) | null)?.unref?.();
  lifeline.stdin?.on('error', () => undefined);
  lifeline.once('error', () => undefined);
  // Ended by anything but the worker (an operator, the OOM killer): the group needs another.
  lifeline.once('exit', () => {
    if (instance.lifeline === lifeline && !instance.exit) holdLifeline(instance);
  });
}

/** The group has ended: its lifeline has nothing left to end, and must not outlive it to name a reused group id. */
function releaseLifeline(instance: WorkspaceInstance): void {
  const lifeline = instance.lifeline;
  instance.lifeline = undefined;
  if (lifeline && lifeline.exitCode === null && lifeline.signalCode === null) lifeline.kill('SIGKILL');
}

/** Writes the record a later incarnation of the worker fences the instance's group by. */
function recordInstance(
  stateDir: string,
  instance: WorkspaceInstance,
  { startTime, bootId }: ProcessIdentity,
): Promise<void> {
  const { instanceId, sessionId, dir, pid } = instance;
  return writeInstanceRecord(stateDir, { instanceId, sessionId, dir, pid, pgid: pid, startTime, bootId });
}

/** SIGTERM to the group, SIGKILL once `graceMs` have passed; resolves with how the command ended. */
export async function terminate(instance: WorkspaceInstance, graceMs: number): Promise<ExitInfo> {
  instance.stopRequested = true;
  signalRunning(instance, 'SIGTERM');
  // A group frozen by a capture would keep SIGTERM pending until resumed; the capture reads on regardless.
  signalRunning(instance, 'SIGCONT');
  const escalation = setTimeout(() => signalRunning(instance, 'SIGKILL'), graceMs);
  try {
    return await instance.exited;
  } finally {
    clearTimeout(escalation);
  }
}

/**
 * Freezes the instance's process group for a point-in-time capture and returns the matching thaw, which
 * resumes the group once the last concurrent capture is done, and does nothing when called again.
 */
export async function freeze(instance: WorkspaceInstance): Promise<() => void> {
  if (instance.exit) return () => {};
  if (instance.freezeCount++ === 0) {
    signalRunning(instance, 'SIGSTOP');
    // Without /proc there is nothing to watch: the capture goes on at once.
    instance.frozen = hasProcfs
      ? waitUntilGroupStopped(instance.pid, FREEZE_SETTLE_MS).then(() => undefined)
      : Promise.resolve();
  }
  await instance.frozen;
  let thawed = false;
  return () => {
    if (thawed) return;
    thawed = true;
    if (--instance.freezeCount === 0) signalRunning(instance, 'SIGCONT');
  };
}

/**
 * Signals the instance's whole process group (negative pid) while its leader runs. After the leader has exited
 * its pid, and so the group id, may be reused by an unrelated process, so nothing is sent any more.
 */
export function signalRunning(instance: WorkspaceInstance, signal: NodeJS.Signals): void {
  if (!instance.exit) signalGroup(instance.pid, signal);
}

/** What a failed spawn says: plainly for the common causes, with the system's words otherwise. */
function spawnFailureMessage(program: string, command: readonly string[], error: unknown): string {
  if (isErrnoError(error, 'ENOENT')) return `command not found: ${program}`;
  if (isErrnoError(error, 'EACCES')) return `permission denied: ${program} cannot be run`;
  return `cannot run command ${JSON.stringify(command)}: ${toError(error).message}`;
}
