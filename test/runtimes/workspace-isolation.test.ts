import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import * as fsp from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import { Readable } from 'node:stream';
import { SECRET_VARIABLES } from '../../src/config';
import type { WorkspaceRuntimeSpec } from '../../src/domain/schemas';
import {
  DEFAULT_WORKSPACE_ENV_ALLOW,
  RuntimeFailedError,
  WorkspaceRuntime,
  type RuntimeInstanceInfo,
  type WorkspaceRuntimeOptions,
} from '../../src/runtimes';
import { isUnchangedRange } from '../../src/snapshots';
import { readAll } from '../helpers/checkpoints';

/** What a session process can reach of the worker: its environment, its files, other sessions. */

const onLinux = process.platform === 'linux';
const asRoot = onLinux && process.getuid?.() === 0;
const TEST_USER = 'ds-test-user';

const spec = (command: string[], extra: Partial<WorkspaceRuntimeSpec> = {}): WorkspaceRuntimeSpec => ({
  kind: 'workspace',
  command,
  ...extra,
});

let tmp: string;
let nextId = 0;
const newId = (): string => `inst-${++nextId}`;
/** What every command is told about its instance, whatever the allow-list (instanceIdentity). */
const IDENTITY = ['DS_SESSION_ID', 'DS_INSTANCE_ID', 'DS_SEED'];
const runtimes: WorkspaceRuntime[] = [];

function newRuntime(options: Partial<WorkspaceRuntimeOptions> = {}): WorkspaceRuntime {
  const rootDir = newRootDir();
  // Beside the root, not in it: the tests see in the root only what instances leave.
  const runtime = new WorkspaceRuntime({ rootDir, stateDir: `${rootDir}.run`, defaultStopGraceMs: 2_000, ...options });
  runtimes.push(runtime);
  return runtime;
}

const newRootDir = (): string => path.join(tmp, `root-${++nextId}`);

/** What a runtime left in its root directory (none at all if it never made it). */
const leftIn = (rootDir: string): Promise<string[]> => fsp.readdir(rootDir).catch(() => []);

beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'workspace-isolation-'));
  // Searchable by the unprivileged user below: its workspace lies under here.
  await fsp.chmod(tmp, 0o711);
});

afterEach(async () => {
  await Promise.all(runtimes.splice(0).map((runtime) => runtime.stopAll()));
});

afterAll(async () => {
  await fsp.rm(tmp, { recursive: true, force: true });
});

/** The environment a running process was started with, as the kernel keeps it. */
async function environOf(pid: number): Promise<{ raw: string; env: Record<string, string> }> {
  const raw = await fsp.readFile(`/proc/${pid}/environ`, 'utf8');
  const env = Object.fromEntries(
    raw
      .split('\0')
      .filter((entry) => entry !== '')
      .map((entry) => [entry.slice(0, entry.indexOf('=')), entry.slice(entry.indexOf('=') + 1)]),
  );
  return { raw, env };
}

/** The names of `env` an allow-list passes (`LC_*` is a prefix). */
function allowedNames(env: NodeJS.ProcessEnv, allow: readonly string[]): string[] {
  return Object.keys(env).filter((name) =>
    allow.some((pattern) => (pattern.endsWith('*') ? name.startsWith(pattern.slice(0, -1)) : name === pattern)),
  );
}

(onLinux ? describe : describe.skip)('the environment of a session process (reads /proc: Linux only)', () => {
  // Every variable the config marks secret, with a value found nowhere else.
  const secrets = Object.fromEntries(
    SECRET_VARIABLES.map((name) => [name, `secret-${randomBytes(16).toString('hex')}`]),
  );
  // Not secret, but the worker's: not the session's business either.
  const workerOwn = { DS_TASK_QUEUE: 'queue-of-the-worker', TEMPORAL_NAMESPACE: 'namespace-of-the-worker' };
  // Outside every allow-list: a proxy URL may carry a password.
  const unlisted = { HTTP_PROXY: `http://user:${randomBytes(8).toString('hex')}@proxy.invalid:3128` };
  const planted = { ...secrets, ...workerOwn, ...unlisted, LC_TIME: 'C', TZ: 'UTC' };
  const saved = new Map<string, string | undefined>();

  beforeAll(() => {
    for (const [name, value] of Object.entries(planted)) {
      saved.set(name, process.env[name]);
      process.env[name] = value;
    }
  });

  afterAll(() => {
    for (const [name, value] of saved) {
      if (value === undefined) delete process.env[name];
      else process.env[name] = value;
    }
  });

  test('holds the allow-listed variables, spec.env and its identity, and no worker or secret variable or value', async () => {
    const runtime = newRuntime();
    const specEnv = { GREETING: 'hello', PATH: `${process.env.PATH}:/opt/extra` };
    const instanceId = newId();
    const info = await runtime.start({ sessionId: 's', instanceId, spec: spec(['sleep', '30'], { env: specEnv }) });
    const { raw, env } = await environOf(info.pid!);

    const expected = new Set([
      ...allowedNames(process.env, DEFAULT_WORKSPACE_ENV_ALLOW),
      ...Object.keys(specEnv),
      ...IDENTITY,
    ]);
    expect(Object.keys(env).sort()).toEqual([...expected].sort());
    expect(env).toMatchObject({ ...specEnv, LC_TIME: 'C', TZ: 'UTC', DS_SESSION_ID: 's', DS_INSTANCE_ID: instanceId });
    expect(env.DS_SEED).toMatch(/^[0-9a-f]{64}$/);
    // The instance's identity is the only DS_ anything: none of the worker's own, no TEMPORAL_ variable.
    expect(Object.keys(env).filter((name) => /^(DS|TEMPORAL)_/.test(name) && !IDENTITY.includes(name))).toEqual([]);
    // The jest run's own DS_TEST_* variables are the worker's too.
    expect(process.env.DS_TEST_TEMPORAL_ADDRESS).toBeDefined();
    for (const value of [...Object.values(secrets), ...Object.values(unlisted)]) expect(raw).not.toContain(value);
  });

  test('the allow-list is an option: only the names it lists pass', async () => {
    const runtime = newRuntime({ envAllow: ['PATH', 'LC_*'] });
    const info = await runtime.start({
      sessionId: 's',
      instanceId: newId(),
      spec: spec(['sleep', '30'], { env: { GREETING: 'hello' } }),
    });
    const { env } = await environOf(info.pid!);
    expect(Object.keys(env).sort()).toEqual(
      [...allowedNames(process.env, ['PATH', 'LC_*']), 'GREETING', ...IDENTITY].sort(),
    );
  });

  test('a restore told it is a fork says so; each instance gets its own seed', async () => {
    const runtime = newRuntime();
    const source = await runtime.start({ sessionId: 'src@acme', instanceId: newId(), spec: spec(['sleep', '30']) });
    const state = await readAll(await runtime.capture(source.instanceId));
    const forkedFrom = { sessionId: 'src', checkpointId: 'cp-1' };
    const forks = await Promise.all(
      ['a', 'b'].map((s) =>
        runtime.restore({
          sessionId: `fork-${s}@acme`,
          instanceId: newId(),
          spec: spec(['sleep', '30']),
          state: Readable.from([state]),
          forkedFrom,
        }),
      ),
    );
    const envs = await Promise.all([source, ...forks].map(async (i) => (await environOf(i.pid!)).env));
    expect(envs[0]).toMatchObject({ DS_SESSION_ID: 'src', DS_TENANT: 'acme' });
    expect(envs[0]).not.toHaveProperty('DS_FORKED_FROM_SESSION');
    for (const [i, s] of ['a', 'b'].entries()) {
      expect(envs[i + 1]).toMatchObject({
        DS_SESSION_ID: `fork-${s}`,
        DS_TENANT: 'acme',
        DS_FORKED_FROM_SESSION: 'src',
        DS_FORKED_FROM_CHECKPOINT: 'cp-1',
      });
    }
    expect(new Set(envs.map((e) => e.DS_SEED)).size).toBe(3);
  });

  test('an allow-list that would let worker variables through is refused', () => {
    for (const envAllow of [['PATH', 'DS_*'], ['*'], ['TEMPORAL_API_KEY'], ['D*']]) {
      expect(() => newRuntime({ envAllow })).toThrow(RuntimeFailedError);
    }
    expect(() => newRuntime({ envAllow: ['PATH', 'DS_*'] })).toThrow(
      "workspace environment allow-list: DS_* would pass the worker's own variables (DS_*, TEMPORAL_*) to sessions",
    );
  });

  test('spec.env may not set DS_ or TEMPORAL_ variables: start and restore refuse, leaving nothing behind', async () => {
    const rootDir = newRootDir();
    const runtime = newRuntime({ rootDir });
    const env = { DS_MASTER_KEYS: 'k1:forged', TEMPORAL_ADDRESS: 'elsewhere:7233', FINE: 'yes' };
    await expect(
      runtime.start({ sessionId: 's', instanceId: newId(), spec: spec(['sleep', '30'], { env }) }),
    ).rejects.toThrow(
      new RuntimeFailedError(
        "spec.env may not set DS_MASTER_KEYS, TEMPORAL_ADDRESS: DS_* and TEMPORAL_* variables are the worker's own",
      ),
    );
    const state = Readable.from([Buffer.alloc(1024)]);
    await expect(
      runtime.restore({ sessionId: 's', instanceId: newId(), spec: spec(['sleep', '30'], { env }), state }),
    ).rejects.toThrow(RuntimeFailedError);
    expect(state.destroyed).toBe(true);
    expect(await leftIn(rootDir)).toEqual([]);
  });
});

/** Runs `sh -c script` in a new instance and waits for it to exit 0. */
async function runToEnd(
  runtime: WorkspaceRuntime,
  sessionId: string,
  script: string,
  extra: Partial<WorkspaceRuntimeSpec> = {},
): Promise<RuntimeInstanceInfo> {
  const info = await runtime.start({ sessionId, instanceId: newId(), spec: spec(['sh', '-c', script], extra) });
  expect(await runtime.waitForExit(info.instanceId)).toEqual({ exitCode: 0, signal: null, requested: false });
  return info;
}

(asRoot ? describe : describe.skip)(`commands run as ${TEST_USER} (needs a Linux worker run as root)`, () => {
  let user: { uid: number; gid: number; home: string; shell: string };
  let keyDir: string;
  let snapshotDir: string;

  beforeAll(async () => {
    const entry = (): string => execFileSync('getent', ['passwd', TEST_USER], { encoding: 'utf8' });
    try {
      entry();
    } catch {
      execFileSync('useradd', ['--system', '--no-create-home', TEST_USER]);
    }
    const [, , uid, gid, , home, shell] = entry().trim().split(':');
    user = { uid: Number(uid), gid: Number(gid), home: home!, shell: shell! };

    // As a worker keeps them: the key directory and the snapshot store, its own and no one else's.
    keyDir = path.join(tmp, 'keys');
    await fsp.mkdir(keyDir, { mode: 0o700 });
    await fsp.writeFile(path.join(keyDir, 'k1.key'), 'KEY-BYTES', { mode: 0o600 });
    snapshotDir = path.join(tmp, 'snapshots');
    await fsp.mkdir(snapshotDir, { mode: 0o700 });
    await fsp.writeFile(path.join(snapshotDir, 'manifest'), 'MANIFEST-BYTES');
  });

  test("reads of the keys, the snapshots, the worker's environment and other instances fail; its own workspace is writable", async () => {
    const runtime = newRuntime({ user: TEST_USER });
    const other = await runtime.start({
      sessionId: 'other',
      instanceId: newId(),
      spec: spec(['sh', '-c', 'echo other-output; sleep 30'], { files: { 'secret.txt': 'OTHER-SESSION-BYTES' } }),
    });
    const targets = {
      'the key file': path.join(keyDir, 'k1.key'),
      'the key directory': keyDir,
      'a snapshot file': path.join(snapshotDir, 'manifest'),
      'the snapshot directory': snapshotDir,
      'the worker environment': `/proc/${process.pid}/environ`,
      'the instances of another session': path.dirname(other.location),
      'the output of another session': other.output!,
    };
    // Each target is read (a file) or listed (a directory); whatever comes out lands in leaked.txt.
    const script = [
      'id -u > uid.txt',
      ...Object.entries(targets).map(
        ([what, target]) =>
          `if { if [ -d '${target}' ]; then ls -a '${target}'; else cat '${target}'; fi; } >> leaked.txt 2>/dev/null; ` +
          `then echo 'read ${what}'; else echo 'denied ${what}'; fi >> report.txt`,
      ),
      'echo mine > own.txt',
    ].join('\n');
    const dir = (await runToEnd(runtime, 'mine', script)).location;

    expect(await fsp.readFile(path.join(dir, 'uid.txt'), 'utf8')).toBe(`${user.uid}\n`);
    expect((await fsp.readFile(path.join(dir, 'report.txt'), 'utf8')).trim().split('\n')).toEqual(
      Object.keys(targets).map((what) => `denied ${what}`),
    );
    const leaked = await fsp.readFile(path.join(dir, 'leaked.txt'), 'utf8');
    for (const bytes of ['KEY-BYTES', 'k1.key', 'MANIFEST-BYTES', 'DS_', other.instanceId, 'other-output']) {
      expect(leaked).not.toContain(bytes);
    }
    expect(await fsp.readFile(path.join(dir, 'own.txt'), 'utf8')).toBe('mine\n');
    expect((await fsp.stat(dir)).uid).toBe(user.uid);
  });

  test("its identity variables are the user's, not the worker's", async () => {
    const runtime = newRuntime({ user: TEST_USER });
    const info = await runtime.start({ sessionId: 's', instanceId: newId(), spec: spec(['sleep', '30']) });
    const { env } = await environOf(info.pid!);
    expect(env).toMatchObject({ USER: TEST_USER, LOGNAME: TEST_USER, HOME: user.home, SHELL: user.shell });
  });

  test('seed files, and everything a restore writes, belong to the user; capture and restore still work', async () => {
    const runtime = newRuntime({ user: TEST_USER });
    const first = await runToEnd(
      runtime,
      's',
      'echo mine >> notes/own.txt && mkdir -p sub && echo deeper > sub/file.txt && ln -s sub/file.txt link',
      { files: { 'notes/own.txt': 'seeded\n' } },
    );
    const owners = async (dir: string): Promise<Record<string, number>> => {
      const names = ['', 'notes', 'notes/own.txt', 'sub', 'sub/file.txt', 'link'];
      const stats = await Promise.all(names.map((name) => fsp.lstat(path.join(dir, name))));
      return Object.fromEntries(names.map((name, i) => [name || '.', stats[i]!.uid]));
    };
    const everyone = (uid: number) => ({
      '.': uid,
      notes: uid,
      'notes/own.txt': uid,
      sub: uid,
      'sub/file.txt': uid,
      link: uid,
    });
    expect(await owners(first.location)).toEqual(everyone(user.uid));

    // The worker, as root, reads the user's files.
    const archive = await readAll(await runtime.capture(first.instanceId));

    const restored = await runtime.restore({
      sessionId: 's',
      instanceId: newId(),
      spec: spec(['sleep', '30']),
      state: Readable.from([archive]),
      checkpointId: 'cp-1',
    });
    expect(await owners(restored.location)).toEqual(everyone(user.uid));
    expect(await fsp.readFile(path.join(restored.location, 'notes/own.txt'), 'utf8')).toBe('seeded\nmine\n');
    // Handing the tree over came before indexing it: the next capture names the restored records unchanged.
    const captured = await runtime.captureState(restored.instanceId);
    expect(captured.base).toBe('cp-1');
    // The pre-copy's draft is the part told against the base (the frozen pass names the draft's bytes).
    const pieces = [];
    for await (const piece of captured.precopy ?? captured.pieces) pieces.push(piece);
    captured.close();
    expect(pieces.filter(isUnchangedRange).reduce((n, range) => n + range.length, 0)).toBe(archive.length);

    // And the restored command can write its workspace as the user.
    const again = await runtime.restore({
      sessionId: 's',
      instanceId: newId(),
      spec: spec(['sh', '-c', 'echo again >> notes/own.txt']),
      state: Readable.from([archive]),
    });
    expect(await runtime.waitForExit(again.instanceId)).toEqual({ exitCode: 0, signal: null, requested: false });
    expect(await fsp.readFile(path.join(again.location, 'notes/own.txt'), 'utf8')).toBe('seeded\nmine\nagain\n');
  });

  test('root, an unknown user, and a user given as uid:gid', async () => {
    await expect(
      newRuntime({ user: { uid: 0, gid: 0 } }).start({ sessionId: 's', instanceId: newId(), spec: spec(['true']) }),
    ).rejects.toThrow('workspace uid 0 is root: expected an unprivileged user');
    const unknown = newRuntime({ user: 'no-such-user-xyz' });
    await expect(unknown.start({ sessionId: 's', instanceId: newId(), spec: spec(['true']) })).rejects.toThrow(
      'workspace user no-such-user-xyz is not known on this host',
    );
    const byIds = newRuntime({ user: { uid: user.uid, gid: user.gid } });
    const dir = (await runToEnd(byIds, 's', 'id -u > uid.txt; id -g >> uid.txt')).location;
    expect(await fsp.readFile(path.join(dir, 'uid.txt'), 'utf8')).toBe(`${user.uid}\n${user.gid}\n`);
  });
});
