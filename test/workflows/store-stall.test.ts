import crypto from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import { sessionWorkflowId } from '../../src/api';
import { startTestSystem, type TestSystem } from '../helpers/temporal';

/**
 * A store that answers slowly — an S3 server retried through its 503s, a path to it cut for a while — is not a dead
 * worker: the capture heartbeats from its first store call on, so a stall longer than the heartbeat timeout neither
 * times the attempt out nor, past every retry, turns a StoreUnavailable into a RuntimeFailed "Heartbeat timeout".
 */
const STALL_MS = 8_000;

let sys: TestSystem | undefined;
/** The next manifest lookup stalls for STALL_MS, as the capture's check for a published checkpoint does first. */
let stallNext = false;

beforeAll(async () => {
  sys = await startTestSystem({
    store: (real) =>
      new Proxy(real, {
        get(target, name, receiver) {
          if (name === 'readManifest') {
            return async (sessionId: string, checkpointId: string) => {
              if (stallNext) {
                stallNext = false;
                await delay(STALL_MS);
              }
              return target.readManifest(sessionId, checkpointId);
            };
          }
          const value: unknown = Reflect.get(target, name, receiver);
          return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
        },
      }),
  });
});
afterAll(async () => {
  await sys?.close();
});

test('a store that stalls longer than the heartbeat timeout before the capture does not time the capture out', async () => {
  const sessionId = `stall-${crypto.randomUUID().slice(0, 6)}`;
  const session = await sys!.sessions.start({
    sessionId,
    runtime: { kind: 'memory', initialState: 'state' },
    liveness: { heartbeatTimeoutMs: 3_000, hostTimeoutMs: 5_000 },
  });
  stallNext = true;
  const ref = await session.checkpoint();
  expect(stallNext).toBe(false);
  expect(ref.sessionId).toBe(sessionId);

  // One attempt: the stall was heartbeated through, not timed out and retried.
  const history = await sys!.client.workflow.getHandle(sessionWorkflowId(sessionId)).fetchHistory();
  const events = history.events ?? [];
  const captures = new Set(
    events
      .filter((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'captureCheckpoint')
      .map((e) => String(e.eventId)),
  );
  const attempts = events
    .filter((e) => captures.has(String(e.activityTaskStartedEventAttributes?.scheduledEventId)))
    .map((e) => ({
      attempt: e.activityTaskStartedEventAttributes!.attempt,
      lastFailure: e.activityTaskStartedEventAttributes!.lastFailure?.message ?? null,
    }));
  expect(attempts).toEqual([{ attempt: 1, lastFailure: null }]);
  await session.stop({ checkpoint: false });
});
