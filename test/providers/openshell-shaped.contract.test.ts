import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as fsp from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import { Readable } from 'node:stream';
import { extract } from 'tar-stream';
import { readAll } from '../helpers/checkpoints';
import { CaseRuntime, startSandboxHost, type SandboxHostProcess } from '../helpers/sandbox-host';
import { eventually } from '../helpers/temporal';
import { runSessionRuntimeContract } from '../runtimes/runtime.contract';

/*
 * A provider shaped like an OpenShell gateway (docs/openshell.md): each sandbox's files are its home, `/sandbox`, and
 * an export is a tar of that directory's contents, as `openshell sandbox download` takes one (`tar cf - -C <dir> .`);
 * its sandboxes keep running while they are exported. The reference host plays it: each sandbox's directory is the
 * command's working directory (its `/sandbox`), and DS_SANDBOX_HOST_RUNS_WHILE_EXPORTING=true.
 */

let tmp: string;
let gateway: SandboxHostProcess;
let other: SandboxHostProcess;

const SHAPED = { DS_SANDBOX_HOST_RUNS_WHILE_EXPORTING: 'true' };

beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'openshell-shaped-'));
  [gateway, other] = await Promise.all([
    startSandboxHost(path.join(tmp, 'gateway'), SHAPED),
    startSandboxHost(path.join(tmp, 'other'), SHAPED),
  ]);
});

afterAll(async () => {
  await Promise.all([gateway?.stop(), other?.stop()]);
  await fsp.rm(tmp, { recursive: true, force: true });
});

runSessionRuntimeContract({
  name: 'RemoteRuntime over an OpenShell-shaped provider (sandboxes run while exported)',
  newRuntime: () => new CaseRuntime({ url: gateway.url, token: gateway.token }),
  release: (runtime) => runtime.release(),
  runningSpec: () => ({
    kind: 'remote',
    command: ['sleep', '30'],
    files: { 'state.txt': 'state' },
    stopGraceMs: 2_000,
  }),
  capabilities: {
    captureState: false,
    endsBySelf: () => ({ kind: 'remote', command: ['sh', '-c', 'sleep 0.1; exit 3'] }),
  },
});

/** The names of a tar's entries and the digest of each file's content. */
async function entriesOf(tar: Buffer): Promise<Map<string, string>> {
  const entries = new Map<string, string>();
  const reader = extract();
  reader.on('entry', (header, stream, next) => {
    const hash = createHash('sha256');
    stream.on('data', (chunk) => void hash.update(chunk as Buffer));
    stream.on('end', () => {
      entries.set(header.name, hash.digest('hex'));
      next();
    });
  });
  const done = new Promise<void>((resolve, reject) => reader.on('finish', resolve).on('error', reject));
  Readable.from([tar]).pipe(reader);
  await done;
  return entries;
}

describe('an OpenShell-shaped provider', () => {
  let gatewayRuntime: CaseRuntime;
  let otherRuntime: CaseRuntime;

  beforeEach(() => {
    gatewayRuntime = new CaseRuntime({ url: gateway.url, token: gateway.token });
    otherRuntime = new CaseRuntime({ url: other.url, token: other.token });
  });

  afterEach(async () => {
    await Promise.all([gatewayRuntime.release(), otherRuntime.release()]);
  });

  test('says it exports files while its sandboxes run', async () => {
    const answer = await fetch(`${gateway.url}/v1/capabilities`, {
      headers: { authorization: `Bearer ${gateway.token}` },
    });
    expect(await answer.json()).toMatchObject({
      exportFormats: ['tar/1'],
      captures: { filesystem: true, processMemory: false },
      runsWhileExporting: true,
    });
  });

  test('a sandbox runs on, the same process, while it is exported; its export restores on another host', async () => {
    const size = 64 * 1024 * 1024;
    // Writes into its home (its working directory, the sandbox's `/sandbox`) and counts on for as long as it runs.
    const script =
      `mkdir notes && echo hello > notes/a.txt && head -c ${size} /dev/urandom > big.bin && ` +
      'i=0; while :; do i=$((i+1)); echo $i > count; sleep 0.02; done';
    const sessionId = 'openshell-session';
    const info = await gatewayRuntime.start({
      sessionId,
      instanceId: 'sandbox-writer',
      spec: { kind: 'remote', command: ['sh', '-c', script], stopGraceMs: 1_000 },
    });
    gatewayRuntime.made.add(info.instanceId);
    const home = path.join(gateway.rootDir, sessionId, info.instanceId);
    const count = () => Number(fs.readFileSync(path.join(home, 'count'), 'utf8').trim() || 0);
    await eventually(() => fs.existsSync(path.join(home, 'count')) && count() > 0);

    const exported = await gatewayRuntime.capture(info.instanceId);
    const first: Buffer[] = [];
    const firstChunk = new Promise<void>((resolve) =>
      exported.once('data', (chunk: Buffer) => {
        first.push(chunk);
        exported.pause();
        resolve();
      }),
    );
    await firstChunk;
    // The export is under way and held: 64 MiB cannot all sit in the sockets' buffers. The sandbox counts on.
    const during = count();
    await eventually(() => count() > during + 5);
    expect((await gatewayRuntime.describe(info.instanceId))?.pid).toBe(info.pid);

    const tar = Buffer.concat([...first, await readAll(exported)]);
    const after = count();
    await eventually(() => count() > after + 5);
    expect(await gatewayRuntime.describe(info.instanceId)).toMatchObject({ pid: info.pid, running: true });

    // A tar of the sandbox's home, named as the sandbox sees it (as `tar -C /sandbox .` would name it).
    const entries = await entriesOf(tar);
    expect([...entries.keys()].sort()).toEqual(['big.bin', 'count', 'notes', 'notes/a.txt']);
    expect(entries.get('notes/a.txt')).toBe(createHash('sha256').update('hello\n').digest('hex'));

    // Restored into another host process: the same files, exactly, and a process that runs on them.
    const restored = await otherRuntime.restore({
      sessionId,
      instanceId: 'sandbox-restored',
      spec: {
        kind: 'remote',
        command: ['sh', '-c', 'cat notes/a.txt > seen.tmp && mv seen.tmp seen; sleep 30'],
        stopGraceMs: 1_000,
      },
      state: Readable.from([tar]),
    });
    otherRuntime.made.add(restored.instanceId);
    const restoredHome = path.join(other.rootDir, sessionId, restored.instanceId);
    await eventually(() => fs.existsSync(path.join(restoredHome, 'seen')));
    expect(fs.readFileSync(path.join(restoredHome, 'seen'), 'utf8')).toBe('hello\n');
    const again = await entriesOf(await readAll(await otherRuntime.capture(restored.instanceId)));
    again.delete('seen');
    expect(again).toEqual(entries);
  });

  test('an export abandoned half way leaves no copy behind, and the sandbox runs on', async () => {
    const sessionId = 'openshell-session';
    const info = await gatewayRuntime.start({
      sessionId,
      instanceId: 'sandbox-abandoned',
      spec: {
        kind: 'remote',
        command: ['sh', '-c', 'head -c 67108864 /dev/urandom > big.bin && touch ready && sleep 30'],
        stopGraceMs: 1_000,
      },
    });
    gatewayRuntime.made.add(info.instanceId);
    const home = path.join(gateway.rootDir, sessionId, info.instanceId);
    await eventually(() => fs.existsSync(path.join(home, 'ready')));
    const copies = path.join(gateway.rootDir, '.exports');
    const exported = await gatewayRuntime.capture(info.instanceId);
    await new Promise((resolve) => exported.once('readable', resolve));
    expect(fs.readdirSync(copies)).toHaveLength(1);
    // The worker that read it went away.
    exported.destroy();
    await eventually(() => fs.readdirSync(copies).length === 0);
    expect(await gatewayRuntime.describe(info.instanceId)).toMatchObject({ pid: info.pid, running: true });
  });
});
