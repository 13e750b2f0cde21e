import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { Readable } from 'node:stream';
import { sessionWorkflowId } from '../../src/api';
import { RestoreFailedError, SnapshotNotFoundError } from '../../src/client';
import { FlakyStore } from '../helpers/flaky-store';
import { eventually, startTestSystem, type TestSystem } from '../helpers/temporal';

let sys: TestSystem;
let flaky: FlakyStore | undefined;
beforeAll(async () => {
  sys = await startTestSystem({
    store: (real) => {
      flaky = new FlakyStore(real, 0);
      return flaky;
    },
  });
});
afterAll(async () => {
  await sys?.close();
});

function newId(prefix: string) {
  return `${prefix}-${crypto.randomUUID().slice(0, 8)}`;
}

async function startMemorySession(sessionId: string, initialState: string) {
  const session = await sys.sessions.start({ sessionId, runtime: { kind: 'memory', initialState } });
  await eventually(async () => (await session.status()).phase === 'running');
  return session;
}

async function memoryStateOf(session: Awaited<ReturnType<typeof startMemorySession>>): Promise<string> {
  const { runtime } = await session.status();
  return sys.memory.read(runtime!.instanceId).toString('utf8');
}

/** The checkpoint's sealed manifest: altering it is tampering, removing it makes the checkpoint missing. */
function manifestFile(sessionId: string, checkpointId: string) {
  return path.join(sys.dir, 'snapshots', sessionId, `${checkpointId}.manifest`);
}

function flipByte(file: string) {
  const bytes = fs.readFileSync(file);
  bytes[Math.floor(bytes.length / 2)]! ^= 0xff;
  fs.writeFileSync(file, bytes);
}

test('transient store failures during restore are retried with backoff, and the retries are in history', async () => {
  const sessionId = newId('flaky');
  const session = await startMemorySession(sessionId, 'state before pause');
  await session.pause();
  flaky!.opens = 0;
  flaky!.failures = 2;

  const resuming = session.resume();
  // While it retries, `progress` shows the attempt and the failure it is recovering from.
  const retrying = await eventually(async () => {
    const io = await session.progress();
    return io.find((a) => a.activity === 'restoreCheckpoint' && a.attempt >= 2);
  });
  expect(retrying.lastFailure).toContain('snapshot store unavailable');
  const resumed = await resuming;
  expect(await memoryStateOf(session)).toBe('state before pause');
  expect(resumed.fallbackFrom).toBeUndefined();
  expect(flaky!.opens).toBe(3);

  const history = await sys.client.workflow.getHandle(sessionWorkflowId(sessionId)).fetchHistory();
  const scheduled = history.events!.filter(
    (e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'restoreCheckpoint',
  );
  expect(scheduled).toHaveLength(1);
  const started = history.events!.find(
    (e) => e.activityTaskStartedEventAttributes?.scheduledEventId?.toString() === scheduled[0]!.eventId?.toString(),
  );
  // Third attempt succeeded; the last failure it overcame is recorded with it.
  expect(started?.activityTaskStartedEventAttributes?.attempt).toBe(3);
  expect(started?.activityTaskStartedEventAttributes?.lastFailure?.message).toContain('snapshot store unavailable');
  flaky!.failures = 0;
});

test('a tampered newest checkpoint falls back to the newest older one that verifies, and says so', async () => {
  const sessionId = newId('corrupt');
  const session = await startMemorySession(sessionId, 'v1');
  const cp1 = await session.checkpoint({ label: 'good' });
  const { runtime } = await session.status();
  sys.memory.write(runtime!.instanceId, 'v2');
  const cp2 = await session.pause();
  flipByte(manifestFile(sessionId, cp2.checkpointId));

  const resumed = await session.resume();
  expect(resumed.restoredFrom.checkpointId).toBe(cp1.checkpointId);
  expect(resumed.fallbackFrom).toEqual([
    { checkpointId: cp2.checkpointId, reason: expect.stringMatching(/^SnapshotTampered: /) },
  ]);
  expect(await memoryStateOf(session)).toBe('v1');

  const status = await session.status();
  expect(status.phase).toBe('running');
  expect(status.head?.checkpointId).toBe(cp1.checkpointId);
  expect(status.lastRestore).toMatchObject({ checkpointId: cp1.checkpointId, fallbackFrom: [cp2.checkpointId] });
  const timeline = await session.timeline();
  expect(timeline.slice(-2)).toEqual([
    expect.objectContaining({ kind: 'fallback', fromCheckpointId: cp2.checkpointId, toCheckpointId: cp1.checkpointId }),
    expect.objectContaining({ kind: 'restored', checkpointId: cp1.checkpointId, cause: 'resume' }),
  ]);

  // The next checkpoint descends from what is running now, not from the bad one.
  const cp3 = await session.checkpoint();
  expect(cp3.parentId).toBe(cp1.checkpointId);
  await session.stop({ checkpoint: false });
});

test('a checkpoint replaced in the store by a valid one of other content is refused: history remembers', async () => {
  const sessionId = newId('planted');
  const session = await startMemorySession(sessionId, 'genuine');
  const cp1 = await session.checkpoint();
  const cp2 = await session.pause();
  // Someone with the keys rewrites cp2 under the same id: it verifies on its own, but is not what was recorded.
  await sys.store.delete(sessionId, cp2.checkpointId);
  await sys.store.write(
    { ...cp2, runtime: { kind: 'memory', version: '1' }, parentId: cp1.checkpointId },
    Readable.from([Buffer.from('planted state')]),
  );
  const resumed = await session.resume();
  expect(resumed.restoredFrom.checkpointId).toBe(cp1.checkpointId);
  expect(resumed.fallbackFrom?.[0]?.reason).toMatch(/^SnapshotTampered: .*is not the one the session recorded/);
  expect(await memoryStateOf(session)).toBe('genuine');
  await session.stop({ checkpoint: false });
});

test('a missing checkpoint is as permanent as a corrupt one: fallback, no retries', async () => {
  const sessionId = newId('missing');
  const session = await startMemorySession(sessionId, 'kept');
  const cp1 = await session.checkpoint();
  const cp2 = await session.pause();
  fs.rmSync(manifestFile(sessionId, cp2.checkpointId));

  const resumed = await session.resume();
  expect(resumed.restoredFrom.checkpointId).toBe(cp1.checkpointId);
  expect(resumed.fallbackFrom?.[0]?.reason).toMatch(/^SnapshotNotFound: /);
  await session.stop({ checkpoint: false });
});

test('when no checkpoint verifies the session waits, paused, with the reason: never a fresh start', async () => {
  const sessionId = newId('allbad');
  const session = await startMemorySession(sessionId, 'precious');
  const cp1 = await session.checkpoint();
  const cp2 = await session.pause();
  const originals = [cp1, cp2].map((c) => {
    const file = manifestFile(sessionId, c.checkpointId);
    return { file, bytes: fs.readFileSync(file) };
  });
  for (const { file } of originals) flipByte(file);

  const error = await session.resume().catch((e: unknown) => e);
  expect(error).toBeInstanceOf(RestoreFailedError);
  expect((error as RestoreFailedError).message).toContain(cp1.checkpointId);
  expect((error as RestoreFailedError).message).toContain(cp2.checkpointId);

  // The store might still be repaired: the session is not failed for good.
  const status = await session.status();
  expect(status.phase).toBe('paused');
  expect(status.runtime).toBeNull();
  expect(status.failure).toMatchObject({ type: 'RestoreFailed' });
  const kinds = (await session.timeline()).map((e) => e.kind);
  expect(kinds).toEqual(['checkpoint', 'checkpoint', 'fallback', 'fallback', 'restore-failed']);

  // An operator puts the files back (from a backup, say): the next resume restores the newest state.
  for (const { file, bytes } of originals) fs.writeFileSync(file, bytes);
  const resumed = await session.resume();
  expect(resumed.restoredFrom.checkpointId).toBe(cp2.checkpointId);
  expect(await memoryStateOf(session)).toBe('precious');
  expect((await session.status()).failure).toBeNull();
  await session.stop({ checkpoint: false });
});

test('resume from an explicit older checkpoint restores exactly that state', async () => {
  const sessionId = newId('pick');
  const session = await startMemorySession(sessionId, 'one');
  const cp1 = await session.checkpoint({ label: 'one' });
  sys.memory.write((await session.status()).runtime!.instanceId, 'two');
  await session.pause();
  const resumed = await session.resume({ checkpointId: cp1.checkpointId });
  expect(resumed.restoredFrom.checkpointId).toBe(cp1.checkpointId);
  expect(await memoryStateOf(session)).toBe('one');
  await session.stop({ checkpoint: false });
});

test('a retention policy deletes old checkpoints from the store, never the head or labelled ones', async () => {
  const sessionId = newId('retention');
  const session = await sys.sessions.start({
    sessionId,
    runtime: { kind: 'memory', initialState: 'x' },
    retention: { keepLast: 2 },
  });
  await eventually(async () => (await session.status()).phase === 'running');
  const cp1 = await session.checkpoint();
  const cp2 = await session.checkpoint({ label: 'keep me' });
  const cp3 = await session.checkpoint();
  const cp4 = await session.checkpoint();
  const cp5 = await session.checkpoint();

  const deleted = (await session.timeline()).flatMap((e) => (e.kind === 'checkpoint-deleted' ? [e.checkpointId] : []));
  expect(deleted).toEqual([cp1.checkpointId, cp3.checkpointId]);
  expect((await session.status()).checkpointCount).toBe(3);
  await expect(sys.store.readManifest(sessionId, cp1.checkpointId)).rejects.toMatchObject({ code: 'SnapshotNotFound' });
  for (const kept of [cp2, cp4, cp5])
    await expect(sys.store.verify(sessionId, kept.checkpointId)).resolves.toBeDefined();

  await session.pause();
  await expect(session.resume({ checkpointId: cp3.checkpointId })).rejects.toBeInstanceOf(SnapshotNotFoundError);
  const resumed = await session.resume({ checkpointId: cp2.checkpointId });
  expect(resumed.restoredFrom.checkpointId).toBe(cp2.checkpointId);
  await session.stop({ checkpoint: false });
});
