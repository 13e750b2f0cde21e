import { execFileSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { WithStartWorkflowOperation, WorkflowFailedError, WorkflowUpdateFailedError } from '@temporalio/client';
import { sessionWorkflowId, startUpdate } from '../../src/api';
import {
  InvalidInputError,
  SessionAlreadyExistsError,
  SessionClosedError,
  SessionRuntimeError,
  StoreFullError,
  type SessionHandle,
} from '../../src/client';
import { ChunkedSnapshotStore, Keyring } from '../../src/snapshots';
import { failureMessage, failureType, workflowTaskFailures } from '../helpers/failures';
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

async function runningMemorySession(prefix: string, initialState = 'x'): Promise<SessionHandle> {
  const session = await sys.sessions.start({ sessionId: newId(prefix), runtime: { kind: 'memory', initialState } });
  await runningStatus(session);
  return session;
}

/** What a caller without the project's client sends: the raw update, by name, with raw JSON. */
function rawUpdate(session: SessionHandle, name: string, ...args: unknown[]) {
  const handle = sys.client.workflow.getHandle(session.workflow.workflowId);
  return args.length === 0
    ? handle.executeUpdate<unknown, []>(name)
    : handle.executeUpdate<unknown, [unknown]>(name, { args: [args[0]] });
}

/** Everything the session's workspace runtime left on the host for it. */
function workspaceEntries(sessionId: string): string[] {
  const root = path.join(sys.dir, 'workspaces-1');
  return fs.existsSync(root) ? fs.readdirSync(root).filter((name) => name.startsWith(sessionId)) : [];
}

describe('unknown fields are refused, naming the field meant, and change nothing', () => {
  test.each([
    ['resume', { checkpoint_id: '000001-aaaaaaaa' }, 'checkpointId'],
    ['checkpoint', { idempotency_key: 'k' }, 'idempotencyKey'],
    ['stop', { check_point: false }, 'checkpoint'],
    ['checkpoint', { lable: 'x' }, 'label'],
  ])('%s %j', async (control, input, meant) => {
    const session = await runningMemorySession('strict');
    if (control === 'resume') await session.pause();
    const before = await session.status();
    const error = await rawUpdate(session, control, input).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(WorkflowUpdateFailedError);
    expect(failureType(error)).toBe('InvalidInput');
    const field = Object.keys(input)[0]!;
    expect(failureMessage(error)).toContain(`unknown field "${field}" (did you mean "${meant}"?)`);

    // The same through the project's client: refused before anything is sent.
    const handleMethod = (session as unknown as Record<string, (i: unknown) => Promise<unknown>>)[control]!;
    await expect(handleMethod.call(session, input)).rejects.toBeInstanceOf(InvalidInputError);

    const after = await session.status();
    expect(after.phase).toBe(before.phase);
    expect(after.checkpointCount).toBe(before.checkpointCount);
    expect(await workflowTaskFailures(sys.client, session.workflow.workflowId)).toBe(0);
    await session.stop({ checkpoint: false });
  });

  test('a repeated idempotency key under a misspelled field is refused both times: no checkpoint is made', async () => {
    const session = await runningMemorySession('idem');
    for (let i = 0; i < 2; i++) {
      await expect(rawUpdate(session, 'checkpoint', { idempotency_key: 'k' })).rejects.toBeInstanceOf(
        WorkflowUpdateFailedError,
      );
    }
    expect((await session.status()).checkpointCount).toBe(0);
    await session.stop({ checkpoint: false });
  });

  test('a control whose fields are all optional accepts no input at all', async () => {
    const session = await runningMemorySession('noinput');
    const ref = (await rawUpdate(session, 'checkpoint')) as { checkpointId: string };
    expect(ref.checkpointId).toMatch(/^000001-/);
    await expect(rawUpdate(session, 'stop')).resolves.toMatchObject({ phase: 'completed' });
  });
});

describe('a start that cannot succeed fails at once, typed, and leaves nothing behind', () => {
  test('a command that does not exist: SessionRuntimeError from start, no workflow running, no directory', async () => {
    const sessionId = newId('nocmd');
    const error = await sys.sessions
      .start({ sessionId, runtime: { kind: 'workspace', command: ['/nonexistent/prog'] } })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(SessionRuntimeError);
    expect((error as SessionRuntimeError).code).toBe('RuntimeFailed');
    expect((error as SessionRuntimeError).message).toContain('/nonexistent/prog');
    const description = await sys.client.workflow.getHandle(sessionWorkflowId(sessionId)).describe();
    expect(description.status.name).toBe('FAILED');
    expect(workspaceEntries(sessionId)).toEqual([]);
  });

  const spec = (sessionId: string, runtime: unknown = { kind: 'memory' }) => ({ sessionId, runtime });
  test.each<[string, (id: string) => { workflowId: string; args: unknown[] }]>([
    ['a path-like session id', () => ({ workflowId: 'session-../etc', args: [{ spec: spec('../etc') }] })],
    ['a session id with a slash', () => ({ workflowId: 'session-a/b', args: [{ spec: spec('a/b') }] })],
    [
      "a workflow id that is not the spec's",
      (id) => ({ workflowId: `session-${id}-other`, args: [{ spec: spec(id) }] }),
    ],
    ['a missing spec wrapper', (id) => ({ workflowId: sessionWorkflowId(id), args: [spec(id)] })],
    ['no argument at all', (id) => ({ workflowId: sessionWorkflowId(id), args: [] })],
    [
      'an empty command',
      (id) => ({ workflowId: sessionWorkflowId(id), args: [{ spec: spec(id, { kind: 'workspace', command: [] }) }] }),
    ],
    [
      'a seed file outside the workspace',
      (id) => ({
        workflowId: sessionWorkflowId(id),
        args: [{ spec: spec(id, { kind: 'workspace', command: ['true'], files: { '../evil': 'x' } }) }],
      }),
    ],
    [
      'an unknown runtime kind',
      (id) => ({ workflowId: sessionWorkflowId(id), args: [{ spec: spec(id, { kind: 'docker' }) }] }),
    ],
    [
      'an empty carried state',
      (id) => ({ workflowId: sessionWorkflowId(id), args: [{ spec: spec(id), carried: {} }] }),
    ],
    ['an unknown field', (id) => ({ workflowId: sessionWorkflowId(id), args: [{ spec: spec(id), extra: 1 }] })],
  ])('raw start with %s: the run fails with InvalidInput at its first task', async (_, make) => {
    const { workflowId, args } = make(newId('raw'));
    const handle = await sys.client.workflow.start('sessionWorkflow', { workflowId, taskQueue: sys.taskQueue, args });
    const error = await handle.result().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(WorkflowFailedError);
    expect(failureType(error)).toBe('InvalidInput');
    expect(await workflowTaskFailures(sys.client, workflowId)).toBe(0);
  });

  test('a forged carried state naming another session is refused', async () => {
    const victim = await runningMemorySession('victim');
    const sessionId = newId('forger');
    const forgedState = {
      spec: spec(victim.sessionId),
      phase: 'running',
      runtime: null,
      head: null,
      checkpoints: [],
      timeline: [],
      nextSequence: 1,
      failure: null,
      lastRestore: null,
      lastRejectedSignal: null,
      results: [],
      startedAt: new Date().toISOString(),
      updatedAt: new Date().toISOString(),
    };
    const handle = await sys.client.workflow.start('sessionWorkflow', {
      workflowId: sessionWorkflowId(sessionId),
      taskQueue: sys.taskQueue,
      args: [{ spec: spec(victim.sessionId), carried: forgedState }],
    });
    const error = await handle.result().catch((e: unknown) => e);
    expect(failureType(error)).toBe('InvalidInput');
    expect(failureMessage(error)).toContain(`must run as workflow ${sessionWorkflowId(victim.sessionId)}`);
    expect((await victim.status()).phase).toBe('running');
    await victim.stop({ checkpoint: false });
  });

  test.each([
    ['"."', { '.': 'x' }],
    ['a file that is also a directory', { a: 'x', 'a/b': 'y' }],
    ['a NUL', { 'a\0b': 'x' }],
    ['a 300-character segment', { ['x'.repeat(300)]: 'x' }],
  ])('seed files with %s are InvalidInput at start', async (_, files) => {
    const sessionId = newId('seed');
    const error = await sys.sessions
      .start({ sessionId, runtime: { kind: 'workspace', command: ['true'], files } })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidInputError);
    expect(workspaceEntries(sessionId)).toEqual([]);
  });

  test('a spec over the size limit is InvalidInput', async () => {
    const env = Object.fromEntries(Array.from({ length: 45 }, (_, i) => [`V${i}`, 'x'.repeat(32_000)]));
    const error = await sys.sessions
      .start({ sessionId: newId('huge'), runtime: { kind: 'workspace', command: ['true'], env } })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidInputError);
    expect((error as InvalidInputError).message).toContain('the start spec must be at most');
  });

  test.each(['\u202e', '\u2066', '\u0007'])('a label with %j is refused', async (ch) => {
    const session = await runningMemorySession('bidi');
    const error = await rawUpdate(session, 'checkpoint', { label: `safe${ch}txt.exe` }).catch((e: unknown) => e);
    expect(failureType(error)).toBe('InvalidInput');
    expect((await session.status()).checkpointCount).toBe(0);
    await session.stop({ checkpoint: false });
  });
});

describe('session ids are never reused', () => {
  test('a raw start of a stopped session id fails with SessionAlreadyExists and touches nothing of the old one', async () => {
    const session = await runningMemorySession('reuse', 'old state');
    await session.checkpoint();
    await session.stop();
    const before = (await sys.store.list(session.sessionId)).map((m) => m.checkpointId);
    expect(before).toHaveLength(2);

    // The `temporal` CLI's default id-reuse policy allows a new run under a closed workflow's id.
    const handle = await sys.client.workflow.start('sessionWorkflow', {
      workflowId: session.workflow.workflowId,
      taskQueue: sys.taskQueue,
      args: [{ spec: { sessionId: session.sessionId, runtime: { kind: 'memory', initialState: 'new' } } }],
      workflowIdReusePolicy: 'ALLOW_DUPLICATE',
    });
    const error = await handle.result().catch((e: unknown) => e);
    expect(failureType(error)).toBe('SessionAlreadyExists');
    expect((await sys.store.list(session.sessionId)).map((m) => m.checkpointId)).toEqual(before);

    const listed = await eventually(async () => {
      const all = await sys.sessions.list();
      const mine = all.filter((s) => s.sessionId === session.sessionId);
      return mine.length > 0 && mine;
    });
    expect(listed).toHaveLength(1);
    expect(listed[0]!.phase).toBe('completed');

    // Through the project's client, the same id is refused before any run starts.
    await expect(
      sys.sessions.start({ sessionId: session.sessionId, runtime: { kind: 'memory', initialState: 'new' } }),
    ).rejects.toBeInstanceOf(SessionAlreadyExistsError);
  });

  test('a start while the session runs is refused, with the same spec or another', async () => {
    const session = await runningMemorySession('twice', 'a');
    await expect(
      sys.sessions.start({ sessionId: session.sessionId, runtime: { kind: 'memory', initialState: 'b' } }),
    ).rejects.toBeInstanceOf(SessionAlreadyExistsError);

    // A raw update-with-start that attaches to the running session is checked by the `start` update itself.
    const other = { sessionId: session.sessionId, runtime: { kind: 'memory' as const, initialState: 'b' } };
    const error = await sys.client.workflow
      .executeUpdateWithStart(startUpdate, {
        args: [other],
        startWorkflowOperation: new WithStartWorkflowOperation('sessionWorkflow', {
          workflowId: session.workflow.workflowId,
          taskQueue: sys.taskQueue,
          args: [{ spec: other }],
          workflowIdConflictPolicy: 'USE_EXISTING',
        }),
      })
      .catch((e: unknown) => e);
    expect(failureType(error)).toBe('SessionAlreadyExists');

    const same = { sessionId: session.sessionId, runtime: { kind: 'memory' as const, initialState: 'a' } };
    const status = await sys.client.workflow.executeUpdateWithStart(startUpdate, {
      args: [same],
      startWorkflowOperation: new WithStartWorkflowOperation('sessionWorkflow', {
        workflowId: session.workflow.workflowId,
        taskQueue: sys.taskQueue,
        args: [{ spec: same }],
        workflowIdConflictPolicy: 'USE_EXISTING',
      }),
    });
    expect(status.phase).toBe('running');
    await session.stop({ checkpoint: false });
  });
});

describe('typed outcomes for every caller', () => {
  test('controls after stop are SessionClosedError, by update and by signal', async () => {
    const session = await runningMemorySession('closed');
    await session.stop({ checkpoint: false });
    await expect(session.checkpoint()).rejects.toBeInstanceOf(SessionClosedError);
    await expect(session.resume()).rejects.toMatchObject({ code: 'SessionClosed', sessionId: session.sessionId });
    await expect(session.signal('pause')).rejects.toBeInstanceOf(SessionClosedError);
  });

  test('an unknown update is InvalidInput naming the closest control; an unknown signal is recorded', async () => {
    const session = await runningMemorySession('unknown');
    const error = await rawUpdate(session, 'chekpoint', {}).catch((e: unknown) => e);
    expect(failureType(error)).toBe('InvalidInput');
    expect(failureMessage(error)).toContain('did you mean "checkpoint"?');

    await sys.client.workflow.getHandle(session.workflow.workflowId).signal('requestPuase', {});
    const status = await eventually(async () => {
      const s = await session.status();
      return s.rejectedSignals.length > 0 && s;
    });
    expect(status.rejectedSignals[0]).toMatchObject({ signal: 'requestPuase' });
    expect(status.rejectedSignals[0]!.reason).toContain('did you mean "requestPause"?');
    const query = await sys.client.workflow
      .getHandle(session.workflow.workflowId)
      .query('stauts')
      .catch((e: unknown) => e);
    expect((query as Error).message).toContain('the session has no query named "stauts" (did you mean "status"?)');
    expect(status.phase).toBe('running');
    await session.stop({ checkpoint: false });
  });

  test('every refused signal is kept: a bounded list in status and an entry each in the timeline', async () => {
    const session = await runningMemorySession('signals');
    const raw = sys.client.workflow.getHandle(session.workflow.workflowId);
    for (let i = 0; i < 12; i++) await raw.signal('requestResume', { checkpoint_id: `x${i}` });
    const entries = await eventually(async () => {
      const rejected = (await session.timeline()).filter((e) => e.kind === 'signal-rejected');
      return rejected.length === 12 && rejected;
    });
    expect(entries.every((e) => e.kind === 'signal-rejected' && e.signal === 'requestResume')).toBe(true);
    const status = await session.status();
    expect(status.rejectedSignals).toHaveLength(10);
    expect(status.lastRejectedSignal).toEqual(status.rejectedSignals[9]);
    expect(status.phase).toBe('running');
    await session.stop({ checkpoint: false });
  });
});

describe('a full store is permanent: the control fails at once and says so', () => {
  const isRoot = process.getuid?.() === 0;
  let mount: string | undefined;
  let full: TestSystem | undefined;
  beforeAll(async () => {
    if (!isRoot) return;
    mount = fs.mkdtempSync(path.join(sys.dir, 'tmpfs-'));
    try {
      execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', mount]);
    } catch {
      mount = undefined;
      return;
    }
    const store = new ChunkedSnapshotStore({
      rootDir: path.join(mount, 'snapshots'),
      keyring: new Keyring([{ id: 'full-1', key: crypto.randomBytes(32) }]),
    });
    full = await startTestSystem({ store: () => store });
  });
  afterAll(async () => {
    await full?.close();
    if (mount) execFileSync('umount', [mount]);
  });

  test('ENOSPC on a size-limited tmpfs: StoreFullError on the first attempt, in the timeline, still running', async () => {
    if (!full) {
      console.warn('skipped: mounting a tmpfs needs root');
      return;
    }
    const session = await full.sessions.start({ sessionId: newId('full'), runtime: { kind: 'memory' } });
    const { runtime } = await runningStatus(session);
    full.memory.write(runtime.instanceId, crypto.randomBytes(3 * 1024 * 1024).toString('base64'));

    const error = await session.checkpoint().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(StoreFullError);
    const history = await full.client.workflow.getHandle(session.workflow.workflowId).fetchHistory();
    const attempts = (history.events ?? []).flatMap((e) => e.activityTaskStartedEventAttributes?.attempt ?? []);
    expect(Math.max(...attempts)).toBe(1);
    const failed = (await session.timeline()).filter((e) => e.kind === 'control-failed');
    expect(failed).toEqual([expect.objectContaining({ control: 'checkpoint', type: 'StoreFull' })]);
    const status = await session.status();
    expect(status.phase).toBe('running');
    expect(status.checkpointCount).toBe(0);

    // Once there is room again, the same session checkpoints.
    full.memory.write(runtime.instanceId, 'small');
    await expect(session.checkpoint()).resolves.toMatchObject({ sequence: 1 });
    await session.stop({ checkpoint: false });
  });
});

describe('a damaged data key is honest and repairable', () => {
  test('a key file removed under a worker that holds the key: checkpoint refused, resume paused, repair resumes', async () => {
    const session = await runningMemorySession('key', 'state under the key');
    const cp = await session.pause();
    const keys = path.join(sys.dir, 'snapshots', session.sessionId, 'keys');
    const aside = `${keys}.aside`;
    fs.renameSync(keys, aside);

    // The worker unwrapped this key before; it must not restore, or publish, under a key that is gone from disk.
    const error = await session.resume().catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'RestoreFailed' });
    expect((error as Error).message).toContain('KeyUnavailable');
    const status = await session.status();
    expect(status).toMatchObject({ phase: 'paused', failure: { type: 'RestoreFailed' } });
    expect((await session.timeline()).at(-1)).toMatchObject({ kind: 'restore-failed', cause: 'resume' });

    // The operator puts the key back: the same session resumes, with its state.
    fs.renameSync(aside, keys);
    const resumed = await session.resume();
    expect(resumed.restoredFrom.checkpointId).toBe(cp.checkpointId);
    expect(sys.memory.read(resumed.runtime.instanceId).toString('utf8')).toBe('state under the key');
    expect((await session.status()).failure).toBeNull();

    // And a checkpoint taken while the key file is gone is refused, never reported durable.
    fs.renameSync(keys, aside);
    await expect(session.checkpoint()).rejects.toMatchObject({ code: 'KeyUnavailable' });
    expect((await session.status()).checkpointCount).toBe(1);
    fs.renameSync(aside, keys);
    await session.stop({ checkpoint: false });
  });
});
