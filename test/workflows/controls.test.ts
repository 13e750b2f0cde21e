import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { WorkflowUpdateFailedError, WorkflowUpdateStage } from '@temporalio/client';
import { checkpointUpdate, pauseUpdate, sessionWorkflowId, stopUpdate } from '../../src/api';
import {
  InvalidInputError,
  InvalidTransitionError,
  SessionAlreadyExistsError,
  SessionClosedError,
  SessionNotFoundError,
  SessionRuntimeError,
  SnapshotNotFoundError,
} from '../../src/client';
import { eventually, runningStatus, startTestSystem, type TestSystem } from '../helpers/temporal';

let sys: TestSystem;
beforeAll(async () => {
  sys = await startTestSystem();
});
afterAll(async () => {
  await sys?.close();
});

function newId(prefix: string) {
  return `${prefix}-${crypto.randomUUID().slice(0, 8)}`;
}

async function runningSession(prefix: string) {
  const sessionId = newId(prefix);
  const session = await sys.sessions.start({ sessionId, runtime: { kind: 'memory', initialState: 'x' } });
  await eventually(async () => (await session.status()).phase === 'running');
  return session;
}

async function historyEvents(sessionId: string) {
  return (await sys.client.workflow.getHandle(sessionWorkflowId(sessionId)).fetchHistory()).events ?? [];
}

/** Controls accepted into history (the `start` update that answers the start is not a control). */
function acceptedControls(events: Awaited<ReturnType<typeof historyEvents>>) {
  return events.filter((e) => {
    const name = e.workflowExecutionUpdateAcceptedEventAttributes?.acceptedRequest?.input?.name;
    return name !== undefined && name !== 'start';
  });
}

describe('bad input is refused with a typed error and changes nothing', () => {
  test('an invalid start spec starts nothing', async () => {
    const sessionId = newId('bad');
    const error = await sys.sessions
      .start({ sessionId, runtime: { kind: 'workspace', command: [] } })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidInputError);
    expect((error as InvalidInputError).issues).toEqual([
      expect.objectContaining({ path: ['runtime', 'command'], message: 'command must name a program' }),
    ]);
    await expect(sys.sessions.get(sessionId).status()).rejects.toBeInstanceOf(SessionNotFoundError);
  });

  test.each(['../x', 'a/b', '', '.hidden'])(
    'path-like session id %j is refused before anything is sent',
    async (id) => {
      expect(() => sys.sessions.get(id)).toThrow(InvalidInputError);
      await expect(sys.sessions.start({ sessionId: id, runtime: { kind: 'memory' } })).rejects.toBeInstanceOf(
        InvalidInputError,
      );
    },
  );

  test('an unknown session id is SessionNotFoundError for queries and controls', async () => {
    const ghost = sys.sessions.get(newId('ghost'));
    await expect(ghost.status()).rejects.toBeInstanceOf(SessionNotFoundError);
    await expect(ghost.pause()).rejects.toBeInstanceOf(SessionNotFoundError);
  });

  test('a second start with the same id is SessionAlreadyExistsError', async () => {
    const session = await runningSession('dup');
    await expect(
      sys.sessions.start({ sessionId: session.sessionId, runtime: { kind: 'memory' } }),
    ).rejects.toBeInstanceOf(SessionAlreadyExistsError);
  });

  test('oversized and malformed labels are refused by the client and by the workflow validator alike', async () => {
    const session = await runningSession('label');
    await expect(session.checkpoint({ label: 'x'.repeat(201) })).rejects.toBeInstanceOf(InvalidInputError);
    await expect(session.checkpoint({ label: 'two\nlines' })).rejects.toBeInstanceOf(InvalidInputError);

    // A caller that skips the client (another language, the Web UI) meets the same rules in the validator.
    const raw = sys.client.workflow.getHandle(sessionWorkflowId(session.sessionId));
    const error = await raw
      .executeUpdate(checkpointUpdate, { args: [{ label: 'x'.repeat(5000) }] })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(WorkflowUpdateFailedError);
    expect((error as WorkflowUpdateFailedError).cause).toMatchObject({ type: 'InvalidInput' });
    const wrongType = await raw
      .executeUpdate(pauseUpdate, { args: [{ reason: 42 } as never] })
      .catch((e: unknown) => e);
    expect((wrongType as WorkflowUpdateFailedError).cause).toMatchObject({ type: 'InvalidInput' });

    const events = await historyEvents(session.sessionId);
    expect(events.some((e) => e.workflowTaskFailedEventAttributes)).toBe(false);
    expect(acceptedControls(events)).toEqual([]);
    expect(await session.status()).toMatchObject({ phase: 'running', checkpointCount: 0 });
  });
});

describe('illegal transitions are rejected by the validator and change nothing', () => {
  test('resume while running, pause or checkpoint while paused, pause twice', async () => {
    const session = await runningSession('illegal');
    const refused = await session.resume().catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(InvalidTransitionError);
    expect(refused).toMatchObject({
      message: 'cannot resume while the session is running',
      sessionId: session.sessionId,
    });
    const cp = await session.pause();
    await expect(session.pause()).rejects.toThrow('cannot pause while the session is paused');
    await expect(session.checkpoint()).rejects.toBeInstanceOf(InvalidTransitionError);
    await expect(session.resume({ checkpointId: 'no-such-checkpoint' })).rejects.toBeInstanceOf(SnapshotNotFoundError);

    const status = await session.status();
    expect(status).toMatchObject({ phase: 'paused', checkpointCount: 1, head: cp });
    const events = await historyEvents(session.sessionId);
    expect(acceptedControls(events)).toHaveLength(1);
    expect(events.some((e) => e.workflowTaskFailedEventAttributes)).toBe(false);
  });

  test('anything after stop is SessionClosed, while the stop runs and after the session closed', async () => {
    const session = await runningSession('afterstop');
    const stopping = await session.workflow.startUpdate(stopUpdate, {
      args: [{}],
      waitForStage: WorkflowUpdateStage.ACCEPTED,
    });
    await expect(session.checkpoint()).rejects.toBeInstanceOf(SessionClosedError);
    await stopping.result();
    await expect(session.pause()).rejects.toBeInstanceOf(SessionClosedError);
    await expect(session.stop()).rejects.toBeInstanceOf(SessionClosedError);
    expect((await session.status()).phase).toBe('completed');
  });

  test('a resume accepted while a pause still runs is legal, and runs after it', async () => {
    const session = await runningSession('order');
    // Wait only until the pause is accepted: the resume is then validated against the paused state to come.
    const pausing = await session.workflow.startUpdate(pauseUpdate, {
      args: [{}],
      waitForStage: WorkflowUpdateStage.ACCEPTED,
    });
    const resumed = await session.resume();
    const paused = await pausing.result();
    expect(resumed.restoredFrom.checkpointId).toBe(paused.checkpointId);
    expect((await session.status()).phase).toBe('running');
  });
});

describe('a control the runtime kind cannot serve', () => {
  test('append and regenerate to a memory session are refused at validation: no history, no timeline entry', async () => {
    const session = await runningSession('wrong-kind');
    const before = await session.timeline();
    const appended = await session.append({ messages: [{ role: 'user', content: 'hi' }] }).catch((e: unknown) => e);
    expect(appended).toBeInstanceOf(InvalidInputError);
    expect(appended).toMatchObject({
      message: `append applies to conversation sessions; session ${session.sessionId} is a memory session`,
    });
    await expect(session.regenerate()).rejects.toThrow('regenerate applies to conversation sessions');

    expect(await session.timeline()).toEqual(before);
    expect(await session.status()).toMatchObject({ phase: 'running', pendingControls: 0 });
    const events = await historyEvents(session.sessionId);
    expect(acceptedControls(events)).toHaveLength(0);
    // The session still takes the controls it serves.
    await expect(session.checkpoint()).resolves.toMatchObject({ trigger: 'manual' });
  });
  test('its signal twin is a refused signal, recorded once, never run', async () => {
    const session = await runningSession('wrong-kind-signal');
    await session.signal('append', { messages: [{ role: 'user', content: 'hi' }] });
    const status = await eventually(async () => {
      const s = await session.status();
      return s.lastRejectedSignal ? s : undefined;
    });
    expect(status.lastRejectedSignal).toMatchObject({
      signal: 'requestAppend',
      reason: `append applies to conversation sessions; session ${session.sessionId} is a memory session`,
    });
    expect((await session.timeline()).map((e) => e.kind)).toEqual(['signal-rejected']);
  });
});

describe('idempotency keys', () => {
  test('the same checkpoint sent twice with one key has one effect and one answer', async () => {
    const session = await runningSession('idem');
    const first = await session.checkpoint({ label: 'once', idempotencyKey: 'k-1' });
    const again = await session.checkpoint({ label: 'once', idempotencyKey: 'k-1' });
    expect(again).toEqual(first);
    const concurrent = await Promise.all([
      session.checkpoint({ idempotencyKey: 'k-2' }),
      session.checkpoint({ idempotencyKey: 'k-2' }),
    ]);
    expect(concurrent[0]).toEqual(concurrent[1]);
    expect((await session.status()).checkpointCount).toBe(2);
  });

  test('a repeated pause key answers with the first pause even though the session is now paused', async () => {
    const session = await runningSession('idem-pause');
    const first = await session.pause({ idempotencyKey: 'pause-1' });
    await expect(session.pause({ idempotencyKey: 'pause-1' })).resolves.toEqual(first);
    await expect(session.pause({ idempotencyKey: 'pause-2' })).rejects.toBeInstanceOf(InvalidTransitionError);
  });

  test('a key in flight for one control is refused for another', async () => {
    const session = await runningSession('idem-race');
    const checkpointing = await session.workflow.startUpdate(checkpointUpdate, {
      args: [{ idempotencyKey: 'race' }],
      updateId: 'checkpoint:race',
      waitForStage: WorkflowUpdateStage.ACCEPTED,
    });
    await expect(session.pause({ idempotencyKey: 'race' })).rejects.toBeInstanceOf(InvalidInputError);
    await expect(checkpointing.result()).resolves.toMatchObject({ sequence: 1 });
    expect(await session.status()).toMatchObject({ phase: 'running', checkpointCount: 1 });
  });

  test('a key reused for another control is refused', async () => {
    const session = await runningSession('idem-mix');
    await session.checkpoint({ idempotencyKey: 'same' });
    await expect(session.pause({ idempotencyKey: 'same' })).rejects.toBeInstanceOf(InvalidInputError);
    expect((await session.status()).phase).toBe('running');
  });
});

describe('a pause whose checkpoint cannot be written', () => {
  test('fails with a typed error, keeps the session running, and answers a repeated key with the same failure', async () => {
    const sessionId = newId('unpausable');
    const session = await sys.sessions.start({
      sessionId,
      runtime: { kind: 'workspace', command: ['sh', '-c', 'while true; do sleep 0.1; done'] },
    });
    const { runtime } = await runningStatus(session);
    // A link out of the workspace could never be restored, so capture refuses it.
    fs.symlinkSync('/etc/hostname', path.join(runtime.location, 'escape'));

    const first = await session.pause({ idempotencyKey: 'p1' }).catch((e: unknown) => e);
    expect(first).toBeInstanceOf(SessionRuntimeError);
    expect((first as SessionRuntimeError).message).toMatch(/^pause failed: the checkpoint could not be written/);
    const status = await session.status();
    expect(status).toMatchObject({ phase: 'running', checkpointCount: 0 });
    expect(() => process.kill(runtime.pid!, 0)).not.toThrow();

    await expect(session.pause({ idempotencyKey: 'p1' })).rejects.toMatchObject({ message: (first as Error).message });

    fs.rmSync(path.join(runtime.location, 'escape'));
    const paused = await session.pause({ idempotencyKey: 'p2', reason: 'after the fix' });
    expect(paused.trigger).toBe('pause');
    expect((await session.timeline()).at(-1)).toMatchObject({ kind: 'checkpoint', reason: 'after the fix' });
  });
});

describe('a pause stops the runtime in the activity that checkpoints it', () => {
  const activitiesOf = async (sessionId: string) =>
    (await historyEvents(sessionId))
      .map((e) => e.activityTaskScheduledEventAttributes?.activityType?.name)
      .filter((name): name is string => !!name);

  test('one host activity captures and stops; the instance is gone and resume brings the state back', async () => {
    const session = await runningSession('pause-one-step');
    const { runtime } = await runningStatus(session);
    sys.memory.write(runtime.instanceId, 'before the pause');
    await session.pause();
    expect(await sys.memory.describe(runtime.instanceId)).toBeUndefined();
    const activities = await activitiesOf(session.sessionId);
    expect(activities.slice(-1)).toEqual(['captureCheckpoint']);
    expect(activities).not.toContain('stopRuntime');
    const resumed = await session.resume();
    expect(sys.memory.read(resumed.runtime.instanceId).toString()).toBe('before the pause');
  });

  test('a stop that fails there is left to the stop activity: the pause still frees the runtime', async () => {
    const session = await runningSession('pause-stop-fails');
    const { runtime } = await runningStatus(session);
    sys.memory.write(runtime.instanceId, 'kept');
    const stop = sys.memory.stop.bind(sys.memory);
    let refused = 0;
    jest.spyOn(sys.memory, 'stop').mockImplementation(async (instanceId, ...rest) => {
      if (instanceId === runtime.instanceId && refused++ === 0) throw new Error('the host could not stop it just now');
      return stop(instanceId, ...rest);
    });
    try {
      const paused = await session.pause();
      expect(await session.status()).toMatchObject({ phase: 'paused', checkpointCount: 1 });
      expect(paused.trigger).toBe('pause');
    } finally {
      jest.restoreAllMocks();
    }
    expect(refused).toBe(2); // refused in the capture's activity, then done by stopRuntime
    expect(await sys.memory.describe(runtime.instanceId)).toBeUndefined();
    expect((await activitiesOf(session.sessionId)).slice(-2)).toEqual(['captureCheckpoint', 'stopRuntime']);
    const resumed = await session.resume();
    expect(sys.memory.read(resumed.runtime.instanceId).toString()).toBe('kept');
  });
});

describe('signals: fire-and-forget twins', () => {
  test('a pause signal pauses; an illegal one is recorded in status', async () => {
    const session = await runningSession('signal');
    await session.signal('pause', { reason: 'batch' });
    await eventually(async () => (await session.status()).phase === 'paused');
    await session.signal('pause');
    const status = await eventually(async () => {
      const s = await session.status();
      return s.lastRejectedSignal ? s : undefined;
    });
    expect(status.lastRejectedSignal).toMatchObject({
      signal: 'requestPause',
      reason: 'cannot pause while the session is paused',
    });
    expect(status.checkpointCount).toBe(1);
    await session.signal('resume');
    await eventually(async () => (await session.status()).phase === 'running');
  });

  test('a signal to a session that has ended is SessionClosedError, not "not found"', async () => {
    const session = await runningSession('signal-closed');
    await session.stop({ checkpoint: false });
    await expect(session.signal('pause')).rejects.toBeInstanceOf(SessionClosedError);
  });
});
