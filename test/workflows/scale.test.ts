import crypto from 'node:crypto';
import type { SessionHandle } from '../../src/client';
import { runningStatus, startTestSystem, type TestSystem } from '../helpers/temporal';

/**
 * More sessions on one worker than the SDK's default activity slots (100): every runtime watcher used to hold one of
 * them, so controls queued behind watchers and a full worker looked like a dead one.
 */
const SESSIONS = 150;

let sys: TestSystem;
beforeAll(async () => {
  sys = await startTestSystem({ firstHost: { watchHeartbeatMs: 5_000 } });
});
afterAll(async () => {
  await sys?.close();
});

async function inBatches<T, R>(items: T[], size: number, fn: (item: T) => Promise<R>): Promise<R[]> {
  const out: R[] = [];
  for (let i = 0; i < items.length; i += size) out.push(...(await Promise.all(items.slice(i, i + size).map(fn))));
  return out;
}

test(`${SESSIONS} sessions on one worker: every start and control is answered`, async () => {
  const ids = Array.from({ length: SESSIONS }, (_, i) => `scale-${i}-${crypto.randomUUID().slice(0, 6)}`);
  const sessions = await inBatches(ids, 25, (sessionId) =>
    sys.sessions.start({ sessionId, runtime: { kind: 'memory', initialState: sessionId } }),
  );
  // All of them run at once, each with its watcher waiting on the host.
  const statuses = await inBatches(sessions, 50, (s) => runningStatus(s));
  expect(new Set(statuses.map((s) => s.runtime.hostTaskQueue))).toEqual(new Set([sys.firstHost.hostTaskQueue]));

  const lifecycle = async (s: SessionHandle) => {
    const cp = await s.checkpoint();
    await s.pause();
    const resumed = await s.resume();
    const stopped = await s.stop();
    return { cp: cp.sequence, resumed: resumed.restoredFrom.sequence, final: stopped.finalCheckpoint?.sequence };
  };
  const results = await inBatches(sessions, 50, lifecycle);
  expect(results).toEqual(Array.from({ length: SESSIONS }, () => ({ cp: 1, resumed: 2, final: 3 })));
}, 300_000);

test('sessions evicted from the worker cache answer every control, in the order they were started', async () => {
  // Four cached sessions: every session below is evicted between its start and its first control, and replays its
  // history to answer it.
  const small = await startTestSystem({ firstHost: { maxCachedWorkflows: 4 } });
  try {
    const sessions: SessionHandle[] = [];
    for (let i = 0; i < 8; i++) {
      const sessionId = `evicted-${i}-${crypto.randomUUID().slice(0, 6)}`;
      sessions.push(await small.sessions.start({ sessionId, runtime: { kind: 'memory', initialState: sessionId } }));
    }
    const results = [];
    for (const s of sessions) {
      const cp = await s.checkpoint();
      await s.pause();
      const resumed = await s.resume();
      const stopped = await s.stop();
      results.push({
        cp: cp.sequence,
        resumed: resumed.restoredFrom.sequence,
        final: stopped.finalCheckpoint?.sequence,
      });
    }
    expect(results).toEqual(Array.from({ length: 8 }, () => ({ cp: 1, resumed: 2, final: 3 })));
  } finally {
    await small.close();
  }
}, 300_000);

test('a worker at its session limit is passed by: the next sessions are placed on another worker', async () => {
  const small = await startTestSystem({ firstHost: { maxSessions: 2 } });
  try {
    const start = async (i: number) =>
      (
        await runningStatus(
          await small.sessions.start({
            sessionId: `limit-${i}-${crypto.randomUUID().slice(0, 6)}`,
            runtime: { kind: 'memory' },
          }),
        )
      ).runtime.hostTaskQueue;
    expect([await start(0), await start(1)]).toEqual([small.firstHost.hostTaskQueue, small.firstHost.hostTaskQueue]);
    const other = await small.addHost();
    const next = await inBatches([2, 3, 4, 5], 4, start);
    expect(next).toEqual(Array.from({ length: 4 }, () => other.hostTaskQueue));
  } finally {
    await small.close();
  }
});
