import crypto from 'node:crypto';
import type { temporal } from '@temporalio/proto';
import { sessionWorkflowId } from '../../src/api';
import { runningStatus, startTestSystem, type TestSystem } from '../helpers/temporal';

/**
 * What an operator reads on a session's page in the Temporal Web UI, read back the way the UI reads it: the summary of
 * each scheduled activity in the event history.
 */
let sys: TestSystem;
beforeAll(async () => {
  sys = await startTestSystem();
});
afterAll(async () => {
  await sys?.close();
});

const newId = (prefix: string) => `${prefix}-${crypto.randomUUID().slice(0, 8)}`;
const short = (checkpointId: string) => checkpointId.slice(0, 6);

/** The summary of every activity the session scheduled, in history order, decoded as the UI decodes it. */
async function activitySummaries(sessionId: string): Promise<string[]> {
  const history = await sys.client.workflow.getHandle(sessionWorkflowId(sessionId)).fetchHistory();
  const scheduled = (history.events ?? []).filter((e) => e.activityTaskScheduledEventAttributes);
  return Promise.all(scheduled.map((e) => decode(e.userMetadata?.summary)));
}

async function decode(payload: temporal.api.common.v1.IPayload | null | undefined): Promise<string> {
  if (!payload) return '(no summary)';
  const { payloadCodecs, payloadConverter } = sys.client.options.loadedDataConverter;
  let decoded = payload;
  for (const codec of [...payloadCodecs].reverse()) decoded = (await codec.decode([decoded]))[0]!;
  return payloadConverter.fromPayload<string>(decoded);
}

test('every step of a checkpoint, pause and resume has a summary in the event history', async () => {
  const sessionId = newId('summaries');
  const session = await sys.sessions.start({ sessionId, runtime: { kind: 'memory', initialState: 'x' } });
  await runningStatus(session);
  const first = await session.checkpoint({ label: 'before upgrade' });
  const paused = await session.pause({ reason: 'maintenance' });
  await session.resume();
  await session.stop({ checkpoint: false, reason: 'done' });

  const size = /\(resume, (\d+ B|\d+\.\d \w+)\)$/;
  const summaries = await activitySummaries(sessionId);
  expect(summaries).toEqual([
    'choose a host to start the memory runtime',
    'start memory runtime',
    `capture ${short(first.checkpointId)} (manual) "before upgrade"`,
    `capture ${short(paused.checkpointId)} (pause) with 1 timeline entry`,
    'stop runtime (pause)',
    `choose a host to restore ${short(paused.checkpointId)}`,
    expect.stringMatching(new RegExp(`^restore ${short(paused.checkpointId)} ${size.source}`)),
    'stop runtime (stop)',
  ]);
});
