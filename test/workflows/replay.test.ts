import fs from 'node:fs';
import path from 'node:path';
import { historyFromJSON } from '@temporalio/common/lib/proto-utils';
import { Worker } from '@temporalio/worker';
import { fleetWorkflowId, hostWorkflowId, sessionWorkflowId } from '../../src/api';

/**
 * Sessions run for days: a worker upgrade must replay their histories exactly. Every history recorded from
 * a supported release (scripts/record-histories.ts; the two minor releases before this one, docs/design.md §8.6) is
 * replayed against the current workflow code; a change that would break running sessions fails here with a
 * DeterminismViolationError.
 */
const dir = path.join(__dirname, '..', 'fixtures', 'histories');
const files = fs.readdirSync(dir).filter((f) => f.endsWith('.json'));

test('there are committed histories to replay', () => {
  expect(files.length).toBeGreaterThanOrEqual(2);
});

// Sessions started on the previous release are the ones an upgrade meets first (docs/design.md §8.5).
test('the previous release has histories here', () => {
  const previous = JSON.parse(fs.readFileSync(path.join(dir, '..', 'previous-release.json'), 'utf8')) as {
    version: string;
  };
  expect(files.filter((f) => f.startsWith(`${previous.version}-`)).length).toBeGreaterThanOrEqual(2);
});

/** The patch ids of every history's `patched()` markers (the marker's details carry `{ id, deprecated }`). */
function patchIds(file: string): Set<string> {
  const { events } = JSON.parse(fs.readFileSync(path.join(dir, file), 'utf8')) as {
    events: {
      markerRecordedEventAttributes?: {
        markerName?: string;
        details?: Record<string, { payloads?: { data?: string }[] }>;
      };
    }[];
  };
  const ids = new Set<string>();
  for (const e of events) {
    const marker = e.markerRecordedEventAttributes;
    if (marker?.markerName !== 'core_patch') continue;
    for (const { payloads } of Object.values(marker.details ?? {})) {
      for (const p of payloads ?? [])
        ids.add((JSON.parse(Buffer.from(p.data ?? '', 'base64').toString('utf8')) as { id: string }).id);
    }
  }
  return ids;
}

// A branch behind `patched()` that no committed history reaches is a branch whose replay nothing checks: each id the
// workflow code still asks `patched()` about is recorded in at least one history (scripts/record-histories.ts).
test('every patch the workflow code asks about is in a committed history', () => {
  const workflows = path.join(__dirname, '..', '..', 'src', 'workflows');
  const constants = new Map(
    [...fs.readFileSync(path.join(workflows, 'patches.ts'), 'utf8').matchAll(/export const (\w+) = '([^']+)'/g)].map(
      (m) => [m[1]!, m[2]!] as const,
    ),
  );
  const asked = new Set<string>();
  for (const f of fs.readdirSync(workflows).filter((f) => f.endsWith('.ts'))) {
    for (const m of fs.readFileSync(path.join(workflows, f), 'utf8').matchAll(/\bpatched\((\w+)\)/g)) {
      asked.add(constants.get(m[1]!) ?? m[1]!);
    }
  }
  expect(asked.size).toBeGreaterThan(0);
  const recorded = new Set(files.flatMap((f) => [...patchIds(f)]));
  expect([...asked].filter((id) => !recorded.has(id))).toEqual([]);
});

test.each(files)('%s replays against the current workflow code', async (file) => {
  const history = historyFromJSON(JSON.parse(fs.readFileSync(path.join(dir, file), 'utf8')));
  expect(history.events?.length).toBeGreaterThan(10);
  await Worker.runReplayHistory(
    { workflowBundle: { codePath: process.env.DS_TEST_WORKFLOW_BUNDLE! } },
    history,
    workflowIdOf(history),
  );
});

/** The session workflow checks that it runs under its derived id, so replay must use the recorded one. */
function workflowIdOf(history: ReturnType<typeof historyFromJSON>): string {
  const started = history.events?.[0]?.workflowExecutionStartedEventAttributes;
  // The fleet directory starts with no input worth naming: its id is its task queue's.
  if (started?.workflowType?.name === 'fleetWorkflow') return fleetWorkflowId(started.taskQueue?.name ?? '');
  // A worker's reads of the store do not look at their own id.
  if (started?.workflowType?.name !== 'sessionWorkflow' && started?.workflowType?.name !== 'hostWorkflow') {
    return `replayed-${started?.workflowType?.name ?? 'workflow'}`;
  }
  const payload = started?.input?.payloads?.[0];
  const input = JSON.parse(Buffer.from(payload!.data!).toString('utf8')) as
    { spec: { sessionId: string } } | { hostTaskQueue: string };
  return 'hostTaskQueue' in input ? hostWorkflowId(input.hostTaskQueue) : sessionWorkflowId(input.spec.sessionId);
}
