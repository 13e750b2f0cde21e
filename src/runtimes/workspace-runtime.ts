import { spawn } from 'node:child_process';
import { constants as fsConstants, createReadStream } from 'node:fs';
import * as fsp from 'node:fs/promises';
import * as path from 'node:path';
import { Readable } from 'node:stream';
import { setTimeout as delay } from 'node:timers/promises';
import { types } from 'node:util';
import { extract as tarExtract, pack as tarPack } from 'tar-stream';
import type { Extract, Header, Pack } from 'tar-stream';
import type { WorkspaceRuntimeSpec } from '../domain/schemas';
import { writevAll } from '../fs-io';
import type { ExitInfo, RestoreRequest, RuntimeInstanceInfo, SessionRuntime, StartRequest } from './session-runtime';
import { RuntimeFailedError, RuntimeNotFoundError } from './session-runtime';

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
  /** How long `stop` waits after SIGTERM before SIGKILL when neither the call nor the spec says (default 10 s). */
  defaultStopGraceMs?: number;
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
  stopRequested: boolean;
  stopping?: Promise<ExitInfo>;
  /** Captures in progress; the group is frozen while this is above zero. */
  freezeCount: number;
  /** Settles once every process of a freshly frozen group has actually stopped. */
  frozen?: Promise<void>;
}

const SAFE_ID = /^[A-Za-z0-9][A-Za-z0-9._-]*$/;
const VERSION = '1';
/** How long a capture waits for SIGSTOP to take effect before walking the directory anyway. */
const FREEZE_SETTLE_MS = 1_000;

/**
 * A working directory with a command running in it, on this host. The command leads its own process group, so
 * `stop` and the freeze around `capture` reach everything it started. State is the directory, as a tar stream.
 */
export class WorkspaceRuntime implements SessionRuntime<WorkspaceRuntimeSpec> {
  readonly kind = 'workspace';
  readonly version = VERSION;

  private readonly rootDir: string;
  private readonly defaultStopGraceMs: number;
  private readonly instances = new Map<string, WorkspaceInstance>();

  constructor(options: WorkspaceRuntimeOptions) {
    this.rootDir = path.resolve(options.rootDir);
    this.defaultStopGraceMs = options.defaultStopGraceMs ?? 10_000;
  }

  canRestore(version: string): boolean {
    return version === VERSION;
  }

  async start(request: StartRequest<WorkspaceRuntimeSpec>): Promise<RuntimeInstanceInfo> {
    const { dir, logPath } = await this.createWorkspace(request);
    try {
      await writeSeedFiles(dir, request.spec.files ?? {});
      return this.info(await this.launch(request, dir, logPath));
    } catch (error) {
      await discardWorkspace(dir, logPath);
      throw error;
    }
  }

  async restore(request: RestoreRequest<WorkspaceRuntimeSpec>): Promise<RuntimeInstanceInfo> {
    const { dir, logPath } = await this.createWorkspace(request).catch((error: unknown) => {
      request.state.destroy();
      throw error;
    });
    try {
      await extractArchive(request.state, dir);
      // Only now has the whole stream verified: nothing runs on state that may be corrupt.
      return this.info(await this.launch(request, dir, logPath));
    } catch (error) {
      await discardWorkspace(dir, logPath);
      throw error;
    }
  }

  async capture(instanceId: string): Promise<Readable> {
    const instance = this.get(instanceId);
    const thaw = await this.freeze(instance);
    const pack = tarPack();
    // A real Node stream for callers (`stream.pipeline`); destroying it destroys the pack through the iterator.
    const stream = Readable.from(pack, { objectMode: false });
    // 'close' follows 'end', 'error' and `destroy()` alike, so the group is resumed whatever the consumer does.
    stream.once('close', thaw);
    void packDirectory(instance.dir, pack).then(
      () => pack.finalize(),
      (error: unknown) => pack.destroy(toError(error)),
    );
    return stream;
  }

  async stop(instanceId: string, options: { graceMs?: number } = {}): Promise<ExitInfo> {
    const instance = this.get(instanceId);
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

  /** Stops the instance if it still runs, then removes its directory and log. Unknown ids are a no-op. */
  async dispose(instanceId: string): Promise<void> {
    const instance = this.instances.get(instanceId);
    if (!instance) return;
    if (!instance.exit) await this.stop(instanceId);
    await removeWorkspace(instance.dir, instance.logPath);
    this.instances.delete(instanceId);
  }

  /** Stops every running instance (for worker shutdown); directories stay for a later restore or dispose. */
  async stopAll(): Promise<void> {
    await Promise.all([...this.instances.keys()].map((id) => this.stop(id)));
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
      startedAt: instance.startedAt,
      running: !instance.exit,
    };
  }

  /** Creates the instance's fresh, empty directory; an existing one means the id was already used. */
  private async createWorkspace(
    request: StartRequest<WorkspaceRuntimeSpec>,
  ): Promise<{ dir: string; logPath: string }> {
    assertSafeId('session id', request.sessionId);
    assertSafeId('instance id', request.instanceId);
    if (this.instances.has(request.instanceId)) {
      throw new RuntimeFailedError(`runtime instance ${request.instanceId} already exists on this worker`);
    }
    const sessionDir = path.join(this.rootDir, request.sessionId);
    const dir = path.join(sessionDir, request.instanceId);
    await fsp.mkdir(sessionDir, { recursive: true });
    try {
      await fsp.mkdir(dir);
    } catch (error) {
      if (isErrnoException(error) && error.code === 'EEXIST') {
        throw new RuntimeFailedError(`workspace ${dir} already exists`, { cause: error });
      }
      throw error;
    }
    return { dir, logPath: `${dir}.log` };
  }

  /** Spawns the command in `dir` and registers the instance once the process exists. */
  private async launch(
    request: StartRequest<WorkspaceRuntimeSpec>,
    dir: string,
    logPath: string,
  ): Promise<WorkspaceInstance> {
    const [program, ...args] = request.spec.command;
    if (program === undefined) throw new RuntimeFailedError('command must name a program');
    const log = await fsp.open(logPath, 'a');
    try {
      const child = spawn(program, args, {
        cwd: dir,
        env: { ...process.env, ...request.spec.env },
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
      const instance: WorkspaceInstance = {
        sessionId: request.sessionId,
        instanceId: request.instanceId,
        dir,
        logPath,
        pid,
        startedAt: new Date().toISOString(),
        stopGraceMs: request.spec.stopGraceMs,
        stopRequested: false,
        freezeCount: 0,
        exited: exited.then(({ code, signal }) => {
          instance.exit = { exitCode: code, signal, requested: instance.stopRequested };
          // The group must not outlive its leader: a child that ignored SIGTERM, or one left behind by a
          // command that exited by itself, would run on unaccounted for. The group id cannot have been
          // reused yet: it stays taken while any member lives.
          signalGroup(pid, 'SIGKILL');
          return instance.exit;
        }),
      };
      this.instances.set(request.instanceId, instance);
      return instance;
    } catch (error) {
      const command = JSON.stringify(request.spec.command);
      throw new RuntimeFailedError(`cannot run command ${command}: ${toError(error).message}`, { cause: error });
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
      instance.frozen = waitUntilGroupStopped(instance.pid);
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

function assertSafeId(what: string, id: string): void {
  if (!SAFE_ID.test(id) || id.includes('..')) {
    throw new RuntimeFailedError(`${what} ${JSON.stringify(id)} is not path-safe`);
  }
}

/**
 * Signals the instance's whole process group (negative pid) while its leader runs. After the leader has exited
 * its pid, and so the group id, may be reused by an unrelated process, so nothing is sent any more.
 */
function signalRunning(instance: WorkspaceInstance, signal: NodeJS.Signals): void {
  if (!instance.exit) signalGroup(instance.pid, signal);
}

function signalGroup(pgid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pgid, signal);
  } catch (error) {
    // ESRCH: every process of the group has already exited.
    if (!isErrnoException(error) || error.code !== 'ESRCH') throw error;
  }
}

/**
 * SIGSTOP takes effect asynchronously: a process in the middle of a write finishes it first. On Linux, wait
 * until /proc shows every member of the group stopped (or gone); elsewhere, and after a timeout, go on.
 */
async function waitUntilGroupStopped(pgid: number): Promise<void> {
  if (process.platform !== 'linux') return;
  const deadline = Date.now() + FREEZE_SETTLE_MS;
  while (!(await isGroupStopped(pgid)) && Date.now() < deadline) await delay(1);
}

async function isGroupStopped(pgid: number): Promise<boolean> {
  const pids = (await fsp.readdir('/proc')).filter((name) => /^\d+$/.test(name));
  const states = await Promise.all(
    pids.map(async (pid) => {
      const stat = await fsp.readFile(`/proc/${pid}/stat`, 'utf8').catch(() => undefined); // exited meanwhile
      if (stat === undefined) return undefined;
      // "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses, so split after the last ')'.
      const [state, , pgrp] = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      return Number(pgrp) === pgid ? state : undefined;
    }),
  );
  // T: stopped, t: stopped by a tracer, Z/X: dead.
  return states.every((state) => state === undefined || 'TtZX'.includes(state));
}

async function writeSeedFiles(dir: string, files: Record<string, string>): Promise<void> {
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
  }
}

/**
 * Removes what a failed start or restore created. A failure to remove must not replace the error the caller
 * needs to see (a restore rejects with the state stream's own error): the directory is then left behind, and
 * a retry with the same instance id fails with RuntimeFailedError rather than reusing it.
 */
async function discardWorkspace(dir: string, logPath: string): Promise<void> {
  await removeWorkspace(dir, logPath).catch(() => {});
}

async function removeWorkspace(dir: string, logPath: string): Promise<void> {
  try {
    await fsp.rm(dir, { recursive: true, force: true });
  } catch (error) {
    // Directories the command (or the archive) made read-only cannot be emptied until made writable again.
    if (!isErrnoException(error) || (error.code !== 'EACCES' && error.code !== 'EPERM')) throw error;
    await makeDirectoriesWritable(dir);
    await fsp.rm(dir, { recursive: true, force: true });
  }
  await fsp.rm(logPath, { force: true });
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
 * Writes the tree under `root` into `pack`: directories, regular files (contents streamed, never held in
 * memory) and symlinks, in sorted order so the same tree always gives the same bytes. Sockets, fifos and
 * devices hold no state a restore could bring back and are left out.
 */
async function packDirectory(root: string, pack: Pack): Promise<void> {
  const walk = async (relDir: string): Promise<void> => {
    const names = (await fsp.readdir(path.join(root, relDir))).sort();
    for (const name of names) {
      const relPath = relDir === '' ? name : `${relDir}/${name}`;
      const absPath = path.join(root, relPath);
      const stats = await fsp.lstat(absPath);
      const header: PackHeader = { name: relPath, mode: stats.mode & 0o7777, mtime: stats.mtime };
      if (stats.isDirectory()) {
        await addEntry(pack, { ...header, type: 'directory' });
        await walk(relPath);
      } else if (stats.isFile()) {
        await addFile(pack, { ...header, type: 'file', size: stats.size }, absPath);
      } else if (stats.isSymbolicLink()) {
        const target = await fsp.readlink(absPath);
        if (!symlinkStaysInside(relPath, target)) {
          throw new RuntimeFailedError(
            `symlink ${relPath} points outside the workspace (${target}); it cannot be restored`,
          );
        }
        await addEntry(pack, { ...header, type: 'symlink', linkname: target });
      }
    }
  };
  await walk('');
}

/** What `pack.entry` takes: a header whose fields other than the name have defaults. */
type PackHeader = Parameters<Pack['entry']>[0];

/** Adds an entry without a body (directory, symlink) and resolves once the pack has taken it. */
function addEntry(pack: Pack, header: PackHeader): Promise<void> {
  return new Promise((resolve, reject) => pack.entry(header, (error) => (error ? reject(error) : resolve())));
}

/**
 * File reads while capturing: 1 MiB, not the default 64 KiB. Each piece crosses the pack, a Readable and the
 * chunker, which all cost per piece (`npm run bench:sessions` prints the capture path alone: "capture → store.write").
 */
const READ_BYTES = 1024 * 1024;
/** Bytes gathered before a file write while restoring (see writeEntry). */
const WRITE_BYTES = 1024 * 1024;

/**
 * Streams the first `header.size` bytes of `file` into a pack entry, with the pack's backpressure. A file that
 * shrank since it was measured fails the capture rather than producing a corrupt archive.
 */
async function addFile(pack: Pack, header: PackHeader & { size: number }, file: string): Promise<void> {
  let settle: (error?: Error | null) => void = () => {};
  const added = new Promise<void>((resolve, reject) => (settle = (error) => (error ? reject(error) : resolve())));
  const entry = pack.entry(header, settle);
  try {
    let bytesRead = 0;
    if (header.size > 0) {
      for await (const chunk of createReadStream(file, { start: 0, end: header.size - 1, highWaterMark: READ_BYTES })) {
        // Destroyed with the capture: stop reading (leaving the loop closes the file); `added` says why.
        if (entry.destroying) throw new Error('capture abandoned');
        bytesRead += (chunk as Buffer).length;
        if (!entry.write(chunk)) await drainedOrClosed(entry);
      }
    }
    if (bytesRead !== header.size) throw new Error(`${header.name} changed size during capture`);
    entry.end(null);
  } catch (error) {
    entry.destroy(toError(error)); // no-op if already destroyed
  }
  await added;
}

/**
 * Extracts a tar stream produced by `capture` into the empty directory `root`. Resolves only after `state`
 * has ended; if `state` fails, rejects with its error object unchanged (it says why, e.g. a digest mismatch).
 */
async function extractArchive(state: Readable, root: string): Promise<void> {
  // The iterator in `feed` reports the state's errors while it reads; an error that arrives after it stopped
  // (the extractor failed first) must not become an unhandled 'error' event that takes the worker down.
  state.on('error', () => undefined);
  const extract = tarExtract();
  let stateFailure: { error: unknown } | undefined;
  let abandoned = false;
  const feeding = feed(state, extract).catch((error: unknown) => {
    if (abandoned) return; // the error of our own `state.destroy()` below
    stateFailure = { error };
    extract.destroy(toError(error));
  });
  try {
    await extractEntries(extract, root);
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
}

/** Writes `source` into `sink` with backpressure; returns early if the sink is destroyed. */
async function feed(source: Readable, sink: Extract): Promise<void> {
  for await (const chunk of source) {
    if (sink.destroying) return;
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
async function extractEntries(extract: Extract, root: string): Promise<void> {
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
        break;
      case 'directory':
        // Owner-writable until every entry is in; the archived mode and mtime are applied at the end.
        entry.resume();
        await fsp.mkdir(file, { recursive: true, mode: 0o700 });
        if (segments.length > 0) directories.push({ dir: file, mode: header.mode & 0o777, mtime: header.mtime });
        break;
      case 'symlink': {
        // tar-stream reports an empty link name as null, whatever its types say.
        const target = header.linkname ?? '';
        if (segments.length === 0 || target === '' || !symlinkStaysInside(segments.join('/'), target)) {
          throw new ArchiveRejectedError(`symlink ${header.name} points outside the workspace`, header.name);
        }
        entry.resume();
        symlinks.push({ file, target, mtime: header.mtime });
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

// `types.isNativeError`, not `instanceof Error`: errors made by Node itself may come from another realm
// (jest's sandbox, vm contexts).
function isErrnoException(error: unknown): error is NodeJS.ErrnoException {
  return types.isNativeError(error) && 'code' in error;
}

function toError(error: unknown): Error {
  return types.isNativeError(error) || error instanceof Error ? error : new Error(String(error));
}
