import crypto from 'node:crypto';
import { temporal } from '@temporalio/proto';
import { sessionRuntimeKey, sessionStateKey } from '../../src/api/search-attributes';
import { InvalidTransitionError } from '../../src/client';
import { runningStatus } from '../helpers/temporal';
import { startTimeSkippingSystem, type TimeSkippingSystem } from '../helpers/time-skipping';

const DAY_MS = 24 * 60 * 60 * 1000;
const { EventType } = temporal.api.enums.v1;

let sys: TimeSkippingSystem;
beforeAll(async () => {
  sys = await startTimeSkippingSystem();
});
afterAll(async () => {
  await sys?.close();
});

function newId(prefix: string) {
  return `${prefix}-${crypto.randomUUID().slice(0, 8)}`;
}

test('a session paused for a week resumes with its state, in seconds of wall time', async () => {
  const session = await sys.sessions.start({
    sessionId: newId('week'),
    runtime: { kind: 'memory', initialState: 'mon' },
  });
  const running = await runningStatus(session);
  sys.memory.write(running.runtime.instanceId, 'friday');
  await session.checkpoint({ label: 'before the weekend' });
  await session.pause({ reason: 'the weekend' });
  const pausedAt = Date.parse((await session.status()).updatedAt);

  const serverBefore = await sys.env.currentTimeMs();
  const wallBefore = Date.now();
  await sys.skipTime(7 * DAY_MS);
  expect((await sys.env.currentTimeMs()) - serverBefore).toBeGreaterThanOrEqual(7 * DAY_MS);
  expect(Date.now() - wallBefore).toBeLessThan(5_000);
  expect((await session.status()).phase).toBe('paused');

  await session.resume();
  const resumed = await runningStatus(session);
  expect(sys.memory.read(resumed.runtime.instanceId).toString('utf8')).toBe('friday');
  // The workflow's own clock is the server's: the session saw the week go by.
  expect(Date.parse(resumed.updatedAt) - pausedAt).toBeGreaterThanOrEqual(7 * DAY_MS);
  await session.stop({ checkpoint: false });
  await expect(session.result()).resolves.toEqual({ phase: 'completed', finalCheckpoint: null });
});

test('the test server runs what the session workflow uses', async () => {
  // Update-with-start: the start answers with the running session.
  const session = await sys.sessions.start({ sessionId: newId('features'), runtime: { kind: 'memory' } });
  await runningStatus(session);
  // An update refused by its validator comes back typed and leaves no trace in history.
  await expect(session.resume()).rejects.toBeInstanceOf(InvalidTransitionError);
  await session.pause();

  const description = await session.workflow.describe();
  expect(description.typedSearchAttributes.get(sessionStateKey)).toBe('paused');
  expect(description.typedSearchAttributes.get(sessionRuntimeKey)).toBe('memory');
  const metadata = await session.workflow.query<{ currentDetails?: string }>('__temporal_workflow_metadata');
  expect(metadata.currentDetails).toContain('**paused**');

  const events = (await session.workflow.fetchHistory()).events ?? [];
  const types = new Set(events.map((e) => e.eventType));
  // The id claim is a local activity: a marker in history.
  expect(types).toContain(EventType.EVENT_TYPE_MARKER_RECORDED);
  expect(types).toContain(EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES);
  const accepted = events.filter((e) => e.workflowExecutionUpdateAcceptedEventAttributes);
  expect(accepted.map((e) => e.workflowExecutionUpdateAcceptedEventAttributes?.acceptedRequest?.input?.name)).toEqual([
    'start',
    'pause',
  ]);
  await session.stop();
});

test('what the test server does not do: list sessions, or move time while a session runs', async () => {
  await expect(sys.sessions.list()).rejects.toThrow();
  const session = await sys.sessions.start({ sessionId: newId('busy'), runtime: { kind: 'memory' } });
  await runningStatus(session);
  // The host's lease activity waits for the runtime's exit, and a pending activity holds server time still.
  await expect(sys.skipTime('2 hours', { wallTimeoutMs: 2_000 })).rejects.toThrow(/did not move|not met/);
  await session.stop({ checkpoint: false });
});

describe('policies over simulated weeks', () => {
  test('a session paused longer than its policy allows stops by itself; configure changes the policy mid-way', async () => {
    const session = await sys.sessions.start({
      sessionId: newId('auto-stop'),
      runtime: { kind: 'memory', initialState: 'kept' },
      policies: { stopPausedAfterMs: 30 * DAY_MS },
    });
    await runningStatus(session);
    await session.pause({ reason: 'holidays' });

    await sys.skipTime(10 * DAY_MS);
    expect((await session.status()).phase).toBe('paused');
    // Mid-way: 20 days is enough now. The timer is planned again from when the session paused.
    const configured = await session.configure({ policies: { stopPausedAfterMs: 20 * DAY_MS } });
    expect(configured.policies).toEqual({ stopPausedAfterMs: 20 * DAY_MS });
    await sys.skipTime(9 * DAY_MS);
    expect((await session.status()).phase).toBe('paused');
    await sys.skipTime(2 * DAY_MS);
    await expect(session.result()).resolves.toMatchObject({ phase: 'completed' });
    const timeline = await session.timeline();
    expect(timeline.find((e) => e.kind === 'policy')).toMatchObject({
      action: 'stop',
      reason: 'paused for longer than 20d',
    });
    // The paused state was a checkpoint already: it stays, restorable by a fork or a store tool.
    expect(
      timeline.filter((e) => e.kind === 'checkpoint').map((e) => (e.kind === 'checkpoint' ? e.checkpoint.trigger : '')),
    ).toEqual(['pause']);
  });
});
