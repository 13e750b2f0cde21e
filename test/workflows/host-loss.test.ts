import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { sessionWorkflowId } from '../../src/api';
import { eventually, runningStatus, startTestSystem, type TestHost, type TestSystem } from '../helpers/temporal';

let sys: TestSystem;
let hosts: TestHost[];
beforeAll(async () => {
  sys = await startTestSystem();
  hosts = [sys.firstHost, await sys.addHost()];
});
afterAll(async () => {
  await sys?.close();
});

test('when the host of a running session dies, the session comes back from its newest checkpoint on another host', async () => {
  const sessionId = `hostloss-${crypto.randomUUID().slice(0, 8)}`;
  const session = await sys.sessions.start({
    sessionId,
    runtime: { kind: 'workspace', command: ['sh', '-c', 'while true; do sleep 0.1; done'] },
    liveness: { heartbeatTimeoutMs: 3_000, hostTimeoutMs: 3_000 },
  });
  const running = await runningStatus(session);
  const original = running.runtime;
  fs.writeFileSync(path.join(original.location, 'notes.txt'), 'written before the checkpoint');
  const checkpoint = await session.checkpoint({ label: 'before the crash' });
  fs.writeFileSync(path.join(original.location, 'late.txt'), 'written after the checkpoint');

  const doomed = hosts.find((h) => h.hostTaskQueue === original.hostTaskQueue)!;
  const survivor = hosts.find((h) => h !== doomed)!;
  await doomed.crash();

  const recovered = await eventually(async () => {
    const s = await session.status();
    return s.phase === 'running' && s.runtime && s.runtime.instanceId !== original.instanceId ? s : undefined;
  }, 60_000);
  expect(recovered.runtime!.hostTaskQueue).toBe(survivor.hostTaskQueue);
  expect(recovered.head?.checkpointId).toBe(checkpoint.checkpointId);
  const location = recovered.runtime!.location;
  expect(fs.readFileSync(path.join(location, 'notes.txt'), 'utf8')).toBe('written before the checkpoint');
  // Work after the newest checkpoint died with the host: recovery is to the checkpoint, never a fresh start.
  expect(fs.existsSync(path.join(location, 'late.txt'))).toBe(false);
  expect(() => process.kill(recovered.runtime!.pid!, 0)).not.toThrow();

  const kinds = (await session.timeline()).map((e) => e.kind);
  expect(kinds).toEqual(['checkpoint', 'runtime-lost', 'restored']);
  expect((await session.timeline()).at(-1)).toMatchObject({ kind: 'restored', cause: 'recovery' });

  // The recovered session is fully controllable again.
  const paused = await session.pause();
  expect(paused.parentId).toBe(checkpoint.checkpointId);
  await session.stop();
});

test('a host lost before any checkpoint: the session starts again from its spec, never fails for it', async () => {
  hosts.push(await sys.addHost());
  const session = await sys.sessions.start({
    sessionId: `lostearly-${crypto.randomUUID().slice(0, 8)}`,
    runtime: { kind: 'memory' },
    liveness: { heartbeatTimeoutMs: 3_000, hostTimeoutMs: 3_000 },
  });
  // Right after a host went away, its last polls may still take a task: placement is retried, so allow for it.
  const { runtime } = await runningStatus(session, 60_000);
  await hosts.find((h) => h.hostTaskQueue === runtime.hostTaskQueue)!.crash();
  const restarted = await eventually(async () => {
    const s = await session.status();
    if (s.phase === 'failed') throw new Error(`the session failed: ${s.failure?.message}`);
    return s.phase === 'running' && s.runtime && s.runtime.instanceId !== runtime.instanceId ? s : undefined;
  }, 60_000);
  expect(restarted.runtime!.hostTaskQueue).not.toBe(runtime.hostTaskQueue);
  expect(restarted.failure).toBeNull();
  expect(restarted.recentPhases?.map((p) => p.phase)).toEqual(['starting', 'running', 'resuming', 'running']);
  const timeline = await session.timeline();
  expect(timeline.map((e) => e.kind)).toEqual(['runtime-lost', 'restarted-from-spec']);
  expect(timeline[1]).toMatchObject({ kind: 'restarted-from-spec', instanceId: restarted.runtime!.instanceId });
  // The Web UI's current details say it too.
  const metadata = await sys.client.workflow
    .getHandle(sessionWorkflowId(restarted.sessionId))
    .query<{ currentDetails?: string }>('__temporal_workflow_metadata');
  expect(metadata.currentDetails).toContain('restarted from its spec');
  await session.stop();
});
