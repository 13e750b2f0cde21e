import { spawn } from 'node:child_process';
import { createHash, randomUUID } from 'node:crypto';
import { constants as fsConstants, type BigIntStats } from 'node:fs';
import * as fsp from 'node:fs/promises';
import * as path from 'node:path';
import type { Readable } from 'node:stream';
import { setTimeout as delay } from 'node:timers/promises';
import { types } from 'node:util';
import { extract as tarExtract } from 'tar-stream';
import type { Extract, Header } from 'tar-stream';
import type { WorkspaceRuntimeSpec } from '../domain/schemas';
import { writevAll } from '../fs-io';
import { sourceStream, type UnchangedRange } from '../snapshots';
import {
  fenceRecord,
  listInstanceRecords,
  readInstanceRecord,
  removeInstanceRecord,
  writeInstanceRecord,
  type FenceOutcome,
  type FoundRecord,
} from './instance-records';
import {
  groupsWorkingUnder,
  hasProcfs,
  identityOf,
  isErrnoException,
  killGroup,
  signalGroup,
  waitUntilGroupGone,
  waitUntilGroupStopped,
} from './process-table';
import type {
  CapturedState,
  ExitInfo,
  RestoreRequest,
  RuntimeInstanceInfo,
  SessionRuntime,
  StartRequest,
} from './session-runtime';
import { RuntimeFailedError, RuntimeNotFoundError } from './session-runtime';
import { lockStateDir } from './state-lock';
import {
  encodeTarHeader,
  readTarHeaderLayout,
  TAR_BLOCK_BYTES,
  TAR_TRAILER_BYTES,
  tarPaddingBytes,
  tarRecordLength,
  tarTrailer,
  type TarEntry,
} from './tar-writer';
import { checkEnvAllow, checkSpecEnv, DEFAULT_WORKSPACE_ENV_ALLOW, workspaceEnvironment } from './workspace-env';
import { resolveWorkspaceUser, type UserIdentity, type WorkspaceUser } from './workspace-user';

/**
 * Thrown by `restore` when the state archive holds an entry that could land outside the workspace (an absolute
 * path, "..", a symlink pointing out) or one a workspace cannot hold (hard links, devices, fifos).
 */
export class ArchiveRejectedError extends Error {
  constructor(
    message: string,
    readonly entryName: string,
  ) {
    super(message);
    this.name = 'ArchiveRejectedError';
  }
}

export interface WorkspaceRuntimeOptions {
  /** Instances live in `<rootDir>/<sessionId>/<instanceId>`, their output in `<instanceId>.log` beside it. */
  rootDir: string;
  /**
   * Where the runtime keeps a record of each running instance (pid, process group, start time) and its lock
   * (default `<rootDir>/.run`). A runtime made on a state directory whose lock a live runtime holds throws
   * {@link WorkspaceRootLockedError}: give each root one state directory, and each state directory one root.
   */
  stateDir?: string;
  /** Where `recoverHost` and the discarding of leftovers say what they did (default `console.log`). */
  log?: (message: string) => void;
  /** How long `stop` waits after SIGTERM before SIGKILL when neither the call nor the spec says (default 10 s). */
  defaultStopGraceMs?: number;
  /**
   * The worker's variables a command inherits: names, or prefixes ending in `*` (default
   * {@link DEFAULT_WORKSPACE_ENV_ALLOW}). The spec's `env` comes on top; `DS_*` and `TEMPORAL_*` never pass.
   */
  envAllow?: readonly string[];
  /**
   * Run commands as this unprivileged user (the worker must be root): each workspace is handed to it, and its
   * session's directory is the worker's, so it cannot list other instances. Sessions that run as one user can still
   * reach each other's processes and, by path, workspaces (docs/design.md §7). Unset: the worker's user.
   */
  user?: WorkspaceUser;
}

interface WorkspaceInstance {
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
}

/**
 * One record of a stored capture (or of a restored checkpoint): where it lies in that stream, and what a record of a
 * later capture must match to be the same bytes.
 */
interface IndexedRecord {
  readonly offset: number;
  /** Headers, content and padding. */
  readonly length: number;
  /** sha256 of the header bytes (pax and ustar): name, type, mode, mtime, size, link target. */
  readonly headerDigest: string;
  /** Regular files: their {@link statKey} when the content was read (or written, by restore). */
  readonly statKey?: string;
}

/** The layout of a capture by path ({@link END_OF_ARCHIVE} for the trailer), and the checkpoint it was stored as. */
interface CommittedIndex {
  readonly checkpointId: string;
  readonly records: ReadonlyMap<string, IndexedRecord>;
}

const SAFE_ID = /^[A-Za-z0-9][A-Za-z0-9._-]*$/;
const VERSION = '1';
/** How long a capture waits for SIGSTOP to take effect before walking the directory anyway. */
const FREEZE_SETTLE_MS = 1_000;
/** How long fencing waits for a killed group to be gone before it reports the group as surviving. */
const FENCE_WAIT_MS = 10_000;

/** What {@link WorkspaceRuntime.recoverHost} did. */
export interface HostRecovery {
  /** Process groups a previous incarnation left running (or frozen) that were killed. */
  killed: number;
  /** Instance directories no live instance owned, removed. */
  removedDirs: number;
  /** The size of the regular files removed with them and of their logs. */
  bytes: number;
}

/**
 * A working directory with a command running in it, on this host. The command leads its own process group, so
 * `stop` and the freeze around `capture` reach everything it started. State is the directory, as a tar stream.
 */
export class WorkspaceRuntime implements SessionRuntime<WorkspaceRuntimeSpec> {
  readonly kind = 'workspace';
  readonly version = VERSION;

  private readonly rootDir: string;
  private readonly stateDir: string;
  private readonly log: (message: string) => void;
  private readonly defaultStopGraceMs: number;
  private readonly envAllow: readonly string[];
  private readonly user: WorkspaceUser | undefined;
  /** The user's ids, looked up once; a failed look-up is tried again by the next start. */
  private userIdentity?: Promise<UserIdentity>;
  private readonly instances = new Map<string, WorkspaceInstance>();
  /** The directory of each start or restore in flight, by instance id, from its checks until it has settled. */
  private readonly creating = new Map<string, string>();

  /** Throws {@link WorkspaceRootLockedError} when another live runtime holds the state directory. */
  constructor(options: WorkspaceRuntimeOptions) {
    this.rootDir = path.resolve(options.rootDir);
    this.stateDir = path.resolve(options.stateDir ?? path.join(this.rootDir, '.run'));
    this.log = options.log ?? ((message) => console.log(message));
    this.defaultStopGraceMs = options.defaultStopGraceMs ?? 10_000;
    this.envAllow = options.envAllow ?? DEFAULT_WORKSPACE_ENV_ALLOW;
    checkEnvAllow(this.envAllow);
    this.user = options.user;
    lockStateDir(this.stateDir, this.rootDir);
  }

  /**
   * Fences what a previous incarnation of the worker left on this host; call it once, before any session is started
   * or restored here. Every process group an instance record names that is still the same group (by start time) is
   * sent SIGKILL and SIGCONT, frozen ones too, and waited for; then its record goes. Then every instance directory
   * and log under the root that no instance of this runtime owns is removed, and session directories left empty.
   * A group still there 10 s after SIGKILL (stuck in the kernel) keeps its record, so the next recovery tries again.
   */
  async recoverHost(): Promise<HostRecovery> {
    let killed = 0;
    for (const found of await listInstanceRecords(this.stateDir)) {
      if ('record' in found && this.instances.get(found.record.instanceId)?.pid === found.record.pid) continue;
      if ((await this.fence(found)) === 'killed') killed++;
    }
    killed += await this.fenceUnrecorded();
    const { removedDirs, bytes } = await this.removeUnowned();
    this.log(
      `workspace recovery: killed ${killed} process group(s) left running, ` +
        `removed ${removedDirs} abandoned workspace(s) (${bytes} bytes) under ${this.rootDir}`,
    );
    return { killed, removedDirs, bytes };
  }

  canRestore(version: string): boolean {
    return version === VERSION;
  }

  /**
   * Starts the command in a fresh directory. An instance id that is not live here but has a directory on disk (an
   * attempt that crashed, in this process or before it restarted) is started afresh: what that attempt left goes.
   */
  async start(request: StartRequest<WorkspaceRuntimeSpec>): Promise<RuntimeInstanceInfo> {
    const { dir, logPath, user } = await this.createWorkspace(request);
    try {
      const seeded = await writeSeedFiles(dir, request.spec.files ?? {});
      if (user) await handOver(dir, seeded, user);
      return this.info(await this.launch(request, dir, logPath, user));
    } catch (error) {
      await discardWorkspace(dir, logPath);
      throw error;
    } finally {
      this.creating.delete(request.instanceId);
    }
  }

  /**
   * Extracts `request.state` into a fresh directory and runs the command there. With `request.checkpointId` the
   * checkpoint becomes the new instance's base: restore follows the record layout of the stream as it extracts it,
   * so the first `captureState` names the records still as restored as ranges of that checkpoint. The layout is kept
   * only when a capture of the restored tree would write every record's header exactly where and as the stream had
   * it; a stream from another encoder, or with anything else unexpected in it, leaves the instance without a base.
   * Like `start`, it starts afresh over what a crashed attempt with the same instance id left.
   */
  async restore(request: RestoreRequest<WorkspaceRuntimeSpec>): Promise<RuntimeInstanceInfo> {
    const { dir, logPath, user } = await this.createWorkspace(request).catch((error: unknown) => {
      request.state.destroy();
      throw error;
    });
    try {
      const { checkpointId } = request;
      const restoring = checkpointId === undefined ? undefined : { checkpointId, layout: new TarLayoutReader() };
      const restored = await extractArchive(request.state, dir, restoring?.layout);
      // Before the index reads the tree's stats: a change of owner is a change of ctime.
      if (user) await handOver(dir, namesOf(restored), user);
      // Only now has the whole stream verified: nothing runs on state that may be corrupt.
      const index = restoring
        ? await indexRestoredTree(dir, restoring.checkpointId, restoring.layout.finish(), restored)
        : undefined;
      // The index becomes the base with the instance itself: a restore that fails leaves none.
      return this.info(await this.launch(request, dir, logPath, user, index));
    } catch (error) {
      await discardWorkspace(dir, logPath);
      throw error;
    } finally {
      this.creating.delete(request.instanceId);
    }
  }

  async capture(instanceId: string): Promise<Readable> {
    const instance = this.get(instanceId);
    const thaw = await this.freeze(instance);
    // The same bytes as a `captureState` without a base. The stream's 'close' follows 'end', 'error' and
    // `destroy()` alike and closes the source, so the group is resumed whatever the consumer does.
    return sourceStream(openCapture(instance.dir, thaw, undefined, undefined));
  }

  /**
   * `capture`, told as pieces: records byte-identical to a record of the instance's base (the last stored capture,
   * or the checkpoint it was restored from) are named as {@link UnchangedRange}s of it instead of read. Files are judged by their lstat (size, mtime, ctime, inode,
   * device), everything else by its header bytes.
   */
  async captureState(instanceId: string): Promise<CapturedState> {
    const instance = this.get(instanceId);
    // Taken before any await: a `stored` that lands meanwhile must not mix one checkpoint's id with another's layout.
    const base = instance.committed;
    const thaw = await this.freeze(instance);
    const clockNs = await fileSystemNow(path.dirname(instance.dir));
    return openCapture(instance.dir, thaw, base, {
      clockNs,
      commit: (index) => {
        // A disposed or stopped instance keeps no index, whatever captures were still in flight.
        if (this.instances.get(instance.instanceId) === instance && !instance.indexDropped) {
          instance.committed = index;
        }
      },
    });
  }

  async stop(instanceId: string, options: { graceMs?: number } = {}): Promise<ExitInfo> {
    const instance = this.get(instanceId);
    // Its next state is a restore into a new instance, which indexes the checkpoint it restores for itself.
    instance.committed = undefined;
    instance.indexDropped = true;
    if (instance.exit) return instance.exit;
    instance.stopping ??= this.terminate(instance, options.graceMs ?? instance.stopGraceMs ?? this.defaultStopGraceMs);
    return instance.stopping;
  }

  async waitForExit(instanceId: string, signal?: AbortSignal): Promise<ExitInfo> {
    return raceAbort(this.get(instanceId).exited, signal);
  }

  describe(instanceId: string): RuntimeInstanceInfo | undefined {
    const instance = this.instances.get(instanceId);
    return instance && this.info(instance);
  }

  /**
   * Stops the instance if it still runs, then removes its directory and log. An id not live here removes what is on
   * disk under it, if anything: a retry after a crash frees what the first attempt made.
   */
  async dispose(instanceId: string): Promise<void> {
    const instance = this.instances.get(instanceId);
    if (!instance) return this.disposeLeftover(instanceId);
    if (!instance.exit) await this.stop(instanceId);
    await removeWorkspace(instance.dir, instance.logPath);
    await removeIfEmpty(path.dirname(instance.dir));
    this.instances.delete(instanceId);
  }

  /** Stops every running instance (for worker shutdown); directories stay for a later restore or dispose. */
  async stopAll(): Promise<void> {
    await Promise.all([...this.instances.keys()].map((id) => this.stop(id)));
  }

  /**
   * Sends every running instance's process group SIGKILL and SIGCONT, at once and synchronously: safe in a
   * `process.on('exit')` handler, which cannot wait. Calling it again signals nothing twice. Returns the number of
   * groups signalled; throws, after signalling all the others, if a group could not be.
   */
  killAll(): number {
    let signalled = 0;
    const failures: unknown[] = [];
    for (const instance of this.instances.values()) {
      if (instance.exit || instance.killed) continue;
      instance.killed = true;
      instance.stopRequested = true;
      try {
        killGroup(instance.pid);
        signalled++;
      } catch (error) {
        failures.push(error);
      }
    }
    if (failures.length > 0) throw failures[0];
    return signalled;
  }

  private get(instanceId: string): WorkspaceInstance {
    const instance = this.instances.get(instanceId);
    if (!instance) throw new RuntimeNotFoundError(instanceId);
    return instance;
  }

  private info(instance: WorkspaceInstance): RuntimeInstanceInfo {
    return {
      instanceId: instance.instanceId,
      sessionId: instance.sessionId,
      kind: this.kind,
      version: this.version,
      location: instance.dir,
      pid: instance.pid,
      output: instance.logPath,
      startedAt: instance.startedAt,
      running: !instance.exit,
    };
  }

  /**
   * Checks the request, then creates the instance's fresh, empty directory, and resolves the user the command runs
   * as, if any. What an earlier attempt with the same id left (its directory, log, processes) is discarded first:
   * the id is not live here, so nothing here uses it. Registers the id as being created; the caller unregisters it.
   */
  private async createWorkspace(
    request: StartRequest<WorkspaceRuntimeSpec>,
  ): Promise<{ dir: string; logPath: string; user: UserIdentity | undefined }> {
    const { instanceId } = request;
    assertSafeId('session id', request.sessionId);
    assertSafeId('instance id', instanceId);
    checkSpecEnv(request.spec.env);
    if (this.instances.has(instanceId)) {
      throw new RuntimeFailedError(`runtime instance ${instanceId} already exists on this worker`);
    }
    this.refuseWhileCreating(instanceId);
    const sessionDir = path.join(this.rootDir, request.sessionId);
    const dir = path.join(sessionDir, instanceId);
    this.creating.set(instanceId, dir);
    try {
      const user = await this.resolveUser();
      await this.discardLeftover(instanceId, dir);
      return await this.makeWorkspaceDir(sessionDir, dir, user);
    } catch (error) {
      this.creating.delete(instanceId);
      throw error;
    }
  }

  /** A second start of an id whose first is still in flight would discard the directory the first is filling. */
  private refuseWhileCreating(instanceId: string): void {
    if (this.creating.has(instanceId)) {
      // Not a RuntimeFailedError: a retry once the first attempt has settled finds it live, or finds it gone.
      throw new Error(`runtime instance ${instanceId} is still being started on this worker; try again`);
    }
  }

  /** Discards what an earlier attempt with this id left: its processes, if a record names them, its directory, log. */
  private async discardLeftover(instanceId: string, dir: string): Promise<void> {
    const found = await readInstanceRecord(this.stateDir, instanceId);
    if (found) await this.fence(found);
    if (!(await anyExists(dir, `${dir}.log`))) return;
    this.log(`workspace runtime: discarding what an earlier attempt of instance ${instanceId} left in ${dir}`);
    await removeWorkspace(dir, `${dir}.log`);
  }

  /** `dispose` of an id not live here: what is on disk under it, in whichever session. */
  private async disposeLeftover(instanceId: string): Promise<void> {
    if (!isSafeId(instanceId)) return; // nothing can lie under a name no start accepts
    this.refuseWhileCreating(instanceId);
    const found = await readInstanceRecord(this.stateDir, instanceId);
    if (found) await this.fence(found);
    for (const sessionDir of await this.sessionDirs()) {
      const dir = path.join(sessionDir, instanceId);
      if (!(await anyExists(dir, `${dir}.log`))) continue;
      await removeWorkspace(dir, `${dir}.log`);
      await removeIfEmpty(sessionDir);
    }
  }

  /**
   * Kills what a record of another incarnation names, if still there, and drops the record, unless the group
   * outlived SIGKILL: then it stays for the next recovery. A record that cannot be read names nothing to act on.
   */
  private async fence(found: FoundRecord): Promise<FenceOutcome | undefined> {
    if ('problem' in found) {
      this.log(`workspace runtime: removing unreadable instance record ${found.file} (${found.problem})`);
      await fsp.rm(found.file, { force: true });
      return undefined;
    }
    const { record } = found;
    const outcome = await fenceRecord(record, FENCE_WAIT_MS);
    const group = `process group ${record.pgid} of instance ${record.instanceId} (session ${record.sessionId})`;
    if (outcome === 'survived') {
      this.log(`workspace runtime: ${group} is still there ${FENCE_WAIT_MS} ms after SIGKILL; its record stays`);
      return outcome;
    }
    if (outcome === 'killed') this.log(`workspace runtime: killed ${group}, left running by an earlier worker`);
    if (outcome === 'unverifiable') {
      this.log(`workspace runtime: cannot tell whether ${group} still runs without /proc; left alone`);
    }
    await fsp.rm(found.file, { force: true });
    return outcome;
  }

  /**
   * Kills the process groups working in an instance directory that no live instance owns: those a worker started and
   * died before it could record (between the spawn and the record's rename). They are found by their working
   * directory, which the command was started in.
   */
  private async fenceUnrecorded(): Promise<number> {
    const owned = new Set([...[...this.instances.values()].map(({ dir }) => dir), ...this.creating.values()]);
    let killed = 0;
    for (const { pgid, cwd } of await groupsWorkingUnder(this.rootDir)) {
      const [session, instance] = path.relative(this.rootDir, cwd).split(path.sep);
      if (!session || !instance || !isSafeId(instance)) continue;
      if (owned.has(path.join(this.rootDir, session, instance))) continue;
      killGroup(pgid);
      const gone = await waitUntilGroupGone(pgid, FENCE_WAIT_MS);
      this.log(
        `workspace runtime: ${gone ? 'killed' : 'could not kill'} process group ${pgid} working in ${cwd}, ` +
          'started by an earlier worker that died before it recorded it',
      );
      if (gone) killed++;
    }
    return killed;
  }

  /**
   * Removes every instance directory and log under the root that no instance of this runtime owns (live, or being
   * created), the temp files of clock readings, and session directories left empty. Only what has the layout the
   * runtime makes is touched: `<session>/<instance>` directories and `<session>/<instance>.log` files.
   */
  private async removeUnowned(): Promise<{ removedDirs: number; bytes: number }> {
    const owned = new Set([...[...this.instances.values()].map(({ dir }) => dir), ...this.creating.values()]);
    let removedDirs = 0;
    let bytes = 0;
    for (const sessionDir of await this.sessionDirs()) {
      for (const entry of await fsp.readdir(sessionDir, { withFileTypes: true })) {
        const file = path.join(sessionDir, entry.name);
        // A capture's clock reading, left by a worker that died while it took one.
        if (entry.isFile() && entry.name.startsWith('.clock-')) await fsp.rm(file, { force: true });
        const isLog = entry.isFile() && entry.name.endsWith('.log');
        const instanceDir = isLog ? file.slice(0, -'.log'.length) : file;
        if (!(isLog || entry.isDirectory()) || !isSafeId(path.basename(instanceDir)) || owned.has(instanceDir))
          continue;
        if (isLog) {
          bytes += (await fsp.lstat(file)).size;
          await fsp.rm(file, { force: true });
        } else {
          bytes += await treeBytes(file);
          await removeTree(file);
          removedDirs++;
        }
      }
      await removeIfEmpty(sessionDir);
    }
    return { removedDirs, bytes };
  }

  /** The session directories under the root (what a start would have made: a safe name, a real directory). */
  private async sessionDirs(): Promise<string[]> {
    const entries = await fsp.readdir(this.rootDir, { withFileTypes: true }).catch((error: unknown) => {
      if (isErrnoException(error) && error.code === 'ENOENT') return [];
      throw error;
    });
    return entries
      .filter((entry) => entry.isDirectory() && isSafeId(entry.name))
      .map((entry) => path.join(this.rootDir, entry.name));
  }

  private async makeWorkspaceDir(
    sessionDir: string,
    dir: string,
    user: UserIdentity | undefined,
  ): Promise<{ dir: string; logPath: string; user: UserIdentity | undefined }> {
    await fsp.mkdir(this.rootDir, { recursive: true });
    // A concurrent dispose or failed start of the same session may remove its directory once empty: then again.
    for (let attempt = 1; ; attempt++) {
      await fsp.mkdir(sessionDir).catch((error: unknown) => {
        if (!isErrnoException(error) || error.code !== 'EEXIST') throw error;
      });
      // The worker's, and no one else's to read: with a user, searchable (its workspace lies below) but not
      // listable, so a command cannot find the session's other instances or its logs.
      await fsp.chmod(sessionDir, user ? 0o711 : 0o700).catch(retryOnMissing(attempt));
      try {
        await fsp.mkdir(dir, { mode: 0o700 });
        break;
      } catch (error) {
        if (isErrnoException(error) && error.code === 'EEXIST') {
          throw new RuntimeFailedError(`workspace ${dir} already exists`, { cause: error });
        }
        retryOnMissing(attempt)(error);
      }
    }
    return { dir, logPath: `${dir}.log`, user };
  }

  private resolveUser(): Promise<UserIdentity | undefined> {
    if (this.user === undefined) return Promise.resolve(undefined);
    this.userIdentity ??= resolveWorkspaceUser(this.user).catch((error: unknown) => {
      this.userIdentity = undefined;
      throw error;
    });
    return this.userIdentity;
  }

  /**
   * Spawns the command in `dir`, registers the instance with `committed` as its base once the process exists, and
   * records it in the state directory before it is reported started.
   */
  private async launch(
    request: StartRequest<WorkspaceRuntimeSpec>,
    dir: string,
    logPath: string,
    user: UserIdentity | undefined,
    committed?: CommittedIndex,
  ): Promise<WorkspaceInstance> {
    const instance = await this.spawnInstance(request, dir, logPath, user, committed);
    try {
      await instance.recorded;
    } catch (error) {
      // Unrecorded, it would outlive a crash of the worker unseen: rather no instance at all.
      signalRunning(instance, 'SIGKILL');
      await instance.exited;
      this.instances.delete(instance.instanceId);
      throw error;
    }
    return instance;
  }

  private async spawnInstance(
    request: StartRequest<WorkspaceRuntimeSpec>,
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
        env: workspaceEnvironment(process.env, this.envAllow, request.spec.env, user),
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
          // The write must land before the removal. A record left behind names a process that is gone: harmless.
          await instance.recorded?.catch(() => undefined);
          await removeInstanceRecord(this.stateDir, instance.instanceId).catch(() => undefined);
          return instance.exit;
        }),
      };
      // Registered at once, so that `killAll` reaches it from here on.
      this.instances.set(request.instanceId, instance);
      if (identity) {
        const { sessionId, instanceId } = request;
        const { startTime, bootId } = identity;
        instance.recorded = writeInstanceRecord(this.stateDir, {
          instanceId,
          sessionId,
          dir,
          pid,
          pgid: pid,
          startTime,
          bootId,
        });
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

  private async terminate(instance: WorkspaceInstance, graceMs: number): Promise<ExitInfo> {
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
  private async freeze(instance: WorkspaceInstance): Promise<() => void> {
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
}

function isSafeId(id: string): boolean {
  return SAFE_ID.test(id) && !id.includes('..');
}

function assertSafeId(what: string, id: string): void {
  if (!isSafeId(id)) throw new RuntimeFailedError(`${what} ${JSON.stringify(id)} is not path-safe`);
}

/**
 * Signals the instance's whole process group (negative pid) while its leader runs. After the leader has exited
 * its pid, and so the group id, may be reused by an unrelated process, so nothing is sent any more.
 */
function signalRunning(instance: WorkspaceInstance, signal: NodeJS.Signals): void {
  if (!instance.exit) signalGroup(instance.pid, signal);
}

/** What a failed spawn says: plainly for the common causes, with the system's words otherwise. */
function spawnFailureMessage(program: string, command: readonly string[], error: unknown): string {
  if (isErrnoException(error) && error.code === 'ENOENT') return `command not found: ${program}`;
  if (isErrnoException(error) && error.code === 'EACCES') return `permission denied: ${program} cannot be run`;
  return `cannot run command ${JSON.stringify(command)}: ${toError(error).message}`;
}

/** A catch for a step of `createWorkspace`: the session directory vanished under it, try again (a few times). */
function retryOnMissing(attempt: number): (error: unknown) => void {
  return (error) => {
    if (!isErrnoException(error) || error.code !== 'ENOENT' || attempt >= 5) throw error;
  };
}

/**
 * Gives the workspace and the paths below it (relative, '/'-separated) to `user`. Symlinks themselves, not their
 * targets: a link a restore made points inside the workspace, but its owner is still the link's own.
 */
async function handOver(dir: string, paths: readonly string[], user: UserIdentity): Promise<void> {
  await fsp.chown(dir, user.uid, user.gid);
  let next = 0;
  const worker = async (): Promise<void> => {
    for (let i = next++; i < paths.length; i = next++) {
      if (paths[i] === '') continue;
      await fsp.lchown(path.join(dir, ...paths[i]!.split('/')), user.uid, user.gid);
    }
  };
  await Promise.all(Array.from({ length: Math.min(STATS_AHEAD, paths.length) }, worker));
}

function namesOf(paths: readonly RestoredPath[]): string[] {
  return paths.map(({ name }) => name);
}

/** Writes the seed files and returns every path made, directories included, as `handOver` takes them. */
async function writeSeedFiles(dir: string, files: Record<string, string>): Promise<string[]> {
  const made = new Set<string>();
  for (const [name, content] of Object.entries(files)) {
    const segments = name.split('/');
    if (name.startsWith('/') || segments.some((s) => s === '' || s === '..')) {
      throw new RuntimeFailedError(
        `seed file path ${JSON.stringify(name)} must be relative, without ".." or empty segments`,
      );
    }
    const file = path.join(dir, ...segments);
    await fsp.mkdir(path.dirname(file), { recursive: true });
    await fsp.writeFile(file, content);
    for (let i = 1; i <= segments.length; i++) made.add(segments.slice(0, i).join('/'));
  }
  return [...made];
}

/**
 * Removes what a failed start or restore created. A failure to remove must not replace the error the caller
 * needs to see (a restore rejects with the state stream's own error): the directory is then left behind, and
 * a retry with the same instance id fails with RuntimeFailedError rather than reusing it.
 */
async function discardWorkspace(dir: string, logPath: string): Promise<void> {
  await removeWorkspace(dir, logPath).catch(() => {});
  await removeIfEmpty(path.dirname(dir));
}

/** Removes the session directory once its last instance is gone; one still in use stays. */
async function removeIfEmpty(dir: string): Promise<void> {
  await fsp.rmdir(dir).catch(() => {});
}

async function anyExists(...files: string[]): Promise<boolean> {
  const found = await Promise.all(
    files.map((file) =>
      fsp.lstat(file).then(
        () => true,
        () => false,
      ),
    ),
  );
  return found.includes(true);
}

async function removeWorkspace(dir: string, logPath: string): Promise<void> {
  await removeTree(dir);
  await fsp.rm(logPath, { force: true });
}

async function removeTree(dir: string): Promise<void> {
  try {
    await fsp.rm(dir, { recursive: true, force: true });
  } catch (error) {
    // Directories the command (or the archive) made read-only cannot be emptied until made writable again.
    if (!isErrnoException(error) || (error.code !== 'EACCES' && error.code !== 'EPERM')) throw error;
    await makeDirectoriesWritable(dir);
    await fsp.rm(dir, { recursive: true, force: true });
  }
}

/** The size of the regular files under `dir`, as far as they can be read: what removing it frees, about. */
async function treeBytes(dir: string): Promise<number> {
  const entries = await fsp.readdir(dir, { recursive: true, withFileTypes: true }).catch(() => []);
  const files = entries.filter((entry) => entry.isFile()).map((entry) => path.join(entry.parentPath, entry.name));
  let bytes = 0;
  let next = 0;
  const worker = async (): Promise<void> => {
    for (let i = next++; i < files.length; i = next++) {
      bytes += await fsp.lstat(files[i]!).then(
        (stats) => stats.size,
        () => 0,
      );
    }
  };
  await Promise.all(Array.from({ length: Math.min(STATS_AHEAD, files.length) }, worker));
  return bytes;
}

async function makeDirectoriesWritable(dir: string): Promise<void> {
  await fsp.chmod(dir, 0o700);
  for (const entry of await fsp.readdir(dir, { withFileTypes: true })) {
    if (entry.isDirectory()) await makeDirectoriesWritable(path.join(dir, entry.name));
  }
}

/**
 * Whether a symlink at `linkPath` (relative to the workspace) pointing at `target` resolves inside the
 * workspace, judged lexically. Capture and restore apply the same rule, so every capture can be restored.
 */
function symlinkStaysInside(linkPath: string, target: string): boolean {
  if (path.posix.isAbsolute(target)) return false;
  const resolved = path.posix.normalize(path.posix.join(path.posix.dirname(linkPath), target));
  return resolved !== '..' && !resolved.startsWith('../');
}

/**
 * File reads while capturing: 1 MiB, not the default 64 KiB. Each piece crosses a Readable and the chunker, which
 * both cost per piece (`npm run bench:sessions` prints the capture path alone: "capture → store.write"). Smaller
 * pieces (headers, small files, padding) are gathered up to the same size for the same reason.
 */
const READ_BYTES = 1024 * 1024;
/** Bytes gathered before a file write while restoring (see writeEntry). */
const WRITE_BYTES = 1024 * 1024;
/** Records in one unchanged run at most (see capturePieces). */
const RUN_MAX_RECORDS = 4096;
/** lstat calls the walk keeps in flight in each directory. */
const STATS_AHEAD = 32;
/** The index key of the archive's trailer: no entry has an empty path. */
const END_OF_ARCHIVE = '';
/** The most pax text one record may hold for restore to index the stream: more than any path a capture writes. */
const MAX_PAX_BYTES = 1024 * 1024;
/** How long restore waits at most for the file system's clock to move past the last restored file's ctime. */
const CLOCK_WAIT_MS = 100;

/** What a capture that may be stored does besides producing bytes. */
interface Indexing {
  /** The file system's clock once the group was frozen (null if unknown): see `capturePieces`. */
  readonly clockNs: bigint | null;
  /** Makes the capture's index the instance's base; called by `stored`. */
  commit(index: CommittedIndex): void;
}

/**
 * A capture of `root` as a state source. `thaw` runs when the pieces end or fail, and on `close` (it does nothing
 * the second time). Without `indexing` (plain `capture`) no index is built and the capture cannot be stored.
 */
function openCapture(
  root: string,
  thaw: () => void,
  base: CommittedIndex | undefined,
  indexing: Indexing | undefined,
): CapturedState {
  const pending = indexing && new Map<string, IndexedRecord>();
  let complete = false;
  async function* pieces(): AsyncGenerator<Uint8Array | UnchangedRange> {
    try {
      yield* capturePieces(root, base?.records, pending, indexing?.clockNs ?? null);
      complete = true;
    } finally {
      thaw();
    }
  }
  const generator = pieces();
  return {
    base: base?.checkpointId ?? null,
    pieces: generator,
    close: () => {
      thaw();
      // Closes a file left open mid-read; a generator that never started just ends.
      generator.return(undefined).catch(() => undefined);
    },
    stored: (checkpointId) => {
      if (!indexing || !pending || !complete) {
        throw new Error('only a captureState whose pieces were all produced can be stored');
      }
      indexing.commit({ checkpointId, records: pending });
    },
  };
}

/** A record of the stream being captured: a tree entry, or the trailer (no entry). */
interface CaptureRecord {
  readonly entry: TarEntry | undefined;
  readonly headerLength: number;
  readonly file: FileContent | undefined;
}

/** Where a file record's content comes from, and the stat key the file must keep while it is read. */
interface FileContent {
  readonly absPath: string;
  readonly statKey: string;
}

/**
 * The capture's stream: the tar records of the tree under `root` in walk order, then the trailer. A record is
 * named as unchanged when `base` holds the same path with the same header digest and, for a file, the same stat
 * key; consecutive unchanged records whose base offsets follow on from each other make one range.
 *
 * Each record goes into `pending` at its offset in this stream, except a file whose ctime is not before
 * `clockNs`. Time stamps are only as fine as the file system's clock: a write after the thaw, in the same tick as
 * one before the freeze, would leave the stat key as it is with other content. A file last changed before the
 * clock reading gets a later ctime from any change to come, so its key cannot come back with other content.
 */
async function* capturePieces(
  root: string,
  base: ReadonlyMap<string, IndexedRecord> | undefined,
  pending: Map<string, IndexedRecord> | undefined,
  clockNs: bigint | null,
): AsyncGenerator<Uint8Array | UnchangedRange> {
  const batch = new PieceBatcher();
  let offset = 0;
  let run: UnchangedRun | undefined;

  async function* add(
    key: string,
    header: Buffer,
    record: CaptureRecord,
    indexable: boolean,
  ): AsyncGenerator<Uint8Array | UnchangedRange> {
    const size = record.entry?.size ?? 0;
    const length = tarRecordLength(header.length, size);
    const headerDigest = base || pending ? sha256(header) : '';
    const statKey = record.file?.statKey;
    const known = base?.get(key);
    if (known && known.length === length && known.headerDigest === headerDigest && known.statKey === statKey) {
      // A run is also closed at RUN_MAX_RECORDS, so that a large unchanged tree reaches the store (and its progress)
      // as it is walked, not all at the end, and the records a run keeps stay few. The store re-reads about one chunk
      // where a run ends.
      if (!run || run.baseOffset + run.length !== known.offset || run.count >= RUN_MAX_RECORDS) {
        yield* batch.flush();
        if (run) yield run;
        run = new UnchangedRun(known.offset);
      }
      run.add(record);
    } else {
      if (run) yield run;
      run = undefined;
      yield* batch.add(header);
      if (record.file) yield* readContent(record, 0, size, batch, false);
      yield* batch.add(Buffer.alloc(tarPaddingBytes(size)));
    }
    if (pending && indexable) pending.set(key, { offset, length, headerDigest, statKey });
    offset += length;
  }

  for await (const { entry, absPath, stats } of walkTree(root)) {
    const header = encodeTarHeader(entry);
    if (entry.type === 'file') {
      const file = { absPath, statKey: statKey(stats) };
      const indexable = beforeClock(stats.ctimeNs, clockNs);
      yield* add(entry.name, header, { entry, headerLength: header.length, file }, indexable);
    } else {
      yield* add(entry.name, header, { entry, headerLength: header.length, file: undefined }, true);
    }
  }
  const trailer = tarTrailer();
  yield* add(END_OF_ARCHIVE, trailer, { entry: undefined, headerLength: trailer.length, file: undefined }, true);
  yield* batch.flush();
  if (run) yield run;
}

/**
 * Whether a file changed at `ctimeNs` may be named unchanged later: only if the change came before the fs-clock
 * reading taken after the capture (a write in the same clock tick would leave the stat key as it was). Capture and
 * restore index files by this one rule.
 */
function beforeClock(ctimeNs: bigint, clockNs: bigint | null): boolean {
  return clockNs !== null && ctimeNs < clockNs;
}

/**
 * A run of records that are, byte for byte, a run of the base capture's stream. `read` regenerates any part of it
 * from the tree: headers (encoded again: the encoder is deterministic), file contents, padding.
 */
class UnchangedRun implements UnchangedRange {
  length = 0;
  /** Each record's start within the run, ascending. */
  private readonly starts: number[] = [];
  private readonly records: CaptureRecord[] = [];

  constructor(readonly baseOffset: number) {}

  get count(): number {
    return this.records.length;
  }

  add(record: CaptureRecord): void {
    const size = record.entry?.size ?? 0;
    this.starts.push(this.length);
    this.records.push(record);
    this.length += tarRecordLength(record.headerLength, size);
  }

  async *read(start: number, end: number): AsyncGenerator<Uint8Array> {
    const valid = Number.isSafeInteger(start) && Number.isSafeInteger(end) && start >= 0 && end <= this.length;
    if (!valid || start > end) throw new RangeError(`cannot read [${start}, ${end}) of a run of ${this.length} bytes`);
    const batch = new PieceBatcher();
    for (let i = lastAtOrBefore(this.starts, start); i < this.records.length && this.starts[i]! < end; i++) {
      const record = this.records[i]!;
      const recordStart = this.starts[i]!;
      const size = record.entry?.size ?? 0;
      const contentStart = recordStart + record.headerLength;
      const paddingStart = contentStart + size;
      // The part of this record to read: [from, to).
      const from = Math.max(start, recordStart);
      const to = Math.min(end, paddingStart + tarPaddingBytes(size));
      if (from < contentStart) {
        const header = record.entry ? encodeTarHeader(record.entry) : tarTrailer();
        yield* batch.add(header.subarray(from - recordStart, Math.min(to, contentStart) - recordStart));
      }
      if (record.file && from < paddingStart && to > contentStart) {
        const contentFrom = Math.max(from, contentStart) - contentStart;
        yield* readContent(record, contentFrom, Math.min(to, paddingStart) - contentStart, batch, true);
      }
      if (to > paddingStart) yield* batch.add(Buffer.alloc(to - Math.max(from, paddingStart)));
    }
    yield* batch.flush();
  }
}

/** The index of the last element of the ascending `values` that is at most `value` (`values[0]` is 0). */
function lastAtOrBefore(values: readonly number[], value: number): number {
  let low = 0;
  let high = values.length - 1;
  while (low < high) {
    const middle = Math.ceil((low + high) / 2);
    if (values[middle]! <= value) low = middle;
    else high = middle - 1;
  }
  return low;
}

/**
 * Bytes `[start, end)` of a file record's content, through `batch`, in pieces of at most READ_BYTES. A file that
 * is shorter than that fails the capture rather than producing a corrupt archive. With `checkKey` (reading an
 * unchanged run, which claims the base's bytes) any change since the walk fails it too.
 */
async function* readContent(
  record: CaptureRecord,
  start: number,
  end: number,
  batch: PieceBatcher,
  checkKey: boolean,
): AsyncGenerator<Uint8Array> {
  const { entry, file } = record;
  if (!entry || !file) throw new Error('a record without a file has no content');
  // O_NOFOLLOW: the walk saw a regular file; whatever replaced it with a symlink is not read through.
  const handle = await fsp.open(file.absPath, fsConstants.O_RDONLY | fsConstants.O_NOFOLLOW);
  try {
    if (checkKey && statKey(await handle.stat({ bigint: true })) !== file.statKey) {
      throw new Error(`${entry.name} changed during capture`);
    }
    for (let position = start; position < end;) {
      const buffer = Buffer.allocUnsafe(Math.min(READ_BYTES, end - position));
      for (let filled = 0; filled < buffer.length;) {
        const { bytesRead } = await handle.read(buffer, filled, buffer.length - filled, position + filled);
        if (bytesRead === 0) throw new Error(`${entry.name} changed size during capture`);
        filled += bytesRead;
      }
      position += buffer.length;
      yield* batch.add(buffer);
    }
  } finally {
    await handle.close();
  }
}

/**
 * Gathers small pieces into pieces of about READ_BYTES; a piece that large passes through uncopied. Order is kept:
 * `flush` before anything else is yielded alongside.
 */
class PieceBatcher {
  private pieces: Uint8Array[] = [];
  private bytes = 0;

  *add(piece: Uint8Array): Generator<Uint8Array> {
    if (piece.length === 0) return;
    if (piece.length >= READ_BYTES) {
      yield* this.flush();
      yield piece;
      return;
    }
    this.pieces.push(piece);
    this.bytes += piece.length;
    if (this.bytes >= READ_BYTES) yield* this.flush();
  }

  *flush(): Generator<Uint8Array> {
    if (this.bytes === 0) return;
    const pieces = this.pieces;
    const bytes = this.bytes;
    this.pieces = [];
    this.bytes = 0;
    yield pieces.length === 1 ? pieces[0]! : Buffer.concat(pieces, bytes);
  }
}

/** A tree entry as the walk meets it. */
interface WalkedEntry {
  readonly entry: TarEntry;
  readonly absPath: string;
  readonly stats: BigIntStats;
}

/**
 * The tree under `root`: directories, regular files and symlinks, in sorted order so the same tree always gives
 * the same bytes. Sockets, fifos and devices hold no state a restore could bring back and are left out.
 */
async function* walkTree(root: string, relDir = ''): AsyncGenerator<WalkedEntry> {
  const names = (await fsp.readdir(path.join(root, relDir))).sort();
  // Several lstat calls in flight, not one at a time: the walk is most of what an unchanged capture costs.
  const ahead: Array<Promise<BigIntStats>> = [];
  const statAhead = (index: number): void => {
    const name = names[index];
    if (name === undefined) return;
    const stats = fsp.lstat(path.join(root, relDir, name), { bigint: true });
    stats.catch(() => undefined); // awaited below, unless the walk fails first: never an unhandled rejection
    ahead.push(stats);
  };
  for (let i = 0; i < STATS_AHEAD; i++) statAhead(i);
  for (let i = 0; i < names.length; i++) {
    statAhead(i + STATS_AHEAD);
    const name = names[i]!;
    const relPath = relDir === '' ? name : `${relDir}/${name}`;
    const absPath = path.join(root, relPath);
    const stats = await ahead.shift()!;
    let target: string | undefined;
    if (stats.isSymbolicLink()) {
      target = await fsp.readlink(absPath);
      if (!symlinkStaysInside(relPath, target)) {
        throw new RuntimeFailedError(
          `symlink ${relPath} points outside the workspace (${target}); it cannot be restored`,
        );
      }
    }
    const entry = tarEntryOf(relPath, stats, target);
    if (!entry) continue;
    yield { entry, absPath, stats };
    if (entry.type === 'directory') yield* walkTree(root, relPath);
  }
}

/**
 * The entry a capture writes for the path `name` with these stats (and, for a symlink, its target), or undefined for
 * a path a capture leaves out. Restore judges its index by the same function, so the two cannot drift apart.
 */
function tarEntryOf(name: string, stats: BigIntStats, linkname: string | undefined): TarEntry | undefined {
  const common = { name, mode: Number(stats.mode & 0o7777n), mtime: floorSeconds(stats.mtimeNs) };
  if (stats.isDirectory()) return { ...common, type: 'directory', size: 0 };
  if (stats.isFile()) return { ...common, type: 'file', size: Number(stats.size) };
  if (stats.isSymbolicLink() && linkname !== undefined) return { ...common, type: 'symlink', size: 0, linkname };
  return undefined;
}

/** Seconds since the epoch, rounded down: what tar-stream wrote for a Date (`Math.floor(ms / 1000)`). */
function floorSeconds(ns: bigint): number {
  const seconds = ns / 1_000_000_000n; // rounds towards zero
  return Number(ns < 0n && seconds * 1_000_000_000n !== ns ? seconds - 1n : seconds);
}

/**
 * What says a file's content is as it was: any write changes its size, mtime or ctime, and a file put in its place
 * has another inode. ctime catches a rewrite whose mtime was set back.
 */
function statKey(stats: BigIntStats): string {
  return `${stats.size}:${stats.mtimeNs}:${stats.ctimeNs}:${stats.ino}:${stats.dev}`;
}

function sha256(bytes: Uint8Array): string {
  return createHash('sha256').update(bytes).digest('base64');
}

/**
 * The file system's current time as it stamps changes: the ctime of a file created in `dir` (beside the
 * workspace, on the same file system, so a server's clock is the one read), or null if none can be created.
 * Creating files there is harmless: names starting with '.' are never instance ids.
 */
async function fileSystemNow(dir: string): Promise<bigint | null> {
  const file = path.join(dir, `.clock-${randomUUID()}`);
  try {
    const handle = await fsp.open(file, 'wx');
    try {
      return (await handle.stat({ bigint: true })).ctimeNs;
    } finally {
      await handle.close();
      await fsp.rm(file, { force: true });
    }
  } catch {
    return null;
  }
}

/**
 * Extracts a tar stream produced by `capture` into the empty directory `root`, and resolves with the paths written,
 * in archive order. Resolves only after `state` has ended; if `state` fails, rejects with its error object unchanged
 * (it says why, e.g. a digest mismatch). `layout`, if given, is shown every byte the extractor is.
 */
async function extractArchive(state: Readable, root: string, layout?: TarLayoutReader): Promise<RestoredPath[]> {
  // The iterator in `feed` reports the state's errors while it reads; an error that arrives after it stopped
  // (the extractor failed first) must not become an unhandled 'error' event that takes the worker down.
  state.on('error', () => undefined);
  const extract = tarExtract();
  let stateFailure: { error: unknown } | undefined;
  let abandoned = false;
  const feeding = feed(state, extract, layout).catch((error: unknown) => {
    if (abandoned) return; // the error of our own `state.destroy()` below
    stateFailure = { error };
    extract.destroy(toError(error));
  });
  let restored: RestoredPath[];
  try {
    restored = await extractEntries(extract, root);
  } catch (error) {
    // A failing state stream is the root cause of whatever the extractor then reported.
    if (stateFailure) throw stateFailure.error;
    // Stop reading the state at once, even if its source has stalled.
    abandoned = true;
    state.destroy();
    extract.destroy();
    await feeding;
    throw error;
  }
  await feeding;
  // Unreachable while the extractor only finishes after `end()`, but accepting failed state would be the worst
  // outcome, so check rather than assume.
  if (stateFailure) throw stateFailure.error;
  return restored;
}

/** Writes `source` into `sink` with backpressure, and shows it to `layout`; returns early if the sink is destroyed. */
async function feed(source: Readable, sink: Extract, layout: TarLayoutReader | undefined): Promise<void> {
  for await (const chunk of source) {
    if (sink.destroying) return;
    layout?.push(chunk);
    if (!sink.write(chunk)) await drainedOrClosed(sink);
  }
  sink.end(null);
}

/** The events of a tar-stream (streamx) writable that `drainedOrClosed` waits for. */
interface DrainEvents {
  once(event: 'drain' | 'close', listener: () => void): unknown;
  off(event: 'drain' | 'close', listener: () => void): unknown;
}

/** Waits until a full writable takes more data, or is destroyed (then 'drain' would never come). */
function drainedOrClosed(stream: DrainEvents): Promise<void> {
  return new Promise((resolve) => {
    const done = (): void => {
      stream.off('drain', done);
      stream.off('close', done);
      resolve();
    };
    stream.once('drain', done);
    stream.once('close', done);
  });
}

/**
 * Writes each entry under `root`. Path traversal is defeated in two steps: names that are absolute or contain
 * ".." are rejected, and symlinks are created only after every file and directory, so no write can ever go
 * through a link the archive planted (e.g. `link -> /etc` followed by `link/passwd`).
 */
async function extractEntries(extract: Extract, root: string): Promise<RestoredPath[]> {
  const restored: RestoredPath[] = [];
  const symlinks: Array<{ file: string; target: string; mtime: Date }> = [];
  const directories: Array<{ dir: string; mode: number; mtime: Date }> = [];
  for await (const entry of extract) {
    const { header } = entry;
    const segments = entrySegments(header.name);
    const file = path.join(root, ...segments);
    switch (header.type) {
      case 'file':
      case 'contiguous-file':
        if (segments.length === 0) throw new ArchiveRejectedError('file entry without a name', header.name);
        await fsp.mkdir(path.dirname(file), { recursive: true });
        await writeEntry(entry, file);
        restored.push({ name: segments.join('/') });
        break;
      case 'directory':
        // Owner-writable until every entry is in; the archived mode and mtime are applied at the end.
        entry.resume();
        await fsp.mkdir(file, { recursive: true, mode: 0o700 });
        if (segments.length > 0) directories.push({ dir: file, mode: header.mode & 0o777, mtime: header.mtime });
        restored.push({ name: segments.join('/') });
        break;
      case 'symlink': {
        // tar-stream reports an empty link name as null, whatever its types say.
        const target = header.linkname ?? '';
        if (segments.length === 0 || target === '' || !symlinkStaysInside(segments.join('/'), target)) {
          throw new ArchiveRejectedError(`symlink ${header.name} points outside the workspace`, header.name);
        }
        entry.resume();
        symlinks.push({ file, target, mtime: header.mtime });
        restored.push({ name: segments.join('/'), linkname: target });
        break;
      }
      default:
        throw new ArchiveRejectedError(`entry ${header.name} has unsupported type ${header.type}`, header.name);
    }
  }
  for (const { file, target, mtime } of symlinks) {
    await fsp.mkdir(path.dirname(file), { recursive: true });
    await fsp.symlink(target, file);
    await fsp.lutimes(file, mtime, mtime);
  }
  // Deepest first, so a read-only directory is sealed, and its mtime set, only after its contents.
  for (const { dir, mode, mtime } of directories.reverse()) {
    await fsp.chmod(dir, mode);
    await fsp.utimes(dir, mtime, mtime);
  }
  return restored;
}

/** The path segments of an archive entry name; `[]` is the workspace itself. */
function entrySegments(name: string): string[] {
  if (name.startsWith('/')) throw new ArchiveRejectedError(`entry ${name} has an absolute path`, name);
  const segments = name.split('/').filter((s) => s !== '' && s !== '.');
  if (segments.includes('..')) throw new ArchiveRejectedError(`entry ${name} contains ".."`, name);
  return segments;
}

async function writeEntry(entry: AsyncIterable<unknown> & { header: Header }, file: string): Promise<void> {
  // O_NOFOLLOW: defence in depth; no symlink exists yet while files are written.
  const flags = fsConstants.O_WRONLY | fsConstants.O_CREAT | fsConstants.O_TRUNC | fsConstants.O_NOFOLLOW;
  const handle = await fsp.open(file, flags, 0o600);
  try {
    // Pieces arrive as the archive stream cut them (tens of KiB): written a MiB at a time, not one write each.
    let pending: Buffer[] = [];
    let pendingBytes = 0;
    const flush = async (): Promise<void> => {
      const batch = pending;
      pending = [];
      pendingBytes = 0;
      await writevAll(handle, batch);
    };
    for await (const chunk of entry) {
      const data = chunk as Buffer;
      pending.push(data);
      pendingBytes += data.length;
      if (pendingBytes >= WRITE_BYTES) await flush();
    }
    await flush();
    await handle.chmod(entry.header.mode & 0o777);
    await handle.utimes(entry.header.mtime, entry.header.mtime);
  } finally {
    await handle.close();
  }
}

/** A path restore wrote, as a capture names it ('' for the workspace itself, which a capture never writes). */
interface RestoredPath {
  readonly name: string;
  /** A symlink's target, as created. */
  readonly linkname?: string;
}

/** One entry's record in a state stream. */
interface LaidOutRecord {
  readonly offset: number;
  /** The length and sha256 of everything before the content: the pax record, if any, and the ustar header. */
  readonly headerLength: number;
  readonly headerDigest: string;
  /** Content bytes, before padding. */
  readonly size: number;
}

/** A whole archive: its entry records in stream order, then two zero blocks that end the stream. */
interface TarLayout {
  readonly records: readonly LaidOutRecord[];
  readonly trailerOffset: number;
}

/**
 * Follows the record layout of a state stream as restore feeds it to the extractor: where each entry's record
 * starts, its header bytes, its content size, and where the trailer starts. It knows only the layout `capturePieces`
 * writes (ustar headers, each after at most one pax record; content padded with zeros; exactly two zero blocks at the
 * end) and gives up on anything else, which costs the restored instance its base and nothing more. It never throws;
 * of each record it keeps the digest of the header, as the index does, not the bytes.
 */
class TarLayoutReader {
  private failed = false;
  private phase: 'header' | 'pax' | 'content' | 'padding' | 'trailer' = 'header';
  /** Bytes of the stream seen. */
  private offset = 0;
  /** Bytes the current phase still takes; the trailer takes all that come. */
  private wanted = TAR_BLOCK_BYTES;
  /** The header block or pax text being gathered. */
  private gathered: Buffer[] = [];
  /** The current record's header bytes so far: a pax record waiting for its entry's ustar header. */
  private header: Buffer[] = [];
  private recordStart = 0;
  private size = 0;
  private trailerStart = 0;
  private readonly records: LaidOutRecord[] = [];

  push(chunk: unknown): void {
    if (this.failed) return;
    if (!(chunk instanceof Uint8Array)) return this.fail();
    for (let at = 0; at < chunk.length && !this.failed;) {
      const part = chunk.subarray(at, at + Math.min(this.wanted, chunk.length - at));
      at += part.length;
      this.offset += part.length;
      this.wanted -= part.length;
      if (this.phase === 'header' || this.phase === 'pax') this.gathered.push(Buffer.from(part));
      else if ((this.phase === 'padding' || this.phase === 'trailer') && !isAllZero(part)) this.fail();
      while (this.wanted === 0 && !this.failed) this.next();
    }
  }

  /** The layout, or undefined unless every byte was understood and the stream ended with the trailer's last byte. */
  finish(): TarLayout | undefined {
    if (this.failed || this.phase !== 'trailer' || this.offset - this.trailerStart !== TAR_TRAILER_BYTES) {
      return undefined;
    }
    return { records: this.records, trailerOffset: this.trailerStart };
  }

  /** Moves on once the current phase has all its bytes. */
  private next(): void {
    switch (this.phase) {
      case 'header':
        return this.headerBlock(Buffer.concat(this.gathered));
      case 'pax':
        this.header.push(Buffer.concat(this.gathered));
        return this.expect('header', TAR_BLOCK_BYTES);
      case 'content':
        return this.expect('padding', tarPaddingBytes(this.size));
      case 'padding':
        return this.expect('header', TAR_BLOCK_BYTES);
      case 'trailer':
        return this.fail(); // never: the trailer takes all that come
    }
  }

  private headerBlock(block: Buffer): void {
    const start = this.offset - TAR_BLOCK_BYTES;
    if (isAllZero(block)) {
      // The end of the archive, unless a pax record is still waiting for its entry. The extractor skips zero blocks
      // and reads on, so anything but zeros from here on fails the layout.
      if (this.header.length > 0) return this.fail();
      this.trailerStart = start;
      return this.expect('trailer', Infinity);
    }
    const layout = readTarHeaderLayout(block);
    if (!layout) return this.fail();
    if (this.header.length === 0) this.recordStart = start;
    this.header.push(block);
    if (layout.pax) {
      // One pax record per entry, as `encodeTarHeader` writes; its text and padding belong to the entry's header.
      if (this.header.length > 1 || layout.size > MAX_PAX_BYTES) return this.fail();
      return this.expect('pax', layout.size + tarPaddingBytes(layout.size));
    }
    const header = Buffer.concat(this.header);
    const { recordStart: offset } = this;
    this.records.push({ offset, headerLength: header.length, headerDigest: sha256(header), size: layout.size });
    this.header = [];
    this.size = layout.size;
    this.expect('content', layout.size);
  }

  private expect(phase: TarLayoutReader['phase'], bytes: number): void {
    this.phase = phase;
    this.wanted = bytes;
    this.gathered = [];
  }

  private fail(): void {
    this.failed = true;
    this.gathered = [];
    this.header = [];
  }
}

function isAllZero(bytes: Uint8Array): boolean {
  for (const byte of bytes) if (byte !== 0) return false;
  return true;
}

/**
 * The committed index of the tree restore extracted into `root` from checkpoint `checkpointId`, whose stream had
 * `layout` (undefined: not one a capture writes), or undefined when it cannot be exact. Each entry record must hold,
 * byte for byte, the header a capture of the restored path would encode now, in the same order; then the records lie
 * where a capture of the unchanged tree puts them, and the content of each file is the bytes the stream held there.
 * One record that does not (a stream from another encoder, a header field this encoder never writes) drops the whole
 * index: the next capture then reads everything.
 *
 * Directories and symlinks are indexed by their header bytes; a file also by its stat key, under `capturePieces`'
 * clock rule: the clock is read once every file is written and before the command runs, and a file whose ctime is
 * not before that reading is left out.
 */
async function indexRestoredTree(
  root: string,
  checkpointId: string,
  layout: TarLayout | undefined,
  restored: readonly RestoredPath[],
): Promise<CommittedIndex | undefined> {
  if (!layout || layout.records.length !== restored.length) return undefined;
  const stats = await lstatAll(root, restored);
  const indexed: Array<{ name: string; record: IndexedRecord; ctimeNs: bigint | undefined }> = [];
  const names = new Set<string>();
  // Two names for one file (a case-insensitive file system, say) would leave one name's record with the other's bytes.
  const files = new Set<string>();
  let offset = 0;
  for (const [i, { name, linkname }] of restored.entries()) {
    const laid = layout.records[i]!;
    const stat = stats[i];
    const entry = name !== '' && stat ? tarEntryOf(name, stat, linkname) : undefined;
    if (!entry || !stat || names.has(name) || laid.offset !== offset || laid.size !== entry.size) return undefined;
    const header = encodedOrNull(entry);
    if (header?.length !== laid.headerLength || sha256(header) !== laid.headerDigest) return undefined;
    names.add(name);
    const isFile = entry.type === 'file';
    if (isFile) {
      const inode = `${stat.dev}:${stat.ino}`;
      if (files.has(inode)) return undefined;
      files.add(inode);
    }
    const length = tarRecordLength(laid.headerLength, laid.size);
    const record = { offset, length, headerDigest: laid.headerDigest, statKey: isFile ? statKey(stat) : undefined };
    indexed.push({ name, record, ctimeNs: isFile ? stat.ctimeNs : undefined });
    offset += length;
  }
  if (layout.trailerOffset !== offset) return undefined;

  const ctimes = indexed.flatMap(({ ctimeNs }) => (ctimeNs === undefined ? [] : [ctimeNs]));
  const latestNs = ctimes.reduce((latest, ctime) => (ctime > latest ? ctime : latest), -1n);
  const clockNs = ctimes.length === 0 ? null : await clockAfter(path.dirname(root), latestNs);
  const records = new Map<string, IndexedRecord>();
  for (const { name, record, ctimeNs } of indexed) {
    if (ctimeNs === undefined || beforeClock(ctimeNs, clockNs)) records.set(name, record);
  }
  const trailer = tarTrailer();
  records.set(END_OF_ARCHIVE, { offset, length: trailer.length, headerDigest: sha256(trailer) });
  return { checkpointId, records };
}

/** The lstat of each restored path, several in flight; undefined for one that cannot be read. */
async function lstatAll(root: string, paths: readonly RestoredPath[]): Promise<Array<BigIntStats | undefined>> {
  const stats = new Array<BigIntStats | undefined>(paths.length);
  let next = 0;
  const worker = async (): Promise<void> => {
    for (let i = next++; i < paths.length; i = next++) {
      const file = path.join(root, ...paths[i]!.name.split('/'));
      stats[i] = await fsp.lstat(file, { bigint: true }).catch(() => undefined);
    }
  };
  await Promise.all(Array.from({ length: Math.min(STATS_AHEAD, paths.length) }, worker));
  return stats;
}

/** `encodeTarHeader(entry)`, or null for an entry it refuses (which no capture writes either). */
function encodedOrNull(entry: TarEntry): Buffer | null {
  try {
    return encodeTarHeader(entry);
  } catch (error) {
    if (error instanceof RangeError) return null;
    throw error;
  }
}

/**
 * The file system's clock (see `fileSystemNow`) once it has moved past `latestNs`, or the last reading when it has not
 * within CLOCK_WAIT_MS. Usually a tick or two: restored files are then all before the reading, so all indexable.
 */
async function clockAfter(dir: string, latestNs: bigint): Promise<bigint | null> {
  const deadline = Date.now() + CLOCK_WAIT_MS;
  for (;;) {
    const now = await fileSystemNow(dir);
    if (now === null || now > latestNs || Date.now() >= deadline) return now;
    await delay(1);
  }
}

/** Resolves or rejects with `promise`, or rejects with an AbortError when `signal` aborts first. */
function raceAbort<T>(promise: Promise<T>, signal?: AbortSignal): Promise<T> {
  if (!signal) return promise;
  return new Promise((resolve, reject) => {
    const onAbort = (): void => reject(new DOMException('waiting for the runtime instance was aborted', 'AbortError'));
    if (signal.aborted) return onAbort();
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
  });
}

function toError(error: unknown): Error {
  return types.isNativeError(error) || error instanceof Error ? error : new Error(String(error));
}
