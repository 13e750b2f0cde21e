import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { SessionFailedError, SessionRuntimeError, type SessionFailure } from '../../src/client';
import { RuntimeExitedError, WorkspaceRuntime } from '../../src/runtimes';
import { eventually, runningStatus, startTestSystem, type TestSystem } from '../helpers/temporal';

/** A command that fails at once, saying why on stderr. */
const FAILS_AT_ONCE = ['sh', '-c', 'echo starting; echo boom >&2; exit 3'];

let sys: TestSystem;
beforeAll(async () => {
  // A settle window far longer than the failing command lives: its failure is the start's, whatever the load.
  sys = await startTestSystem({ firstHost: { startSettleMs: 10_000 } });
});
afterAll(async () => {
  await sys?.close();
});

const id = (prefix: string) => `${prefix}-${crypto.randomUUID().slice(0, 8)}`;

function expectExitFailure(failure: SessionFailure | null | undefined): void {
  expect(failure).toMatchObject({ type: 'RuntimeFailed', exitCode: 3, signal: null });
  expect(failure?.outputTail).toEqual(['starting', 'boom']);
  expect(failure?.host).toBe(sys.firstHost.hostTaskQueue);
  // Where the command ran and what it wrote are still there to look at.
  expect(fs.existsSync(failure!.location!)).toBe(true);
  expect(fs.readFileSync(failure!.output!, 'utf8')).toContain('boom');
  expect(Date.parse(failure!.keptUntil!)).toBeGreaterThan(Date.now() + 24 * 60 * 60_000);
}

test('a start whose command exits at once fails with RuntimeFailed, its exit code and last output', async () => {
  const sessionId = id('fails');
  const error = await sys.sessions
    .start({ sessionId, runtime: { kind: 'workspace', command: FAILS_AT_ONCE } })
    .catch((e: unknown) => e);
  expect(error).toBeInstanceOf(SessionRuntimeError);
  expect(error).toMatchObject({ code: 'RuntimeFailed', sessionId });
  expect((error as Error).message).toContain('exited with code 3');
  expect((error as Error).message).toContain('boom');
  expectExitFailure((error as SessionRuntimeError).failure);

  // Afterwards, every view says the same: failed, and why.
  const session = sys.sessions.get(sessionId);
  const status = await session.status();
  expect(status.phase).toBe('failed');
  expectExitFailure(status.failure);
  // The Web UI's details for the session say it too.
  const { currentDetails } = await session.workflow.query<{ currentDetails?: string }>('__temporal_workflow_metadata');
  expect(currentDetails).toContain('exit: exit code 3 · last output: boom');
  expect(currentDetails).toContain(`kept: \`${status.failure!.location}\` on ${sys.firstHost.hostTaskQueue} until `);
  const ended = await session.result().catch((e: unknown) => e);
  expect(ended).toBeInstanceOf(SessionRuntimeError);
  expectExitFailure((ended as SessionRuntimeError).failure);

  // A control is refused as what it is: a failed session, with its failure; never "not found".
  for (const control of [() => session.pause(), () => session.checkpoint(), () => session.signal('resume')]) {
    const refused = await control().catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(SessionFailedError);
    expect(refused).toMatchObject({ code: 'SessionFailed', sessionId });
    expectExitFailure((refused as SessionFailedError).failure);
  }
});

test('a command that fails after its settle window fails the session with its exit code and last output', async () => {
  const session = await sys.sessions.start({
    sessionId: id('later'),
    runtime: {
      kind: 'workspace',
      command: ['sh', '-c', 'echo starting; sleep 0.5; echo boom >&2; exit 3'],
      settleMs: 0,
    },
  });
  const status = await eventually(async () => {
    const s = await session.status();
    return s.phase === 'failed' ? s : undefined;
  });
  expect(status.failure?.message).toBe('the runtime process exited with code 3');
  expectExitFailure(status.failure);
  const refused = await session.checkpoint().catch((e: unknown) => e);
  expect(refused).toBeInstanceOf(SessionFailedError);
  expect((refused as SessionFailedError).failure).toMatchObject({ type: 'RuntimeFailed', exitCode: 3 });
});

test('a command that exits with 0 within the settle window has done its work: the start answers', async () => {
  const session = await sys.sessions.start({
    sessionId: id('done'),
    runtime: { kind: 'workspace', command: ['sh', '-c', 'echo done'] },
  });
  await expect(session.result()).resolves.toEqual({ phase: 'completed', finalCheckpoint: null });
});

test('what a failed command left survives a worker restart, and goes once its retention is over', async () => {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'ds-failed-retention-'));
  try {
    const start = async (runtime: WorkspaceRuntime, instanceId: string) => {
      const error = await runtime
        .start({ sessionId: 's1', instanceId, spec: { kind: 'workspace', command: FAILS_AT_ONCE, settleMs: 10_000 } })
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(RuntimeExitedError);
      return (error as RuntimeExitedError).details;
    };
    const first = new WorkspaceRuntime({ rootDir: root, stateDir: path.join(root, '.run-1'), log: () => {} });
    const kept = await start(first, 'kept');
    const brief = new WorkspaceRuntime({
      rootDir: root,
      stateDir: path.join(root, '.run-2'),
      failedRetentionMs: 0,
      log: () => {},
    });
    const expired = await start(brief, 'expired');

    // The next worker on this host: it removes what nothing owns, but keeps a failed command's directory and log.
    const next = new WorkspaceRuntime({ rootDir: root, stateDir: path.join(root, '.run-3'), log: () => {} });
    const recovery = await next.recoverHost();
    expect(recovery).toMatchObject({ keptFailed: 1, removedDirs: 1 });
    expect(fs.readFileSync(kept.output!, 'utf8')).toContain('boom');
    expect(fs.existsSync(kept.location!)).toBe(true);
    expect(fs.existsSync(expired.location!)).toBe(false);
    expect(fs.existsSync(expired.output!)).toBe(false);
  } finally {
    fs.rmSync(root, { recursive: true, force: true });
  }
});

test('a worker restart keeps the failed session’s directory and log, and status says where they are', async () => {
  const sessionId = id('restart');
  await sys.sessions
    .start({ sessionId, runtime: { kind: 'workspace', command: FAILS_AT_ONCE } })
    .catch(() => undefined);
  const { failure } = await sys.sessions.get(sessionId).status();
  expectExitFailure(failure);
  // A new incarnation of the worker on the same workspace root (a stop and a start of the host's process).
  const next = new WorkspaceRuntime({
    rootDir: path.join(sys.dir, 'workspaces-1'),
    stateDir: path.join(sys.dir, 'workspaces-1-next.run'),
    log: () => {},
  });
  await next.recoverHost();
  expect(fs.existsSync(failure!.location!)).toBe(true);
  expect(fs.readFileSync(failure!.output!, 'utf8')).toContain('boom');
});

test('a failed session can still be forked from its checkpoints', async () => {
  const session = await sys.sessions.start({
    sessionId: id('fork-failed'),
    runtime: {
      kind: 'workspace',
      command: ['sh', '-c', 'echo kept > state; while [ ! -f go ]; do sleep 0.1; done; exit 3'],
      settleMs: 0,
    },
  });
  const { runtime } = await runningStatus(session);
  const checkpoint = await session.checkpoint();
  fs.writeFileSync(path.join(runtime.location, 'go'), '');
  await eventually(async () => (await session.status()).phase === 'failed');
  await expect(session.pause()).rejects.toBeInstanceOf(SessionFailedError);
  const { forks } = await session.fork({ from: checkpoint.index!, paused: true });
  expect(forks).toHaveLength(1);
  expect(await sys.sessions.get(forks[0]!.sessionId).status()).toMatchObject({ phase: 'paused' });
});

// Last: it stops the system's only host.
test('a drain reports only the sessions its host runs, not those that failed long before', async () => {
  const failed = await sys.sessions.start({
    sessionId: id('failed-before'),
    runtime: { kind: 'workspace', command: ['sh', '-c', 'sleep 0.3; exit 3'], settleMs: 0 },
  });
  await eventually(async () => (await failed.status()).phase === 'failed');
  const running = await sys.sessions.start({
    sessionId: id('running'),
    runtime: { kind: 'workspace', command: ['sleep', '600'], settleMs: 0 },
  });
  const report = await sys.firstHost.stop({ deadlineMs: 30_000 });
  expect(report.notDrained).toEqual([]);
  expect(report.drained).toEqual([running.sessionId]);
  expect(report.sessions).toBe(1);
});
