import crypto from 'node:crypto';
import { temporal } from '@temporalio/proto';
import { fleetQuery, fleetWorkflowId, sessionWorkflowId } from '../../src/api';
import { NoEligibleHostError, RestoreFailedError, type SessionHandle } from '../../src/client';
import type { StartSessionInput } from '../../src/domain';
import { eventually, runningStatus, startTestSystem, type TestHost, type TestSystem } from '../helpers/temporal';

// Two worker hosts on one task queue, each with its own host queue, worker id, workspace root and Temporal connection.
let sys: TestSystem;
let a: TestHost;
let b: TestHost;
beforeAll(async () => {
  sys = await startTestSystem({ firstHost: { labels: ['zone=a'] } });
  a = sys.firstHost;
  b = await sys.addHost({ labels: ['zone=b', 'gpu'] });
});
afterAll(async () => {
  await sys?.close();
});

const open: SessionHandle[] = [];
afterEach(async () => {
  await Promise.allSettled(open.splice(0).map((s) => s.stop({ checkpoint: false })));
  // The next test starts from two idle hosts: wait until the directory counts no session on either.
  await eventually(async () => {
    const fleet = await sys.client.workflow.getHandle(fleetWorkflowId(sys.taskQueue)).query(fleetQuery);
    return fleet.hosts.filter((h) => h.live).every((h) => h.load === 0);
  });
});

/** Waits until the fleet directory counts these loads (a host reports a change within a fraction of a second). */
async function directoryShows(loads: Record<string, number>): Promise<void> {
  await eventually(async () => {
    const fleet = await sys.client.workflow.getHandle(fleetWorkflowId(sys.taskQueue)).query(fleetQuery);
    return Object.entries(loads).every(
      ([queue, load]) => fleet.hosts.find((h) => h.report.hostTaskQueue === queue)?.load === load,
    );
  });
}

async function start(spec: Partial<StartSessionInput> = {}): Promise<string> {
  const session = await sys.sessions.start({
    sessionId: `fleet-${crypto.randomUUID().slice(0, 8)}`,
    runtime: { kind: 'memory' },
    ...spec,
  });
  open.push(session);
  return (await runningStatus(session)).runtime.hostTaskQueue;
}

async function placementAttempts(sessionId: string): Promise<number[]> {
  const events = (await sys.client.workflow.getHandle(sessionWorkflowId(sessionId)).fetchHistory()).events ?? [];
  const scheduled = new Set(
    events
      .filter((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'placeSession')
      .map((e) => Number(e.eventId)),
  );
  return events
    .filter((e) => e.eventType === temporal.api.enums.v1.EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED)
    .filter((e) => scheduled.has(Number(e.activityTaskStartedEventAttributes?.scheduledEventId)))
    .map((e) => e.activityTaskStartedEventAttributes?.attempt ?? 0);
}

test('with two idle workers, placements alternate by load', async () => {
  const hosts: string[] = [];
  for (let i = 0; i < 4; i++) hosts.push(await start());
  expect(new Set(hosts.slice(0, 2))).toEqual(new Set([a.hostTaskQueue, b.hostTaskQueue]));
  expect(hosts[2]).not.toBe(hosts[3]);
  expect(hosts.filter((h) => h === a.hostTaskQueue)).toHaveLength(2);
});

test('a resume lands on the less loaded worker, not where the session ran', async () => {
  const first = await start();
  const second = await start();
  expect(second).not.toBe(first);
  const moving = open[0]!;
  await moving.pause();
  await directoryShows({ [first]: 0, [second]: 1 });
  // The other worker still runs one session; the paused one's worker runs none: the resume goes back there.
  await moving.resume();
  expect((await runningStatus(moving)).runtime.hostTaskQueue).toBe(first);
  // A tie: the worker placed on longest ago takes the next session.
  expect(await start()).toBe(second);
  // The session on `second` pauses: its resume goes to `first`, now the less loaded one, not back where it ran.
  const other = open[1]!;
  await other.pause();
  await directoryShows({ [first]: 1, [second]: 1 });
  await other.resume();
  expect((await runningStatus(other)).runtime.hostTaskQueue).toBe(first);
});

test('a full worker is passed by at once, without waiting for it to refuse', async () => {
  const small = await startTestSystem({ firstHost: { maxSessions: 1 } });
  try {
    const other = await small.addHost();
    const started: SessionHandle[] = [];
    try {
      const hosts: string[] = [];
      for (let i = 0; i < 4; i++) {
        const session = await small.sessions.start({
          sessionId: `full-${i}-${crypto.randomUUID().slice(0, 6)}`,
          runtime: { kind: 'memory' },
        });
        started.push(session);
        hosts.push((await runningStatus(session)).runtime.hostTaskQueue);
        // Every placement was decided by its first attempt: no refusal, no retry.
        const history = (await small.client.workflow.getHandle(sessionWorkflowId(session.sessionId)).fetchHistory())
          .events;
        const attempts = (history ?? [])
          .filter((e) => e.activityTaskStartedEventAttributes)
          .map((e) => e.activityTaskStartedEventAttributes?.attempt);
        expect(attempts.every((n) => n === 1)).toBe(true);
      }
      expect(hosts.filter((h) => h === small.firstHost.hostTaskQueue)).toHaveLength(1);
      expect(hosts.filter((h) => h === other.hostTaskQueue)).toHaveLength(3);
    } finally {
      await Promise.allSettled(started.map((s) => s.stop({ checkpoint: false })));
    }
  } finally {
    await small.close();
  }
});

test('a session constrained to a worker runs only there, through pause and resume', async () => {
  for (let i = 0; i < 3; i++) expect(await start({ placement: { workerLabels: ['gpu'] } })).toBe(b.hostTaskQueue);
  // By worker id: the part of the host task queue after its `@`.
  const workerId = a.hostTaskQueue.slice(a.hostTaskQueue.lastIndexOf('@') + 1);
  const pinned = await start({ placement: { host: workerId } });
  expect(pinned).toBe(a.hostTaskQueue);
  const session = open[open.length - 1]!;
  await session.pause();
  await session.resume();
  expect((await runningStatus(session)).runtime.hostTaskQueue).toBe(a.hostTaskQueue);
  expect(await placementAttempts(session.sessionId)).toEqual([1, 1]);
});

test('a placement no live worker satisfies fails at once, typed', async () => {
  const session = await sys.sessions.start(
    {
      sessionId: `nowhere-${crypto.randomUUID().slice(0, 8)}`,
      runtime: { kind: 'memory' },
      placement: { workerLabels: ['gpu', 'zone=a'] },
    },
    { wait: false },
  );
  const error = await session.result().catch((err: unknown) => err);
  expect(error).toBeInstanceOf(NoEligibleHostError);
  expect((error as Error).message).toContain('worker labels gpu, zone=a');
  const status = await session.status();
  expect(status).toMatchObject({ phase: 'failed', failure: { type: 'NoEligibleHost' } });
  expect(await placementAttempts(session.sessionId)).toEqual([1]);
});

test('the session list is filtered by host', async () => {
  const onB = await start({ placement: { host: b.hostTaskQueue } });
  const onA = await start({ placement: { workerLabels: ['zone=a'] } });
  expect([onA, onB]).toEqual([a.hostTaskQueue, b.hostTaskQueue]);
  const [sessionB, sessionA] = open.slice(-2);
  const workerIdOf = (queue: string) => queue.slice(queue.lastIndexOf('@') + 1);
  const ids = async (host: string) => (await sys.sessions.list({ host })).map((s) => s.sessionId);
  // Visibility is eventually consistent: the host attribute is upserted as the session starts.
  await eventually(async () => (await ids(workerIdOf(a.hostTaskQueue))).includes(sessionA!.sessionId));
  await eventually(async () => (await ids(b.hostTaskQueue)).includes(sessionB!.sessionId));
  expect(await ids(workerIdOf(a.hostTaskQueue))).not.toContain(sessionB!.sessionId);
  expect(await ids(b.hostTaskQueue)).not.toContain(sessionA!.sessionId);
});

test('a resume whose only matching worker is gone fails typed and leaves the session paused', async () => {
  const c = await sys.addHost({ labels: ['zone=c'] });
  expect(await start({ placement: { workerLabels: ['zone=c'] } })).toBe(c.hostTaskQueue);
  const session = open[open.length - 1]!;
  await session.pause();
  await c.crash();
  const error = await session.resume().catch((err: unknown) => err);
  expect(error).toBeInstanceOf(RestoreFailedError);
  expect((error as Error).message).toContain('NoEligibleHost');
  expect(await session.status()).toMatchObject({ phase: 'paused' });
});
