import { execFile } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { runningStatus, startTestSystem, type TestSystem } from '../helpers/temporal';

const BIN = path.join(__dirname, '..', '..', 'bin', 'durable-sessions.js');

// Two deployments: each its own task queue, store and master key; the CLI of each sees only its own.
let here: TestSystem;
let there: TestSystem;
beforeAll(async () => {
  here = await startTestSystem();
  there = await startTestSystem();
});
afterAll(async () => {
  await here?.close();
  await there?.close();
});

interface CliRun {
  code: number;
  stdout: string;
  stderr: string;
}

/** The real CLI as a separate process, configured as a worker host of `sys` is. */
function cli(sys: TestSystem, ...args: string[]): Promise<CliRun> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [BIN, ...args],
      {
        cwd: sys.dir,
        env: {
          ...process.env,
          TEMPORAL_ADDRESS: process.env.DS_TEST_TEMPORAL_ADDRESS,
          DS_TASK_QUEUE: sys.taskQueue,
          DS_SNAPSHOT_DIR: path.join(sys.dir, 'snapshots'),
          DS_MASTER_KEYS: sys.masterKeys,
          // The test systems' payloads are plaintext.
          DS_PAYLOAD_ENCRYPTION: 'none',
        },
      },
      (error, stdout, stderr) => resolve({ code: error ? Number(error.code ?? 1) : 0, stdout, stderr }),
    );
  });
}

test('keygen, export to the public key, import with the private key into another deployment', async () => {
  const sessionId = `cli-export-${crypto.randomUUID().slice(0, 8)}`;
  const session = await here.sessions.start({ sessionId, runtime: { kind: 'memory' } });
  const { runtime } = await runningStatus(session);
  const state = crypto.randomBytes(2 * 1024 * 1024);
  here.memory.write(runtime.instanceId, state);
  await session.pause({});

  const keys = path.join(there.dir, 'receiver');
  const made = await cli(there, 'keygen', '--out', keys, '--json');
  expect(made.code).toBe(0);
  expect(fs.statSync(`${keys}.key`).mode & 0o777).toBe(0o600);
  // A second keygen never overwrites the key that opens what was sealed to it.
  const again = await cli(there, 'keygen', '--out', keys, '--json');
  expect(again.code).toBe(1);
  expect(JSON.parse(again.stdout)).toMatchObject({ error: { message: expect.stringMatching(/exists already/) } });

  const archive = path.join(here.dir, 'moved.dsa');
  const usage = await cli(here, 'export', sessionId, '--out', archive);
  expect(usage.code).toBe(2);
  expect(usage.stderr).toMatch(/export needs one of --to-public-key and --passphrase-file/);
  const exported = await cli(here, 'export', sessionId, '--to-public-key', `${keys}.pub`, '--out', archive, '--json');
  expect(exported.stderr).toBe('');
  expect(JSON.parse(exported.stdout)).toMatchObject({
    sessionId,
    out: archive,
    bytes: fs.statSync(archive).size,
    seal: 'x25519-hkdf-sha256',
  });

  const as = `${sessionId}-moved`;
  const imported = await cli(there, 'import', archive, '--private-key-file', `${keys}.key`, '--as', as, '--json');
  expect(imported.stderr).toBe('');
  expect(JSON.parse(imported.stdout)).toMatchObject({ sessionId: as, importedFrom: { sessionId } });
  const moved = await runningStatus(there.sessions.get(as), 30_000);
  expect(there.memory.read(moved.runtime.instanceId).equals(state)).toBe(true);

  // A damaged archive: a typed error, exit code 1, and no session.
  const bytes = fs.readFileSync(archive);
  bytes[bytes.length - 40]! ^= 0xff;
  const damaged = path.join(here.dir, 'damaged.dsa');
  fs.writeFileSync(damaged, bytes);
  const refused = await cli(there, 'import', damaged, '--private-key-file', `${keys}.key`, '--as', `${as}-2`, '--json');
  expect(refused.code).toBe(1);
  expect(JSON.parse(refused.stdout)).toMatchObject({ error: { code: 'SnapshotTampered' } });
  expect(await there.store.list(`${as}-2`)).toEqual([]);

  await there.sessions.get(as).stop({ checkpoint: false });
  await session.stop({ checkpoint: false });

  // A checkpoint that no longer verifies in the store cuts the export: a typed error, and no file at --out.
  const packs = path.join(here.dir, 'snapshots', sessionId, 'packs');
  const pack = fs
    .readdirSync(packs)
    .map((name) => path.join(packs, name))
    .sort((a, b) => fs.statSync(b).size - fs.statSync(a).size)[0]!;
  const packBytes = fs.readFileSync(pack);
  packBytes[Math.floor(packBytes.length / 2)]! ^= 0x01;
  fs.writeFileSync(pack, packBytes);
  const outDir = fs.mkdtempSync(path.join(here.dir, 'out-'));
  const passphraseFile = path.join(here.dir, 'pass.txt');
  fs.writeFileSync(passphraseFile, 'a passphrase\n');
  const cut = await cli(
    here,
    'export',
    sessionId,
    '--passphrase-file',
    passphraseFile,
    '--out',
    `${outDir}/x.dsa`,
    '--json',
  );
  expect(cut.code).toBe(1);
  expect(JSON.parse(cut.stdout)).toMatchObject({ error: { code: 'SnapshotTampered' } });
  expect(fs.readdirSync(outDir)).toEqual([]);
});
