import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import type { temporal } from '@temporalio/proto';
import { sessionWorkflowId } from '../../src/api';
import { RestoreFailedError } from '../../src/client';
import { describeHandler, QUERY_DOCS, SIGNAL_DOCS, UPDATE_DOCS } from '../../src/workflows/handler-descriptions';
import { runningStatus, startTestSystem, type TestSystem } from '../helpers/temporal';

/**
 * What an operator reads on a session's page in the Temporal Web UI, read back the way the UI reads it: the summary of
 * each scheduled activity in the event history, the current details and the handler descriptions (the built-in
 * `__temporal_workflow_metadata` query).
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

interface WorkflowMetadata {
  definition: {
    queryDefinitions: { name: string; description?: string }[];
    signalDefinitions: { name: string; description?: string }[];
    updateDefinitions: { name: string; description?: string }[];
  };
  currentDetails?: string;
}

function metadataOf(sessionId: string): Promise<WorkflowMetadata> {
  return sys.client.workflow
    .getHandle(sessionWorkflowId(sessionId))
    .query<WorkflowMetadata>('__temporal_workflow_metadata');
}

async function detailsOf(sessionId: string): Promise<string> {
  return (await metadataOf(sessionId)).currentDetails ?? '';
}

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

/** The checkpoint's sealed manifest: a flipped byte makes it tampered. */
function tamper(sessionId: string, checkpointId: string): void {
  const file = path.join(sys.dir, 'snapshots', sessionId, `${checkpointId}.manifest`);
  const bytes = fs.readFileSync(file);
  bytes[Math.floor(bytes.length / 2)]! ^= 0xff;
  fs.writeFileSync(file, bytes);
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
    `capture ${short(paused.checkpointId)} (pause) with 1 timeline entry, then stop the runtime (pause)`,
    `choose a host to restore ${short(paused.checkpointId)}`,
    expect.stringMatching(new RegExp(`^restore ${short(paused.checkpointId)} ${size.source}`)),
    'stop runtime (stop)',
  ]);
});

test('current details say why a session is paused, what its head is and what happened last', async () => {
  const sessionId = newId('details');
  const session = await sys.sessions.start({ sessionId, runtime: { kind: 'memory', initialState: 'x' } });
  await runningStatus(session);
  expect(await detailsOf(sessionId)).toMatch(/^\*\*running\*\* · memory runtime · 0 checkpoint\(s\)\n\nruntime: `/);

  const paused = await session.pause({ reason: 'maintenance' });
  const details = await detailsOf(sessionId);
  const lines = details.split('\n\n');
  expect(lines[0]).toBe('**paused** · memory runtime · 1 checkpoint(s)');
  expect(lines[1]).toBe('why: paused: maintenance');
  expect(lines[2]).toMatch(
    new RegExp(`^head: \`${paused.checkpointId}\` \\(#1, \\d+ B, pause, ${paused.createdAt}\\)$`),
  );
  expect(lines.at(-1)).toMatch(
    new RegExp(`^recent:\n- #${paused.index} \\d\\d:\\d\\d:\\d\\d checkpoint \\(pause, \\d+ B\\): maintenance$`),
  );
  expect(details).not.toContain('runtime: `'); // its compute is freed
  expect(details).not.toContain('pending:'); // the pause has finished

  await session.stop({ checkpoint: false, reason: 'done for today' });
  expect(await detailsOf(sessionId)).toMatch(
    /^\*\*completed\*\* · memory runtime · 1 checkpoint\(s\)\n\nwhy: stopped: done for today\n/,
  );
});

test('a restore that falls back names the checkpoint it fell back from and why, in details and summaries', async () => {
  const sessionId = newId('fallback');
  const session = await sys.sessions.start({ sessionId, runtime: { kind: 'memory', initialState: 'x' } });
  await runningStatus(session);
  const good = await session.checkpoint();
  const bad = await session.pause();
  tamper(sessionId, bad.checkpointId);
  await session.resume();

  const details = await detailsOf(sessionId);
  expect(details).toContain(
    `last restore: restored #${good.index} after #${bad.index} failed: SnapshotTampered (resume, `,
  );
  expect(details).toMatch(new RegExp(`- #\\d+ \\S+ fell back from #${bad.index}: SnapshotTampered\n`));
  const restores = (await activitySummaries(sessionId)).filter((s) => s.startsWith('restore '));
  expect(restores).toEqual([
    expect.stringMatching(new RegExp(`^restore ${short(bad.checkpointId)} \\(resume, `)),
    expect.stringMatching(
      new RegExp(`^restore ${short(good.checkpointId)} after fallback from ${short(bad.checkpointId)} \\(resume, `),
    ),
  ]);
  await session.stop({ checkpoint: false });
});

test('a session no checkpoint restores shows it is paused waiting for a repair, with every reason', async () => {
  const sessionId = newId('nofallback');
  const session = await sys.sessions.start({ sessionId, runtime: { kind: 'memory', initialState: 'x' } });
  await runningStatus(session);
  const one = await session.checkpoint();
  const two = await session.pause();
  tamper(sessionId, one.checkpointId);
  tamper(sessionId, two.checkpointId);
  await expect(session.resume()).rejects.toBeInstanceOf(RestoreFailedError);

  const lines = (await detailsOf(sessionId)).split('\n\n');
  expect(lines.slice(0, 3)).toEqual([
    '**paused** · memory runtime · 2 checkpoint(s)',
    'why: no checkpoint could be restored (resume); a resume tries again',
    expect.stringMatching(/^failure: RestoreFailed: no checkpoint of session .* could be restored: /),
  ]);
  expect(lines).toContain(
    `last restore: failed (resume): #${two.index} failed: SnapshotTampered, #${one.index} failed: SnapshotTampered`,
  );
  await session.stop({ checkpoint: false });
});

test('the Web UI lists every handler with the description its input examples are tested against', async () => {
  const sessionId = newId('handlers');
  const session = await sys.sessions.start({ sessionId, runtime: { kind: 'memory', initialState: 'x' } });
  await runningStatus(session);
  const { definition } = await metadataOf(sessionId);
  const listed = (defs: { name: string; description?: string }[]) =>
    Object.fromEntries(defs.filter((d) => !d.name.startsWith('__')).map((d) => [d.name, d.description]));
  const described = (docs: Record<string, Parameters<typeof describeHandler>[0]>) =>
    Object.fromEntries(Object.entries(docs).map(([name, doc]) => [name, describeHandler(doc)]));
  expect(listed(definition.updateDefinitions)).toEqual(described(UPDATE_DOCS));
  expect(listed(definition.signalDefinitions)).toEqual(described(SIGNAL_DOCS));
  expect(listed(definition.queryDefinitions)).toEqual(described(QUERY_DOCS));
  await session.stop({ checkpoint: false });
});
