import crypto from 'node:crypto';
import { Client } from '@temporalio/client';
import { temporal } from '@temporalio/proto';
import { sessionRuntimeKey, sessionStateKey } from '../../src/api/search-attributes';
import { InvalidTransitionError } from '../../src/client';
import type { SessionHandle, TimelinePage } from '../../src/client/session-client';
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

/**
 * A session's result, through a client of our own: awaiting a result through the environment's client lets server
 * time run free until it comes, and with nothing else pending the server moves on years (to the host monitor's run
 * timeout) at once.
 */
async function endedResult(session: SessionHandle): Promise<unknown> {
  const client = new Client({ connection: sys.env.connection, namespace: 'default' });
  return client.workflow.getHandle(session.workflow.workflowId).result();
}

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
  await expect(endedResult(session)).resolves.toEqual({ phase: 'completed', finalCheckpoint: null });
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

test('what the test server does not do: list sessions', async () => {
  await expect(sys.sessions.list()).rejects.toThrow();
});

describe('policies over simulated weeks', () => {
  test('a running session checkpoints every 10 minutes for 7 days, is configured mid-way, pauses when idle, then stops', async () => {
    const TEN_MINUTES = 10 * 60_000;
    const HOUR = 60 * 60_000;
    const session = await sys.sessions.start({
      sessionId: newId('week-running'),
      // Its runtime reports no activity of its own (appends are controls): here the host's clock runs at wall speed
      // while the server's jumps, so an activity age the host measured would say nothing about server time.
      runtime: { kind: 'conversation' },
      policies: { checkpointEveryMs: TEN_MINUTES },
      retention: { keepLast: 20 },
    });
    const running = await runningStatus(session);
    const startedAt = Date.parse(running.startedAt);
    const automatic = async () => {
      const at: number[] = [];
      for (let from: number | null = 1; from !== null;) {
        const page: TimelinePage = await session.timelinePage({ from, limit: 1000 });
        for (const e of page.entries) {
          if (e.kind === 'checkpoint' && e.checkpoint.trigger === 'automatic') at.push(Date.parse(e.at));
        }
        from = page.next;
      }
      return at;
    };

    // The first half-week: a checkpoint each 10 minutes of server time, the host's lease resting in between.
    const wallBefore = Date.now();
    await sys.skipTime(3.5 * DAY_MS, { wallTimeoutMs: 300_000, stepMs: HOUR });
    const firstHalf = await automatic();
    expect(firstHalf.length).toBeGreaterThanOrEqual(503);
    expect(firstHalf.length).toBeLessThanOrEqual(504);
    // A period runs from the end of the previous checkpoint: a gap is 10 minutes and the capture's own (real) time.
    const gaps = (at: number[], first: number) => at.map((t, i) => t - (i === 0 ? first : at[i - 1]!));
    for (const gap of gaps(firstHalf, startedAt)) expect(gap - TEN_MINUTES).toBeGreaterThanOrEqual(0);
    for (const gap of gaps(firstHalf, startedAt)) expect(gap - TEN_MINUTES).toBeLessThan(10_000);

    // Mid-way: every 30 minutes from now on.
    const configured = await session.configure({ policies: { checkpointEveryMs: 3 * TEN_MINUTES } });
    expect(configured.policies).toEqual({ checkpointEveryMs: 3 * TEN_MINUTES });
    await sys.skipTime(3.5 * DAY_MS, { wallTimeoutMs: 300_000, stepMs: HOUR });
    const week = await automatic();
    const secondHalf = week.slice(firstHalf.length);
    expect(secondHalf.length).toBeGreaterThanOrEqual(167);
    expect(secondHalf.length).toBeLessThanOrEqual(168);
    for (const gap of gaps(secondHalf.slice(1), secondHalf[0]!)) {
      expect(gap - 3 * TEN_MINUTES).toBeGreaterThanOrEqual(0);
      expect(gap - 3 * TEN_MINUTES).toBeLessThan(10_000);
    }
    const status = await session.status();
    // Retention keeps the newest 20 in the store; the timeline keeps every entry.
    expect(status).toMatchObject({ phase: 'running', checkpointCount: 20 });
    console.log(
      `7 simulated days, ${week.length} automatic checkpoints, in ${Date.now() - wallBefore} ms of wall time`,
    );

    // Idle pause after 2 hours without activity; a touch counts as activity.
    await session.configure({
      policies: { checkpointEveryMs: 3 * TEN_MINUTES, idlePauseAfterMs: 2 * HOUR, stopPausedAfterMs: 30 * DAY_MS },
    });
    await sys.skipTime(1.5 * HOUR, { wallTimeoutMs: 60_000, stepMs: 15 * 60_000 });
    await session.touch();
    await sys.skipTime(1.5 * HOUR, { wallTimeoutMs: 60_000, stepMs: 15 * 60_000 });
    expect((await session.status()).phase).toBe('running');
    await sys.skipTime(1 * HOUR, { wallTimeoutMs: 60_000, stepMs: 15 * 60_000 });
    const idle = await session.status();
    expect(idle).toMatchObject({ phase: 'paused' });
    const newest = async () => session.timeline({ from: Math.max(1, (await session.status()).timelineLength - 10) });
    const timeline = await newest();
    expect(timeline.find((e) => e.kind === 'policy')).toMatchObject({ action: 'pause', reason: 'idle for 2h' });
    expect(timeline.filter((e) => e.kind === 'checkpoint').at(-1)).toMatchObject({
      checkpoint: { trigger: 'pause' },
    });

    // 30 days paused: stopped by itself, its state still in the pause's checkpoint.
    await sys.skipTime(29 * DAY_MS, { wallTimeoutMs: 60_000 });
    expect((await session.status()).phase).toBe('paused');
    await sys.skipTime(1 * DAY_MS + HOUR, { wallTimeoutMs: 60_000 });
    await expect(endedResult(session)).resolves.toMatchObject({ phase: 'completed' });
    expect((await newest()).filter((e) => e.kind === 'policy').map((e) => e.kind === 'policy' && e.action)).toEqual([
      'pause',
      'stop',
    ]);
  }, 600_000);

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
    await expect(endedResult(session)).resolves.toMatchObject({ phase: 'completed' });
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
