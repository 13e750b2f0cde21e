import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { extract } from 'tar-stream';
import { sessionWorkflowId, type RuntimeInstanceRef } from '../../src/api';
import { SessionClosedError, SessionRuntimeError } from '../../src/client';
import { eventually, runningStatus, startTestSystem, type TestSystem } from '../helpers/temporal';

/** A command that counts forever, continuing from the number in ./count, writing it atomically. */
const COUNTER = [
  'sh',
  '-c',
  'n=$(cat count 2>/dev/null || echo 0); while true; do n=$((n+1)); echo $n > count.tmp; mv count.tmp count; sleep 0.05; done',
];

let sys: TestSystem;
beforeAll(async () => {
  sys = await startTestSystem();
});
afterAll(async () => {
  await sys?.close();
});

function readCount(runtime: RuntimeInstanceRef): number {
  return Number(fs.readFileSync(path.join(runtime.location, 'count'), 'utf8'));
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** The files of a stored checkpoint, read back from the snapshot store as a user of the store would. */
async function filesInCheckpoint(sessionId: string, checkpointId: string): Promise<Record<string, string>> {
  const { stream } = await sys.store.open(sessionId, checkpointId);
  const files: Record<string, string> = {};
  const tar = extract();
  tar.on('entry', (header, body, next) => {
    const chunks: Buffer[] = [];
    body.on('data', (c: unknown) => chunks.push(c as Buffer));
    body.on('end', () => {
      if (header.type === 'file') files[header.name.replace(/^\.\//, '')] = Buffer.concat(chunks).toString('utf8');
      next();
    });
  });
  await new Promise<void>((resolve, reject) => {
    tar.on('finish', resolve);
    tar.on('error', reject);
    stream.on('error', reject);
    stream.pipe(tar);
  });
  return files;
}

test('a workspace session lives through checkpoint, pause, resume, checkpoint and stop', async () => {
  const sessionId = `counter-${crypto.randomUUID().slice(0, 8)}`;
  const session = await sys.sessions.start({
    sessionId,
    runtime: { kind: 'workspace', command: COUNTER, files: { 'README.txt': 'seeded' } },
  });

  const running = await runningStatus(session);
  const firstRuntime = running.runtime;
  await eventually(() => fs.existsSync(path.join(firstRuntime.location, 'count')) && readCount(firstRuntime) >= 3);

  const cp1 = await session.checkpoint({ label: 'warm' });
  expect(cp1).toMatchObject({
    sessionId,
    sequence: 1,
    parentId: null,
    trigger: 'manual',
    label: 'warm',
    encryption: 'aes-256-gcm',
  });
  expect(cp1.digest).toMatch(/^sha256:[0-9a-f]{64}$/);

  const cp2 = await session.pause({ reason: 'end of day' });
  expect(cp2).toMatchObject({ sequence: 2, parentId: cp1.checkpointId, trigger: 'pause' });
  const paused = await session.status();
  expect(paused.phase).toBe('paused');
  expect(paused.runtime).toBeNull();
  // The compute is freed: the process is gone and its directory removed.
  expect(isAlive(firstRuntime.pid!)).toBe(false);
  expect(fs.existsSync(firstRuntime.location)).toBe(false);

  const captured = await filesInCheckpoint(sessionId, cp2.checkpointId);
  expect(captured['README.txt']).toBe('seeded');
  const countAtPause = Number(captured['count']);
  expect(countAtPause).toBeGreaterThanOrEqual(3);

  const resumed = await session.resume();
  expect(resumed.restoredFrom.checkpointId).toBe(cp2.checkpointId);
  expect(resumed.fallbackFrom).toBeUndefined();
  const second = resumed.runtime;
  expect(second.instanceId).not.toBe(firstRuntime.instanceId);
  expect(second.location).not.toBe(firstRuntime.location);
  expect(isAlive(second.pid!)).toBe(true);
  // The restored command continues from the restored state: never back to 1.
  const firstSeen = readCount(second);
  expect(firstSeen).toBeGreaterThanOrEqual(countAtPause);
  await eventually(() => readCount(second) > countAtPause + 2);
  expect(fs.readFileSync(path.join(second.location, 'README.txt'), 'utf8')).toBe('seeded');

  const cp3 = await session.checkpoint();
  expect(cp3).toMatchObject({ sequence: 3, parentId: cp2.checkpointId });

  const stopped = await session.stop();
  expect(stopped.phase).toBe('completed');
  expect(stopped.finalCheckpoint).toMatchObject({ sequence: 4, parentId: cp3.checkpointId, trigger: 'stop' });
  expect(isAlive(second.pid!)).toBe(false);
  await expect(session.result()).resolves.toEqual(stopped);

  const timeline = await session.timeline();
  const checkpoints = timeline.flatMap((e) => (e.kind === 'checkpoint' ? [e.checkpoint] : []));
  expect(checkpoints.map((c) => [c.sequence, c.parentId])).toEqual([
    [1, null],
    [2, cp1.checkpointId],
    [3, cp2.checkpointId],
    [4, cp3.checkpointId],
  ]);
  expect(timeline.map((e) => e.kind)).toEqual(['checkpoint', 'checkpoint', 'restored', 'checkpoint', 'checkpoint']);
  const final = await session.status();
  expect(final).toMatchObject({ phase: 'completed', checkpointCount: 4, failure: null });

  // Anything after stop is refused with a typed error.
  await expect(session.checkpoint()).rejects.toBeInstanceOf(SessionClosedError);
  await expect(session.resume()).rejects.toBeInstanceOf(SessionClosedError);

  // Only references travel through history: no payload is anywhere near the state's size.
  const history = await sys.client.workflow.getHandle(sessionWorkflowId(sessionId)).fetchHistory();
  expect(JSON.stringify(history).length).toBeLessThan(200_000);
});

test('a workspace process that exits by itself is recorded: code 0 completes, non-zero fails', async () => {
  const ok = await sys.sessions.start({
    sessionId: `exit0-${crypto.randomUUID().slice(0, 8)}`,
    runtime: { kind: 'workspace', command: ['sh', '-c', 'sleep 0.3; exit 0'], settleMs: 0 },
  });
  const bad = await sys.sessions.start({
    sessionId: `exit3-${crypto.randomUUID().slice(0, 8)}`,
    runtime: { kind: 'workspace', command: ['sh', '-c', 'sleep 0.3; exit 3'], settleMs: 0 },
  });
  await expect(ok.result()).resolves.toEqual({ phase: 'completed', finalCheckpoint: null });
  await expect(bad.result()).rejects.toMatchObject({
    code: 'RuntimeFailed',
    message: 'the runtime process exited with code 3',
  });
  const status = await bad.status();
  expect(status.phase).toBe('failed');
  expect(status.failure).toMatchObject({ type: 'RuntimeFailed', message: 'the runtime process exited with code 3' });
  expect((await bad.timeline()).at(-1)).toMatchObject({ kind: 'runtime-exited', exitCode: 3 });
});

test('a command that cannot start fails the start with the reason, not a retry loop', async () => {
  const sessionId = `nostart-${crypto.randomUUID().slice(0, 8)}`;
  const error = await sys.sessions
    .start({ sessionId, runtime: { kind: 'workspace', command: ['/nonexistent/program'] } })
    .catch((e: unknown) => e);
  expect(error).toBeInstanceOf(SessionRuntimeError);
  expect(error).toMatchObject({ code: 'RuntimeFailed', sessionId });
  const session = sys.sessions.get(sessionId);
  await expect(session.result()).rejects.toMatchObject({ code: 'RuntimeFailed' });
  const status = await session.status();
  expect(status.phase).toBe('failed');
  expect(status.failure?.message).toContain('/nonexistent/program');
});
