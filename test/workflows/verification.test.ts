import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { sessionWorkflowId } from '../../src/api';
import { InvalidInputError, SnapshotNotFoundError } from '../../src/client';
import { eventually, runningStatus, startTestSystem, type TestSystem } from '../helpers/temporal';

// Verification reads checkpoints back through a worker, on a real Temporal server and the encrypted store.
let sys: TestSystem;
beforeAll(async () => {
  sys = await startTestSystem();
});
afterAll(async () => {
  await sys?.close();
});

const newId = (prefix: string) => `${prefix}-${crypto.randomUUID().slice(0, 8)}`;

function packFiles(sessionId: string): string[] {
  const dir = path.join(sys.dir, 'snapshots', sessionId, 'packs');
  return fs.readdirSync(dir).map((n) => path.join(dir, n));
}

test('with backgroundVerify, every checkpoint is read back after it is taken and marked in the timeline', async () => {
  const sessionId = newId('bgverify');
  const session = await sys.sessions.start({
    sessionId,
    runtime: { kind: 'memory', initialState: 'x'.repeat(200_000) },
    backgroundVerify: true,
  });
  await runningStatus(session);
  const first = await session.checkpoint({ label: 'one' });
  const paused = await session.pause();

  const verified = await eventually(async () => {
    const entries = (await session.timeline()).filter((e) => e.kind === 'verified');
    return entries.length === 2 ? entries : undefined;
  });
  expect(verified.map((e) => [e.checkpointId, e.status, e.cause])).toEqual([
    [first.checkpointId, 'ok', 'background'],
    [paused.checkpointId, 'ok', 'background'],
  ]);
  expect((await session.status()).lastVerification).toMatchObject({ checkpointId: paused.checkpointId, status: 'ok' });
  // What the Web UI shows as the workflow's current details.
  const metadata = await sys.client.workflow
    .getHandle(sessionWorkflowId(sessionId))
    .query<{ currentDetails?: string }>('__temporal_workflow_metadata');
  expect(metadata.currentDetails).toContain(`last verification: #${paused.index} \`${paused.checkpointId}\` ok`);
  await session.stop();
});

test('verify() reads every checkpoint through a worker and says which ones are damaged; it changes nothing', async () => {
  const sessionId = newId('verify');
  const session = await sys.sessions.start({ sessionId, runtime: { kind: 'memory', initialState: 'state one' } });
  await runningStatus(session);
  const one = await session.checkpoint();
  const two = await session.checkpoint();
  const three = await session.pause();
  expect((await session.verify()).map((r) => r.status)).toEqual(['ok', 'ok', 'ok']);

  // Damage the store behind the session's back: one byte of the newest pack, and the oldest checkpoint's manifest.
  // The state did not change between checkpoints, so two and three share their one chunk: both are damaged.
  const packs = packFiles(sessionId);
  const newest = packs.sort((a, b) => fs.statSync(a).mtimeMs - fs.statSync(b).mtimeMs).at(-1)!;
  const bytes = fs.readFileSync(newest);
  bytes[bytes.length - 40] = bytes[bytes.length - 40]! ^ 0xff;
  fs.writeFileSync(newest, bytes);
  fs.rmSync(path.join(sys.dir, 'snapshots', sessionId, `${one.checkpointId}.manifest`));

  const report = await session.verify();
  expect(report.map((r) => [r.checkpointId, r.status])).toEqual([
    [one.checkpointId, 'missing'],
    [two.checkpointId, 'tampered'],
    [three.checkpointId, 'tampered'],
  ]);
  expect(report[2]!.detail).toMatch(/^chunk [0-9a-f"]/);
  expect((await session.verify({ checkpointId: three.checkpointId })).map((r) => r.status)).toEqual(['tampered']);

  const status = await session.status();
  expect(status.phase).toBe('paused');
  expect(status.checkpointCount).toBe(3);
  expect(status.lastVerification).toMatchObject({ checkpointId: three.checkpointId, status: 'tampered' });
  const kinds = (await session.timeline()).map((e) => e.kind);
  expect(kinds.filter((k) => k === 'verified')).toHaveLength(7);
  await session.stop();
});

test('verify() of a checkpoint the session does not have, or with bad input, is refused and records nothing', async () => {
  const sessionId = newId('verifybad');
  const session = await sys.sessions.start({ sessionId, runtime: { kind: 'memory' } });
  await runningStatus(session);
  await session.checkpoint();
  await expect(session.verify({ checkpointId: '000009-deadbeef' })).rejects.toBeInstanceOf(SnapshotNotFoundError);
  await expect(session.verify({ checkpointId: '../x' })).rejects.toBeInstanceOf(InvalidInputError);
  expect((await session.timeline()).some((e) => e.kind === 'verified')).toBe(false);
  expect((await session.status()).lastVerification).toBeNull();
  await session.stop();
});
