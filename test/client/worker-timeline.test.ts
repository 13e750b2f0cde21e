/**
 * A client with no snapshot store (as the CLI and the gateway are: no master key, no store credential) reads a
 * session's whole timeline, also what the session no longer holds and after it ended: a worker reads the stored
 * pages for it, one short `timelineReadWorkflow` a page.
 */
import crypto from 'node:crypto';
import { SessionClient } from '../../src/client';
import { WINDOW } from '../../src/domain/records';
import { eventually, runningStatus, startTestSystem, type TestSystem } from '../helpers/temporal';

let sys: TestSystem;
beforeAll(async () => {
  sys = await startTestSystem();
});
afterAll(async () => {
  await sys?.close();
});

async function checkpointed(sessions: SessionClient, count: number) {
  const session = await sessions.start({ sessionId: `wt-${crypto.randomUUID()}`, runtime: { kind: 'memory' } });
  await runningStatus(session);
  for (let done = 0; done < count; done += 10) {
    await Promise.all(Array.from({ length: Math.min(10, count - done) }, () => session.checkpoint()));
  }
  return session;
}

test('pages beyond the window the session holds, before and after it ends, with no store', async () => {
  const count = WINDOW.timeline + 6;
  const withStore = sys.sessions;
  const storeless = new SessionClient({ client: sys.client, taskQueue: sys.taskQueue });
  const session = await checkpointed(storeless, count);
  const all = async (sessions: SessionClient) => {
    const handle = sessions.get(session.sessionId);
    const entries = [];
    for (let page = await handle.timelinePage({ limit: 25 }); ;) {
      entries.push(...page.entries);
      if (page.next === null) return entries;
      page = await handle.timelinePage({ from: page.next, limit: 25 });
    }
  };

  const running = await all(storeless);
  expect(running.filter((e) => e.kind === 'checkpoint')).toHaveLength(count);
  expect(running.map((e) => e.index)).toEqual(running.map((_, i) => i + 1));
  expect(running).toEqual(await all(withStore));

  await session.stop();
  const ended = await all(storeless);
  expect(ended.slice(0, running.length)).toEqual(running);
  expect(ended).toEqual(await all(withStore));

  // The worker read them: the store was never opened here.
  const reads = await eventually(async () => {
    const { count: n } = await sys.client.workflow.count(
      `WorkflowType = 'timelineReadWorkflow' AND TaskQueue = '${sys.taskQueue}'`,
    );
    return n > 0 && n;
  });
  expect(reads).toBeGreaterThan(0);
});

test("another tenant's stored pages are read as that tenant's", async () => {
  const tenant = `t${crypto.randomUUID().slice(0, 8)}`;
  const storeless = new SessionClient({ client: sys.client, taskQueue: sys.taskQueue, tenant });
  const session = await checkpointed(storeless, WINDOW.timeline + 2);
  await session.stop();
  const first = await storeless.get(session.sessionId).timelinePage({ from: 1, limit: 3 });
  expect(first.entries.map((e) => e.index)).toEqual([1, 2, 3]);
  // The default tenant has no session of that id.
  await expect(
    new SessionClient({ client: sys.client, taskQueue: sys.taskQueue }).get(session.sessionId).timelinePage(),
  ).rejects.toMatchObject({ code: 'SessionNotFound' });
});
