import * as fs from 'node:fs';
import * as path from 'node:path';
import type { Readable } from 'node:stream';
import type { WorkspaceRuntimeSpec } from '../../domain/schemas';
import { sourceStream } from '../../snapshots';
import type {
  CapturedState,
  ExitInfo,
  RestoreRequest,
  RuntimeInstanceInfo,
  SessionRuntime,
  StartRequest,
} from '../session-runtime';
import { raceAbort } from '../race-abort';
import {
  adoptForRestore,
  adoptLive,
  RuntimeBusyError,
  RuntimeExitedError,
  RuntimeFailedError,
  RuntimeNotFoundError,
  type FenceTarget,
  type ForkOrigin,
} from '../session-runtime';
import { DEFAULT_FAILED_RETENTION_MS, type RuntimeExitDetails } from '../../domain/records';
import { TarLayoutReader } from '../tar';
import { openCapture, openPrecopyCapture, type Hold } from './capture';
import { checkEnvAllow, checkSpecEnv, DEFAULT_WORKSPACE_ENV_ALLOW } from './env';
import { listInstanceRecords } from './instance-records';
import { Leftovers, markFailed, type HostRecovery } from './leftovers';
import { freeze, signalRunning, spawnInstance, terminate, type WorkspaceInstance } from './process-group';
import { killGroup } from './process-table';
import { extractArchive, indexRestoredTree, type RestoredPath } from './restore';
import { lockStateDir } from './state-lock';
import { fileSystemNow, fileSystemNowSync, type CommittedIndex } from './tree-index';
import { resolveWorkspaceUser, type UserIdentity, type WorkspaceUser } from './user';
import {
  assertSafeId,
  discardWorkspace,
  handOver,
  isSafeId,
  makeWorkspaceDir,
  removeIfEmpty,
  removeWorkspace,
  writeSeedFiles,
} from './workspace-dir';

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
  /**
   * How long `start` waits for the command to stay alive before it answers, when the spec does not say (default 0: it
   * answers once the command runs; the worker passes DS_START_SETTLE_MS).
   * A command that exits with a failure within it fails the start.
   */
  startSettleMs?: number;
  /**
   * How long the directory and log of an instance whose command failed stay on the host (default
   * {@link DEFAULT_FAILED_RETENTION_MS}); `recoverHost` removes them after that.
   */
  failedRetentionMs?: number;
  /**
   * Whether `captureState` copies the tree while the command runs and freezes it only for what changed since (default
   * true); false freezes it for the whole capture, as `capture` does.
   */
  precopy?: boolean;
}

/** Lines of a failed command's output its failure carries. */
const OUTPUT_TAIL_LINES = 20;

const VERSION = '1';

/**
 * A working directory with a command running in it, on this host. The command leads its own process group, so
 * `stop` and the freeze around `capture` reach everything it started. State is the directory, as a tar stream.
 */
export class WorkspaceRuntime implements SessionRuntime<WorkspaceRuntimeSpec> {
  readonly kind = 'workspace';
  readonly version = VERSION;
  readonly placement = 'host';
  /** The host's self-fence freezes, thaws and kills these instances' process groups. */
  readonly fenceTarget: FenceTarget = this;

  private readonly rootDir: string;
  private readonly stateDir: string;
  private readonly log: (message: string) => void;
  private readonly defaultStopGraceMs: number;
  private readonly envAllow: readonly string[];
  private readonly user: WorkspaceUser | undefined;
  private readonly startSettleMs: number;
  private readonly failedRetentionMs: number;
  private readonly precopy: boolean;
  /** The retention of each instance whose command failed, once its directory is marked as kept. */
  private readonly kept = new WeakMap<WorkspaceInstance, Promise<string>>();
  /** The user's ids, looked up once; a failed look-up is tried again by the next start. */
  private userIdentity?: Promise<UserIdentity>;
  private readonly instances = new Map<string, WorkspaceInstance>();
  /** The directory of each start or restore in flight, by instance id, from its checks until it has settled. */
  private readonly creating = new Map<string, string>();
  private readonly leftovers: Leftovers;

  /** Throws {@link WorkspaceRootLockedError} when another live runtime holds the state directory. */
  constructor(options: WorkspaceRuntimeOptions) {
    this.rootDir = path.resolve(options.rootDir);
    this.stateDir = path.resolve(options.stateDir ?? path.join(this.rootDir, '.run'));
    this.log = options.log ?? ((message) => console.log(message));
    this.defaultStopGraceMs = options.defaultStopGraceMs ?? 10_000;
    this.envAllow = options.envAllow ?? DEFAULT_WORKSPACE_ENV_ALLOW;
    checkEnvAllow(this.envAllow);
    this.user = options.user;
    this.startSettleMs = options.startSettleMs ?? 0;
    this.failedRetentionMs = options.failedRetentionMs ?? DEFAULT_FAILED_RETENTION_MS;
    this.precopy = options.precopy ?? true;
    this.leftovers = new Leftovers(this.rootDir, this.stateDir, this.log);
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
      if ((await this.leftovers.fence(found)) === 'killed') killed++;
    }
    killed += await this.leftovers.fenceUnrecorded(this.ownedDirs());
    const { removedDirs, bytes, keptFailed } = await this.leftovers.removeUnowned(this.ownedDirs());
    this.log(
      `workspace recovery: killed ${killed} process group(s) left running, ` +
        `removed ${removedDirs} abandoned workspace(s) (${bytes} bytes) under ${this.rootDir}` +
        (keptFailed > 0 ? `, kept ${keptFailed} of failed commands (until their retention ends)` : ''),
    );
    return { killed, removedDirs, bytes, keptFailed };
  }

  canRestore(version: string): boolean {
    return version === VERSION;
  }

  /**
   * Starts the command in a fresh directory and answers once it has stayed alive through its settle window
   * (`spec.settleMs`, else the runtime's `startSettleMs`). A command that exits with a failure within it fails the start
   * with {@link RuntimeExitedError}: its exit code, last lines of output, and its directory and log, which are kept
   * for the failed retention. One that exits with 0 has simply done its work: the start answers, not running.
   * An instance id that is not live here but has a directory on disk (an attempt that crashed, in this process or
   * before it restarted) is started afresh: what that attempt left goes.
   */
  async start(request: StartRequest<WorkspaceRuntimeSpec>): Promise<RuntimeInstanceInfo> {
    const adopted = this.adopt(request);
    if (adopted) return adopted;
    const { dir, logPath, user } = await this.createWorkspace(request);
    let instance: WorkspaceInstance;
    try {
      const seeded = await writeSeedFiles(dir, request.spec.files ?? {});
      if (user) await handOver(dir, seeded, user);
      instance = await this.launch(request, dir, logPath, user);
    } catch (error) {
      await discardWorkspace(dir, logPath);
      throw error;
    } finally {
      this.creating.delete(request.instanceId);
    }
    await this.settle(instance, request.spec.settleMs ?? this.startSettleMs);
    return this.info(instance);
  }

  /** Waits out the settle window; a failure within it is the start's, and the instance is no longer live here. */
  private async settle(instance: WorkspaceInstance, settleMs: number): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const window = new Promise<undefined>((resolve) => (timer = setTimeout(() => resolve(undefined), settleMs)));
    const exit = await Promise.race([instance.exited, window]).finally(() => clearTimeout(timer));
    if (!exit || exit.requested || !failedExit(exit)) return;
    const keptUntil = await this.keepFailed(instance);
    this.instances.delete(instance.instanceId);
    const outputTail = await tailOf(instance.logPath, OUTPUT_TAIL_LINES);
    const how = exit.signal ? `was killed by ${exit.signal}` : `exited with code ${exit.exitCode}`;
    const last = outputTail.length > 0 ? `; its last output: ${outputTail[outputTail.length - 1]}` : '';
    throw new RuntimeExitedError(`the command ${how} within ${settleMs} ms of its start${last}`, {
      exitCode: exit.exitCode,
      signal: exit.signal,
      outputTail,
      location: instance.dir,
      output: instance.logPath,
      keptUntil,
    });
  }

  /**
   * Marks the instance's directory and log as those of a failed command, so that `recoverHost` keeps them until the
   * failed retention ends; resolves with that time. Once per instance.
   */
  private keepFailed(instance: WorkspaceInstance): Promise<string> {
    let kept = this.kept.get(instance);
    if (!kept) {
      const keptUntil = new Date(Date.now() + this.failedRetentionMs).toISOString();
      kept = markFailed(instance.dir, { keptUntil, exit: instance.exit }).then(
        () => keptUntil,
        (error: unknown) => {
          this.log(`workspace runtime: could not mark ${instance.dir} as kept: ${String(error)}`);
          return keptUntil;
        },
      );
      this.kept.set(instance, kept);
    }
    return kept;
  }

  /**
   * How the command of a live instance ended, once it ended by itself with a failure: the exit, its last lines of
   * output and where its directory and log are kept (until when). Undefined while it runs, or for an exit asked for.
   */
  async failureOf(instanceId: string): Promise<RuntimeExitDetails | undefined> {
    const instance = this.instances.get(instanceId);
    const exit = instance?.exit;
    if (!instance || !exit || exit.requested || !failedExit(exit)) return undefined;
    return {
      exitCode: exit.exitCode,
      signal: exit.signal,
      outputTail: await tailOf(instance.logPath, OUTPUT_TAIL_LINES),
      location: instance.dir,
      output: instance.logPath,
      keptUntil: await this.keepFailed(instance),
    };
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
    const adopted = adoptForRestore(request, () => this.adopt(request));
    if (adopted) return adopted;
    // The state may fail before extraction reads it (while the directory is made): its error is the restore's then,
    // reported when extraction reads it, and must not be an unhandled 'error' event that takes the worker down.
    request.state.on('error', () => undefined);
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
    const thaw = await this.freezeForCapture(instance);
    // The same bytes as a `captureState` without a base. The stream's 'close' follows 'end', 'error' and
    // `destroy()` alike and closes the source, so the group is resumed whatever the consumer does.
    return sourceStream(openCapture(instance.dir, thaw, undefined, undefined));
  }

  /**
   * `capture`, told as pieces: records byte-identical to a record of the instance's base (the last stored capture,
   * or the checkpoint it was restored from) are named as {@link UnchangedRange}s of it instead of read. Files are
   * judged by their lstat (size, mtime, ctime, inode, device), everything else by its header bytes.
   *
   * With pre-copy (the default) the capture is told twice (see openPrecopyCapture): a draft read while the command
   * runs (`precopy`), then, from the first read of `pieces`, the group frozen and the state named against the draft,
   * so that the freeze lasts about what changed since the draft, not the whole state. Without, the group is frozen
   * before this returns.
   */
  async captureState(instanceId: string): Promise<CapturedState> {
    const instance = this.get(instanceId);
    // Taken before any await: a `stored` that lands meanwhile must not mix one checkpoint's id with another's layout.
    const base = instance.committed;
    const clockDir = path.dirname(instance.dir);
    const commit = (index: CommittedIndex): void => {
      // A disposed or stopped instance keeps no index, whatever captures were still in flight.
      if (this.instances.get(instance.instanceId) === instance && !instance.indexDropped) {
        instance.committed = index;
      }
    };
    const hold = async (): Promise<Hold> => {
      const thaw = await this.freezeForCapture(instance);
      return { thaw, clockNs: fileSystemNowSync(clockDir) };
    };
    if (this.precopy) {
      return openPrecopyCapture(instance.dir, { base, clock: () => fileSystemNow(clockDir), freeze: hold, commit });
    }
    const { thaw, clockNs } = await hold();
    return openCapture(instance.dir, thaw, base, { clockNs, commit });
  }

  /**
   * Freezes the instance's group for a capture (SIGSTOP, until every member has stopped) and returns the thaw that
   * resumes it once no capture holds it any more (calling it again does nothing).
   */
  protected freezeForCapture(instance: WorkspaceInstance): Promise<() => void> {
    return freeze(instance);
  }

  async stop(instanceId: string, options: { graceMs?: number } = {}): Promise<ExitInfo> {
    const instance = this.get(instanceId);
    // Its next state is a restore into a new instance, which indexes the checkpoint it restores for itself.
    instance.committed = undefined;
    instance.indexDropped = true;
    if (instance.exit) return instance.exit;
    // A fenced group may already run again on another host: a grace period would let it run beside that copy.
    if (instance.fence) this.killFenced([instanceId]);
    instance.stopping ??= terminate(instance, options.graceMs ?? instance.stopGraceMs ?? this.defaultStopGraceMs);
    return instance.stopping;
  }

  async waitForExit(instanceId: string, signal?: AbortSignal): Promise<ExitInfo> {
    return raceAbort(this.get(instanceId).exited, signal);
  }

  /**
   * The newest change the instance shows: the modification time of its output log or of any file in its working
   * directory (a walk of the tree, bounded by MAX_ACTIVITY_ENTRIES). Asked only when an idle-pause timer is due.
   */
  async lastActivity(instanceId: string): Promise<string | undefined> {
    const instance = this.get(instanceId);
    const newest = Math.max(await mtimeOf(instance.logPath), await newestMtime(instance.dir));
    return newest > 0 ? new Date(newest).toISOString() : undefined;
  }

  async describe(instanceId: string): Promise<RuntimeInstanceInfo | undefined> {
    const instance = this.instances.get(instanceId);
    return instance && this.info(instance);
  }

  /**
   * The live instance a retried start or restore asks for again: its info when it is the same session's, undefined
   * when the id is not live here. Refuses an id of another session, and one still being made (busy: retry).
   */
  private adopt(request: StartRequest<WorkspaceRuntimeSpec>): RuntimeInstanceInfo | undefined {
    this.refuseWhileCreating(request.instanceId);
    return adoptLive(request, this.instances.get(request.instanceId), (live) => this.info(live));
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

  /**
   * The running instances and when each started: what a host that can no longer renew its lease must freeze in time
   * (docs/design.md §6).
   */
  runningInstances(): { instanceId: string; startedAtMs: number }[] {
    return [...this.instances.values()]
      .filter((i) => !i.exit && !i.killed)
      .map((i) => ({ instanceId: i.instanceId, startedAtMs: Date.parse(i.startedAt) }));
  }

  /**
   * Freezes the groups of the running instances among `instanceIds` (SIGSTOP, held like a capture's freeze) until
   * {@link unfence} or {@link killFenced}: another worker may soon run these sessions. Returns the ids fenced by this call.
   */
  fence(instanceIds: Iterable<string>): string[] {
    const fenced: string[] = [];
    for (const id of instanceIds) {
      const instance = this.instances.get(id);
      if (!instance || instance.exit || instance.killed || instance.fence) continue;
      // The hold's thaw runs exactly once, whenever the freeze settles: a fence lifted before then thaws it then.
      instance.fence = freeze(instance);
      fenced.push(id);
    }
    return fenced;
  }

  /** The ids of the instances fenced and neither resumed nor ended. */
  fencedInstances(): string[] {
    return [...this.instances.values()].filter((i) => i.fence && !i.exit).map((i) => i.instanceId);
  }

  /** Resumes the fenced instances among `instanceIds`: their host still holds their lease. Returns how many. */
  unfence(instanceIds: Iterable<string>): number {
    let resumed = 0;
    for (const id of instanceIds) {
      const instance = this.instances.get(id);
      const hold = instance?.fence;
      if (!instance || !hold) continue;
      instance.fence = undefined;
      void hold.then((thaw) => thaw());
      if (!instance.exit) resumed++;
    }
    return resumed;
  }

  /**
   * Kills the fenced instances among `instanceIds` at once, without a grace period in which they would run again:
   * their sessions may run elsewhere already. Their exits count as stopped by the host. Returns how many.
   */
  killFenced(instanceIds: Iterable<string>): number {
    let killed = 0;
    for (const id of instanceIds) {
      const instance = this.instances.get(id);
      if (!instance?.fence || instance.exit || instance.killed) continue;
      instance.killed = true;
      instance.stopRequested = true;
      killGroup(instance.pid);
      killed++;
    }
    return killed;
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
      await this.leftovers.discard(instanceId, dir);
      return await makeWorkspaceDir(this.rootDir, sessionDir, dir, user);
    } catch (error) {
      this.creating.delete(instanceId);
      throw error;
    }
  }

  /** `dispose` of an id not live here: what is on disk under it, in whichever session. */
  private async disposeLeftover(instanceId: string): Promise<void> {
    if (!isSafeId(instanceId)) return; // nothing can lie under a name no start accepts
    this.refuseWhileCreating(instanceId);
    await this.leftovers.discardEverywhere(instanceId);
  }

  /** The instance directories this runtime owns: those of live instances and of starts in flight. */
  private ownedDirs(): Set<string> {
    return new Set([...[...this.instances.values()].map(({ dir }) => dir), ...this.creating.values()]);
  }

  /** A second start of an id whose first is still in flight would discard the directory the first is filling. */
  private refuseWhileCreating(instanceId: string): void {
    if (this.creating.has(instanceId)) {
      // Retryable: a retry once the first attempt has settled finds it live, or finds it gone.
      throw new RuntimeBusyError(`runtime instance ${instanceId} is still being started on this worker; try again`);
    }
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
   * records it in the state directory before it is reported started. (Protected for the benchmark's probes.)
   */
  protected async launch(
    request: StartRequest<WorkspaceRuntimeSpec> & { forkedFrom?: ForkOrigin },
    dir: string,
    logPath: string,
    user: UserIdentity | undefined,
    committed?: CommittedIndex,
  ): Promise<WorkspaceInstance> {
    const context = {
      stateDir: this.stateDir,
      envAllow: this.envAllow,
      register: (spawned: WorkspaceInstance) => this.instances.set(spawned.instanceId, spawned),
    };
    const instance = await spawnInstance(context, request, dir, logPath, user, committed);
    // What a command that fails by itself leaves is kept for a look, not removed as abandoned by the next worker.
    void instance.exited.then((exit) => {
      if (!exit.requested && failedExit(exit) && this.instances.get(instance.instanceId) === instance) {
        void this.keepFailed(instance);
      }
    });
    try {
      await instance.recorded;
    } catch (error) {
      // Unrecorded, it would outlive a crash of the worker unseen: rather no instance at all. (Asked for: it is no
      // failure of the command's to keep a directory for.)
      instance.stopRequested = true;
      signalRunning(instance, 'SIGKILL');
      await instance.exited;
      this.instances.delete(instance.instanceId);
      throw error;
    }
    return instance;
  }
}

/** An exit that is a failure: a non-zero code or a signal. */
function failedExit(exit: ExitInfo): boolean {
  return exit.exitCode !== 0 || exit.signal !== null;
}

/** Bytes of a log read for its last lines: the end of a long line is enough. */
const TAIL_BYTES = 16 * 1024;

/** The last `lines` non-empty lines of a file, each at most 500 characters; none when it cannot be read. */
async function tailOf(file: string, lines: number): Promise<string[]> {
  let handle: fs.promises.FileHandle | undefined;
  try {
    handle = await fs.promises.open(file, 'r');
    const { size } = await handle.stat();
    const length = Math.min(size, TAIL_BYTES);
    const buffer = Buffer.alloc(length);
    await handle.read(buffer, 0, length, size - length);
    const text = buffer.toString('utf8');
    // A read that starts inside a line drops it: it is the end of a line, not a line.
    const all = text.split(/\r?\n/).slice(size > length ? 1 : 0);
    return all
      .filter((line) => line.trim() !== '')
      .slice(-lines)
      .map((line) => (line.length > 500 ? `${line.slice(0, 499)}…` : line));
  } catch {
    return [];
  } finally {
    await handle?.close();
  }
}

function namesOf(paths: readonly RestoredPath[]): string[] {
  return paths.map(({ name }) => name);
}

/** Entries a walk for the newest change looks at, at most: a huge tree is judged by what it reaches. */
const MAX_ACTIVITY_ENTRIES = 100_000;

async function mtimeOf(file: string): Promise<number> {
  try {
    return (await fs.promises.lstat(file)).mtimeMs;
  } catch {
    return 0;
  }
}

/** The newest mtime of `root` and what is under it (directories included: a removed file changes its directory). */
async function newestMtime(root: string): Promise<number> {
  let newest = 0;
  let seen = 0;
  const pending = [root];
  while (pending.length > 0 && seen < MAX_ACTIVITY_ENTRIES) {
    const dir = pending.pop()!;
    newest = Math.max(newest, await mtimeOf(dir));
    let entries: fs.Dirent[];
    try {
      entries = await fs.promises.readdir(dir, { withFileTypes: true });
    } catch {
      continue;
    }
    for (const entry of entries) {
      seen++;
      const full = path.join(dir, entry.name);
      if (entry.isDirectory()) pending.push(full);
      else newest = Math.max(newest, await mtimeOf(full));
    }
  }
  return newest;
}
