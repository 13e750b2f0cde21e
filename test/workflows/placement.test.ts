import crypto from 'node:crypto';
import { temporal } from '@temporalio/proto';
import { sessionWorkflowId } from '../../src/api';
import { eventually, runningStatus, startTestSystem, type TestHost, type TestSystem } from '../helpers/temporal';

// A host can be chosen and then never pick the work up (it went away in between, or is stalled). Here such a
// host is simulated exactly: it answers placements with a queue nobody polls.
let sys: TestSystem;
let unreachable: TestHost;
beforeAll(async () => {
  sys = await startTestSystem();
  unreachable = await sys.addHost({ unreachable: true });
  await sys.firstHost.crash();
});
afterAll(async () => {
  await sys?.close();
});

async function history(sessionId: string): Promise<temporal.api.history.v1.IHistoryEvent[]> {
  return (await sys.client.workflow.getHandle(sessionWorkflowId(sessionId)).fetchHistory()).events ?? [];
}

function scheduled(events: temporal.api.history.v1.IHistoryEvent[], activity: string): number {
  return events.filter((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === activity).length;
}

function neverPickedUp(events: temporal.api.history.v1.IHistoryEvent[]): number {
  return events.filter(
    (e) =>
      e.activityTaskTimedOutEventAttributes?.failure?.timeoutFailureInfo?.timeoutType ===
      temporal.api.enums.v1.TimeoutType.TIMEOUT_TYPE_SCHEDULE_TO_START,
  ).length;
}

test('with no host that picks the work up, the start fails after three placements and says why', async () => {
  const sessionId = `unplaced-${crypto.randomUUID().slice(0, 8)}`;
  const session = await sys.sessions.start(
    {
      sessionId,
      runtime: { kind: 'memory' },
      liveness: { hostTimeoutMs: 1_000 },
    },
    { wait: false },
  );
  await expect(session.result()).rejects.toMatchObject({ code: 'RuntimeFailed' });
  const status = await session.status();
  expect(status.phase).toBe('failed');
  expect(status.failure?.message).toContain('the runtime could not be started');
  const events = await history(sessionId);
  expect(scheduled(events, 'placeSession')).toBe(3);
  expect(scheduled(events, 'startRuntime')).toBe(3);
  expect(neverPickedUp(events)).toBe(3);
});

test('a start its host never picks up is placed again, on a host that does', async () => {
  const sessionId = `replaced-${crypto.randomUUID().slice(0, 8)}`;
  const session = await sys.sessions.start(
    {
      sessionId,
      runtime: { kind: 'memory' },
      liveness: { hostTimeoutMs: 2_000 },
    },
    { wait: false },
  );
  // The unreachable host took the placement; now it goes away for good and a healthy one arrives.
  await eventually(async () => scheduled(await history(sessionId), 'startRuntime') === 1);
  await unreachable.crash();
  const healthy = await sys.addHost();

  const { runtime } = await runningStatus(session, 30_000);
  expect(runtime.hostTaskQueue).toBe(healthy.hostTaskQueue);
  const events = await history(sessionId);
  expect(scheduled(events, 'placeSession')).toBe(2);
  expect(neverPickedUp(events)).toBe(1);
  expect((await session.timeline()).map((e) => e.kind)).toEqual([]);

  const checkpoint = await session.checkpoint();
  expect(checkpoint.sequence).toBe(1);
  await session.stop();
});
