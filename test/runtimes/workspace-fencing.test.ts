import { spawn, type ChildProcess } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import * as fsp from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import { Readable } from 'node:stream';
import { setTimeout as delay } from 'node:timers/promises';
import type { WorkspaceRuntimeSpec } from '../../src/domain/schemas';
import {
  RuntimeFailedError,
  WorkspaceRootLockedError,
  WorkspaceRuntime,
  type RuntimeInstanceInfo,
  type WorkspaceRuntimeOptions,
} from '../../src/runtimes';
import { writeInstanceRecord } from '../../src/runtimes/workspace/instance-records';
import { readAll } from '../helpers/checkpoints';

/** What a worker leaves behind on its host when it dies, and what the next one does about it. Reads /proc. */

const REPO = path.resolve(__dirname, '../..');
const HOST_FIXTURE = path.join(__dirname, 'fixtures/workspace-host.ts');
/** A group of three: the shell and two children. */
const GROUP = ['sh', '-c', 'sleep 1000 & sleep 1000 & wait'];
const SESSION = 'session-1';

const spec = (command: string[], extra: Partial<WorkspaceRuntimeSpec> = {}): WorkspaceRuntimeSpec => ({
  kind: 'workspace',
  command,
  ...extra,
});

let tmp: string;
let nextId = 0;
const newId = (): string => `inst-${++nextId}`;
const runtimes: WorkspaceRuntime[] = [];
/** Every process group a test made, killed after it whatever happened. */
const groups = new Set<number>();
const children = new Set<ChildProcess>();

interface Layout {
  rootDir: string;
  stateDir: string;
}

function newLayout(): Layout {
  const n = ++nextId;
  return { rootDir: path.join(tmp, `root-${n}`), stateDir: path.join(tmp, `run-${n}`) };
}

function newRuntime(layout: Layout, options: Partial<WorkspaceRuntimeOptions> = {}): WorkspaceRuntime {
  const runtime = new WorkspaceRuntime({ ...layout, defaultStopGraceMs: 2_000, log: () => {}, ...options });
  runtimes.push(runtime);
  return runtime;
}

beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'workspace-fencing-'));
});

afterEach(async () => {
  await Promise.all(runtimes.splice(0).map((runtime) => runtime.stopAll()));
  for (const child of children) child.kill('SIGKILL');
  children.clear();
  for (const pgid of groups) {
    for (const signal of ['SIGKILL', 'SIGCONT'] as const) {
      try {
        process.kill(-pgid, signal);
      } catch {
        // gone already
      }
    }
  }
  groups.clear();
});

afterAll(async () => {
  await fsp.rm(tmp, { recursive: true, force: true });
});

interface ProcessState {
  pid: number;
  state: string;
  startTime: number;
}

/** The processes of group `pgid`, zombies left out, from a scan of /proc. */
function membersOf(pgid: number): ProcessState[] {
  const members: ProcessState[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    let text: string;
    try {
      text = readFileSync(`/proc/${name}/stat`, 'utf8');
    } catch {
      continue;
    }
    const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
    if (Number(fields[2]) === pgid && !'ZX'.includes(fields[0]!)) {
      members.push({ pid: Number(name), state: fields[0]!, startTime: Number(fields[19]) });
    }
  }
  return members;
}

/** Field 22 of /proc/<pid>/stat. */
function startTimeOf(pid: number): number {
  const text = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return Number(text.slice(text.lastIndexOf(')') + 2).split(' ')[19]);
}

function bootId(): string {
  return readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
}

async function waitFor<T>(probe: () => T | undefined | Promise<T | undefined>, timeoutMs = 10_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error('timed out waiting');
    await delay(20);
  }
}

const allStopped = (pgid: number): true | undefined => {
  const members = membersOf(pgid);
  return members.length > 0 && members.every(({ state }) => state === 'T') ? true : undefined;
};

/** A process group of its own, as a session's command makes: `sh` leading two `sleep`s. */
function spawnGroup(command = GROUP, cwd?: string): ChildProcess & { pid: number } {
  const child = spawn(command[0]!, command.slice(1), { detached: true, stdio: 'ignore', cwd });
  if (child.pid === undefined) throw new Error('no pid');
  groups.add(child.pid);
  child.unref();
  return child as ChildProcess & { pid: number };
}

/** What making a runtime on `layout` throws. */
function refusal(layout: Layout): unknown {
  try {
    newRuntime(layout);
  } catch (error) {
    return error;
  }
  throw new Error('the runtime was made');
}

interface Host {
  child: ChildProcess;
  pid: number;
  /** `running`, `frozen` (stopped mid-capture), `stopped` (exited, directory kept). */
  instances: [RuntimeInstanceInfo, RuntimeInstanceInfo, RuntimeInstanceInfo];
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/** Runs fixtures/workspace-host.ts in a worker process of its own, and waits until its instances run. */
async function startHost(layout: Layout, exitHook = false): Promise<Host> {
  const child = spawn(process.execPath, ['--import', 'tsx', HOST_FIXTURE, JSON.stringify({ ...layout, exitHook })], {
    cwd: REPO,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.add(child);
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal })),
  );
  let stdout = '';
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const line = await new Promise<string>((resolve, reject) => {
    child.stdout.on('data', (chunk: Buffer) => {
      stdout += chunk.toString();
      if (stdout.includes('\n')) resolve(stdout.slice(0, stdout.indexOf('\n')));
    });
    void exited.then(({ code }) => reject(new Error(`the host exited (${code}) before it started: ${stderr}`)));
  });
  const started = JSON.parse(line) as Pick<Host, 'pid' | 'instances'>;
  for (const info of started.instances) groups.add(info.pid!);
  return { child, exited, ...started };
}

/** The lifelines (process-group.ts) that watch the groups `pgids`, by their command line. */
function lifelinesOf(pgids: readonly number[]): number[] {
  return readdirSync('/proc')
    .filter((name) => /^\d+$/.test(name))
    .filter((pid) => {
      try {
        const argv = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
        return argv[3] === 'ds-lifeline' && pgids.includes(Number(argv[4]));
      } catch {
        return false;
      }
    })
    .map(Number);
}

describe('a worker killed with SIGKILL', () => {
  test('takes its groups with it, the frozen one too: their lifelines end them', async () => {
    const layout = newLayout();
    const host = await startHost(layout);
    const [running, frozen] = host.instances;
    expect(membersOf(running.pid!)).toHaveLength(3);
    await waitFor(() => allStopped(frozen.pid!));
    expect(lifelinesOf([running.pid!, frozen.pid!])).toHaveLength(2);

    host.child.kill('SIGKILL');
    await host.exited;
    // No worker starts again on the host: nothing but the lifelines is left to end the groups.
    await waitFor(() => (membersOf(running.pid!).length === 0 && membersOf(frozen.pid!).length === 0) || undefined);
    await waitFor(() => lifelinesOf([running.pid!, frozen.pid!]).length === 0 || undefined);

    const next = newRuntime(layout);
    expect(await next.recoverHost()).toEqual({ killed: 0, removedDirs: 3, bytes: 1000 + 2345 + 500, keptFailed: 0 });
  });

  test('with its lifelines gone too, leaves its groups running, one frozen; recoverHost kills them and removes every workspace', async () => {
    const layout = newLayout();
    const host = await startHost(layout);
    const [running, frozen, stopped] = host.instances;
    expect(membersOf(running.pid!)).toHaveLength(3);
    await waitFor(() => allStopped(frozen.pid!));
    // Stopped, not disposed: its directory stays, with no process.
    expect(await fsp.readdir(stopped.location)).toEqual(['c.txt']);
    // While it lives, no second runtime may take its state directory.
    const refused = refusal(layout);
    expect(refused).toBeInstanceOf(WorkspaceRootLockedError);
    expect(refused).toMatchObject({
      pid: host.pid,
      message:
        `${path.join(layout.stateDir, 'lock')} is held by process ${host.pid}: ` +
        'another workspace runtime uses this root, and two must not share one',
    });

    // Ended by someone (an operator, the OOM killer) an instant before the worker: it has no time to start others.
    host.child.kill('SIGSTOP');
    for (const pid of lifelinesOf([running.pid!, frozen.pid!])) process.kill(pid, 'SIGKILL');
    await waitFor(() => lifelinesOf([running.pid!, frozen.pid!]).length === 0 || undefined);
    host.child.kill('SIGKILL');
    expect(await host.exited).toEqual({ code: null, signal: 'SIGKILL' });
    // What the operator found: the groups run on without their worker, the frozen one stopped for good.
    expect(membersOf(running.pid!)).toHaveLength(3);
    expect(membersOf(frozen.pid!).map(({ state }) => state)).toEqual(['T', 'T', 'T']);

    const logs: string[] = [];
    const next = newRuntime(layout, { log: (message) => logs.push(message) });
    const recovery = await next.recoverHost();

    expect(recovery).toEqual({ killed: 2, removedDirs: 3, bytes: 1000 + 2345 + 500, keptFailed: 0 });
    expect(membersOf(running.pid!)).toEqual([]);
    expect(membersOf(frozen.pid!)).toEqual([]);
    expect(await fsp.readdir(layout.rootDir)).toEqual([]);
    expect(await fsp.readdir(layout.stateDir)).toEqual(['lock']);
    expect(logs).toContain(
      `workspace recovery: killed 2 process group(s) left running, removed 3 abandoned workspace(s) (3845 bytes) ` +
        `under ${layout.rootDir}`,
    );
    expect(logs).toContain(
      `workspace runtime: killed process group ${frozen.pid} of instance frozen (session session-b), left running ` +
        `by an earlier worker`,
    );
    // The stale lock was taken over: the state directory is the new runtime's now.
    expect(refusal(layout)).toMatchObject({ pid: process.pid });
  });

  test('a second recovery finds nothing left to do', async () => {
    const layout = newLayout();
    const host = await startHost(layout);
    host.child.kill('SIGKILL');
    await host.exited;
    const next = newRuntime(layout);
    await next.recoverHost();
    expect(await next.recoverHost()).toEqual({ killed: 0, removedDirs: 0, bytes: 0, keptFailed: 0 });
  });
});

describe('recoverHost', () => {
  test('kills a group only while its pid is still the recorded process, by start time', async () => {
    const layout = newLayout();
    const runtime = newRuntime(layout);
    const decoy = spawnGroup(['sleep', '1000']);
    const record = {
      instanceId: 'reused',
      sessionId: SESSION,
      dir: path.join(layout.rootDir, SESSION, 'reused'),
      pid: decoy.pid,
      pgid: decoy.pid,
      bootId: bootId(),
    };
    // The pid was given to another process since the record was written: it started at another time.
    await writeInstanceRecord(layout.stateDir, { ...record, startTime: startTimeOf(decoy.pid) - 1 });
    expect(await runtime.recoverHost()).toEqual({ killed: 0, removedDirs: 0, bytes: 0, keptFailed: 0 });
    expect(membersOf(decoy.pid)).toHaveLength(1);
    expect(await fsp.readdir(layout.stateDir)).toEqual(['lock']);

    // The same record with the process's own start time: that one is killed.
    await writeInstanceRecord(layout.stateDir, { ...record, startTime: startTimeOf(decoy.pid) });
    expect(await runtime.recoverHost()).toEqual({ killed: 1, removedDirs: 0, bytes: 0, keptFailed: 0 });
    expect(membersOf(decoy.pid)).toEqual([]);
  });

  test('kills what is left of a group whose leader exited, but not a later group under its number', async () => {
    const layout = newLayout();
    const runtime = newRuntime(layout);
    // The leader exits at once; its two children run on in its group (the worker died before it killed them).
    const leader = spawnGroup(['sh', '-c', 'sleep 1000 & sleep 1000 & exit 0']);
    const startTime = startTimeOf(leader.pid);
    await waitFor(() => (membersOf(leader.pid).length === 2 ? true : undefined));
    const record = { instanceId: 'leaderless', sessionId: SESSION, dir: tmp, pid: leader.pid, pgid: leader.pid };
    // Members that started before the recorded leader cannot be its children.
    await writeInstanceRecord(layout.stateDir, { ...record, startTime: startTime + 1_000_000, bootId: bootId() });
    expect((await runtime.recoverHost()).killed).toBe(0);
    expect(membersOf(leader.pid)).toHaveLength(2);

    await writeInstanceRecord(layout.stateDir, { ...record, startTime, bootId: bootId() });
    expect((await runtime.recoverHost()).killed).toBe(1);
    expect(membersOf(leader.pid)).toEqual([]);
  });

  test('a record from another boot names nothing that still runs', async () => {
    const layout = newLayout();
    const runtime = newRuntime(layout);
    const decoy = spawnGroup(['sleep', '1000']);
    await writeInstanceRecord(layout.stateDir, {
      instanceId: 'old-boot',
      sessionId: SESSION,
      dir: tmp,
      pid: decoy.pid,
      pgid: decoy.pid,
      startTime: startTimeOf(decoy.pid),
      bootId: '00000000-0000-0000-0000-000000000000',
    });
    expect((await runtime.recoverHost()).killed).toBe(0);
    expect(membersOf(decoy.pid)).toHaveLength(1);
    expect(await fsp.readdir(layout.stateDir)).toEqual(['lock']);
  });

  test('kills a group started in an instance directory that has no record (the worker died before writing it)', async () => {
    const layout = newLayout();
    const runtime = newRuntime(layout);
    const live = await runtime.start({ sessionId: SESSION, instanceId: newId(), spec: spec(GROUP) });
    const unrecorded = path.join(layout.rootDir, SESSION, 'unrecorded');
    await fsp.mkdir(unrecorded, { recursive: true });
    const orphan = spawnGroup(GROUP, unrecorded);
    // Outside any instance directory: not the runtime's to kill.
    const bystander = spawnGroup(GROUP, layout.rootDir);
    await waitFor(() => (membersOf(orphan.pid).length === 3 && membersOf(live.pid!).length === 3 ? true : undefined));

    const recovery = await runtime.recoverHost();
    expect(recovery).toMatchObject({ killed: 1, removedDirs: 1 });
    expect(membersOf(orphan.pid)).toEqual([]);
    expect(membersOf(live.pid!)).toHaveLength(3);
    expect(membersOf(bystander.pid).length).toBeGreaterThan(0);
    await expect(fsp.stat(unrecorded)).rejects.toMatchObject({ code: 'ENOENT' });
  });

  test("leaves this runtime's own instances and whatever does not look like a workspace alone", async () => {
    const layout = newLayout();
    const runtime = newRuntime(layout);
    const live = await runtime.start({ sessionId: SESSION, instanceId: newId(), spec: spec(GROUP) });
    await waitFor(() => (membersOf(live.pid!).length === 3 ? true : undefined));
    const abandoned = path.join(layout.rootDir, SESSION, 'abandoned');
    await fsp.mkdir(path.join(abandoned, 'sub'), { recursive: true });
    await fsp.writeFile(path.join(abandoned, 'sub', 'data'), 'x'.repeat(4096));
    await fsp.writeFile(`${abandoned}.log`, 'old output\n');
    // Made read-only, as a restored archive or the command may have left it.
    await fsp.chmod(path.join(abandoned, 'sub'), 0o500);
    await fsp.writeFile(path.join(layout.rootDir, 'NOTES.txt'), 'mine');
    await fsp.writeFile(path.join(layout.rootDir, SESSION, 'README'), 'mine too');

    expect(await runtime.recoverHost()).toEqual({ killed: 0, removedDirs: 1, bytes: 4096 + 11, keptFailed: 0 });
    expect((await fsp.readdir(layout.rootDir)).sort()).toEqual(['NOTES.txt', SESSION]);
    expect((await fsp.readdir(path.join(layout.rootDir, SESSION))).sort()).toEqual(
      ['README', live.instanceId, `${live.instanceId}.log`].sort(),
    );
    expect(membersOf(live.pid!)).toHaveLength(3);
  });
});

describe('instance records', () => {
  test('each running instance has one, naming its pid, group, start time, ids and directory, until it exits', async () => {
    const layout = newLayout();
    const runtime = newRuntime(layout);
    const info = await runtime.start({ sessionId: SESSION, instanceId: newId(), spec: spec(GROUP) });
    const file = path.join(layout.stateDir, `${info.instanceId}.json`);
    expect(JSON.parse(await fsp.readFile(file, 'utf8'))).toEqual({
      instanceId: info.instanceId,
      sessionId: SESSION,
      dir: info.location,
      pid: info.pid,
      pgid: info.pid,
      startTime: startTimeOf(info.pid!),
      bootId: bootId(),
    });
    expect((await fsp.stat(file)).mode & 0o777).toBe(0o600);

    await runtime.stop(info.instanceId);
    expect(await fsp.readdir(layout.stateDir)).toEqual(['lock']);
  });
});

describe('killAll', () => {
  test('kills every group at once, frozen ones too, and signals nothing twice', async () => {
    const layout = newLayout();
    const runtime = newRuntime(layout);
    const running = await runtime.start({ sessionId: SESSION, instanceId: newId(), spec: spec(GROUP) });
    const frozen = await runtime.start({ sessionId: SESSION, instanceId: newId(), spec: spec(GROUP) });
    const capture = await runtime.capture(frozen.instanceId);
    await waitFor(() => allStopped(frozen.pid!));

    expect(runtime.killAll()).toBe(2);
    expect(runtime.killAll()).toBe(0);
    for (const info of [running, frozen]) {
      expect(await runtime.waitForExit(info.instanceId)).toEqual({
        exitCode: null,
        signal: 'SIGKILL',
        requested: true,
      });
      await waitFor(() => (membersOf(info.pid!).length === 0 ? true : undefined));
    }
    expect(runtime.killAll()).toBe(0);
    capture.destroy();
    expect(await fsp.readdir(layout.stateDir)).toEqual(['lock']);
  });

  test("in the worker's exit handler, no session process outlives a SIGTERM to the worker", async () => {
    const layout = newLayout();
    const host = await startHost(layout, true);
    const [running, frozen] = host.instances;
    await waitFor(() => allStopped(frozen.pid!));

    host.child.kill('SIGTERM');
    expect(await host.exited).toEqual({ code: 0, signal: null });
    for (const info of [running, frozen]) {
      await waitFor(() => (membersOf(info.pid!).length === 0 ? true : undefined));
    }
  });
});

describe('retries of an attempt that crashed', () => {
  /** What a start or restore that died half-way leaves: a directory with something in it, a log. */
  async function leaveHalfWritten(rootDir: string, instanceId: string): Promise<string> {
    const dir = path.join(rootDir, SESSION, instanceId);
    await fsp.mkdir(path.join(dir, 'half'), { recursive: true });
    await fsp.writeFile(path.join(dir, 'half', 'written'), 'partial');
    await fsp.chmod(path.join(dir, 'half'), 0o500);
    await fsp.writeFile(`${dir}.log`, 'first attempt\n');
    return dir;
  }

  test.each(['start', 'restore'] as const)(
    '%s over its directory discards it and does the work again',
    async (kind) => {
      const layout = newLayout();
      const logs: string[] = [];
      const runtime = newRuntime(layout, { log: (message) => logs.push(message) });
      const instanceId = newId();
      const dir = await leaveHalfWritten(layout.rootDir, instanceId);
      const command = spec(['sh', '-c', 'echo second attempt; exec sleep 30'], { files: { 'seed.txt': 'seed' } });
      const archive = await readAll(await captureOf(runtime, { 'restored.txt': 'restored' }));

      const info =
        kind === 'start'
          ? await runtime.start({ sessionId: SESSION, instanceId, spec: command })
          : await runtime.restore({ sessionId: SESSION, instanceId, spec: command, state: Readable.from([archive]) });

      expect(info).toMatchObject({ instanceId, location: dir, running: true });
      expect(await fsp.readdir(dir)).toEqual([kind === 'start' ? 'seed.txt' : 'restored.txt']);
      await waitFor(async () => ((await fsp.readFile(`${dir}.log`, 'utf8')) === 'second attempt\n' ? true : undefined));
      expect(logs).toEqual([
        `workspace runtime: discarding what an earlier attempt of instance ${instanceId} left in ${dir}`,
      ]);
    },
  );

  test('a second start while the first is still in flight is refused, retryably; the first goes on', async () => {
    const layout = newLayout();
    const runtime = newRuntime(layout);
    const instanceId = newId();
    const archive = await readAll(await captureOf(runtime, { 'a.txt': 'a' }));
    const state = new Readable({ read() {} });
    state.push(archive.subarray(0, 512));
    const first = runtime.restore({ sessionId: SESSION, instanceId, spec: spec(['sleep', '30']), state });
    await waitFor(async () =>
      (await fsp.lstat(path.join(layout.rootDir, SESSION, instanceId)).then(
        () => true,
        () => undefined,
      ))
        ? true
        : undefined,
    );

    const second = runtime.start({ sessionId: SESSION, instanceId, spec: spec(['sleep', '30']) });
    await expect(second).rejects.toThrow(`runtime instance ${instanceId} is still being started on this worker`);
    await expect(second).rejects.not.toBeInstanceOf(RuntimeFailedError);
    await expect(runtime.dispose(instanceId)).rejects.toThrow('is still being started');

    state.push(archive.subarray(512));
    state.push(null);
    expect(await first).toMatchObject({ instanceId, running: true });
    expect(await fsp.readFile(path.join((await first).location, 'a.txt'), 'utf8')).toBe('a');
  });

  test('dispose of an id not live here removes what is on disk under it, and nothing else', async () => {
    const layout = newLayout();
    const runtime = newRuntime(layout);
    const other = await runtime.start({ sessionId: 'other-session', instanceId: newId(), spec: spec(['sleep', '30']) });
    const instanceId = newId();
    await leaveHalfWritten(layout.rootDir, instanceId);

    await runtime.dispose(instanceId);
    expect(await fsp.readdir(layout.rootDir)).toEqual(['other-session']);
    expect((await runtime.describe(other.instanceId))?.running).toBe(true);
    // Unknown and nothing on disk: still a no-op.
    await runtime.dispose('never-here');
  });
});

/** A plain capture of a fresh instance holding `files`, as a restore takes it. */
async function captureOf(runtime: WorkspaceRuntime, files: Record<string, string>): Promise<Readable> {
  const info = await runtime.start({
    sessionId: 'source',
    instanceId: newId(),
    spec: spec(['sleep', '30'], { files }),
  });
  return runtime.capture(info.instanceId);
}
