import crypto from 'node:crypto';
import { sessionWorkflowId } from '../../src/api';
import { SessionRuntimeError } from '../../src/client';
import { eventually, startTestSystem, type TestSystem } from '../helpers/temporal';

/**
 * The search attributes an operator filters by, read back through Temporal's visibility API (what the Web UI and
 * `temporal workflow list` read) after each transition of real sessions on the dev server.
 */
let sys: TestSystem;
beforeAll(async () => {
  sys = await startTestSystem();
});
afterAll(async () => {
  await sys?.close();
});

const id = (name: string) => `${name}-${crypto.randomUUID().slice(0, 8)}`;

type Attributes = Record<string, unknown[] | undefined>;

/** The session's search attributes once visibility shows what `ready` expects. */
async function attributesWhen(sessionId: string, ready: (a: Attributes) => boolean): Promise<Attributes> {
  let last: Attributes = {};
  try {
    return await eventually(async () => {
      const described = await sys.client.workflow.getHandle(sessionWorkflowId(sessionId)).describe();
      last = described.searchAttributes as Attributes;
      return ready(last) ? last : undefined;
    }, 15_000);
  } catch (err) {
    throw new Error(`search attributes of ${sessionId} never matched; last: ${JSON.stringify(last)}`, { cause: err });
  }
}

/** The session ids a visibility query lists (the query as an operator types it). */
async function listed(query: string): Promise<string[]> {
  const ids: string[] = [];
  for await (const wf of sys.client.workflow.list({ query: `TaskQueue = '${sys.taskQueue}' AND ${query}` })) {
    ids.push(wf.workflowId.replace(/^session-/, ''));
  }
  return ids;
}

test('host, checkpoint count, head, last checkpoint and failure code follow every transition', async () => {
  const sessionId = id('attrs');
  const session = await sys.sessions.start({
    sessionId,
    labels: ['team=attrs'],
    runtime: { kind: 'memory', initialState: 'x' },
  });
  const host = (await session.status()).runtime!.hostTaskQueue;
  let a = await attributesWhen(sessionId, (x) => x.SessionState?.[0] === 'running' && x.SessionHost !== undefined);
  expect(a).toMatchObject({ SessionHost: [host], CheckpointCount: [0], SessionLabels: ['team=attrs'] });
  expect(a.HeadCheckpoint).toBeUndefined();
  expect(a.FailureCode).toBeUndefined();

  const first = await session.checkpoint();
  a = await attributesWhen(sessionId, (x) => x.CheckpointCount?.[0] === 1);
  expect(a).toMatchObject({ HeadCheckpoint: [first.checkpointId], SessionHost: [host] });
  expect((a.LastCheckpointAt?.[0] as Date).getTime()).toBeGreaterThan(Date.now() - 60_000);

  const paused = await session.pause();
  a = await attributesWhen(sessionId, (x) => x.SessionState?.[0] === 'paused');
  expect(a).toMatchObject({ CheckpointCount: [2], HeadCheckpoint: [paused.checkpointId] });
  expect(a.SessionHost).toBeUndefined(); // its compute is freed: no host holds it
  expect(await listed(`SessionState = 'paused' AND FailureCode IS NULL`)).toContain(sessionId);

  await session.resume();
  a = await attributesWhen(sessionId, (x) => x.SessionState?.[0] === 'running');
  expect(a).toMatchObject({ SessionHost: [host], CheckpointCount: [2] });
  expect(await listed(`SessionHost = '${host}' AND SessionState = 'running'`)).toContain(sessionId);
  await session.stop({ checkpoint: false });
});

test('a failed session names its failure code, and the list finds it by code', async () => {
  const sessionId = id('fails');
  await expect(
    sys.sessions.start({ sessionId, runtime: { kind: 'workspace', command: ['/nonexistent/prog'] } }),
  ).rejects.toBeInstanceOf(SessionRuntimeError);
  const a = await attributesWhen(sessionId, (x) => x.FailureCode !== undefined);
  expect(a).toMatchObject({ SessionState: ['failed'], FailureCode: ['RuntimeFailed'], CheckpointCount: [0] });
  expect(await listed(`FailureCode = 'RuntimeFailed'`)).toContain(sessionId);
});
