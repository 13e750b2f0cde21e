/** History events each control adds to the session workflow's run, by kind, and the activities among them. */
import { setTimeout as delay } from 'node:timers/promises';
import type { temporal } from '@temporalio/proto';
import type { SessionHandle } from '../../src/client';
import { smallState } from './latency';
import type { ControlsSystem } from './system';

type HistoryEvent = temporal.api.history.v1.IHistoryEvent;

export interface EventsPer {
  control: string;
  times: number;
  events: number;
  /** The added events by kind, most first. */
  kinds: [string, number][];
  /** Activities the controls ran: how many per control, and their mean time from scheduled to completed (ms). */
  activities: { name: string; perControl: number; meanMs: number }[];
  /** Runs of the workflow before and after: a hand-over in between makes the count meaningless. */
  sameRun: boolean;
}

/** The kind of an event: the name of the one `xxxEventAttributes` field it has. */
function kindOf(event: HistoryEvent): string {
  const key = Object.keys(event).find((k) => k.endsWith('EventAttributes') && event[k as keyof HistoryEvent] != null);
  return key?.replace(/EventAttributes$/, '') ?? 'unknown';
}

function eventMs(event: HistoryEvent): number {
  return Number(event.eventTime?.seconds ?? 0) * 1000 + (event.eventTime?.nanos ?? 0) / 1e6;
}

async function history(session: SessionHandle): Promise<{ events: HistoryEvent[]; runId: string | undefined }> {
  // Let the workflow task that answered the last control finish: its completion is in the history too.
  await delay(300);
  const description = await session.workflow.describe();
  const fetched = await session.workflow.fetchHistory();
  return { events: fetched.events ?? [], runId: description.runId };
}

function breakdown(added: HistoryEvent[], times: number): Pick<EventsPer, 'kinds' | 'activities'> {
  const kinds = new Map<string, number>();
  for (const e of added) kinds.set(kindOf(e), (kinds.get(kindOf(e)) ?? 0) + 1);
  const scheduled = new Map<string, { name: string; at: number }>();
  const done = new Map<string, number[]>();
  for (const e of added) {
    const s = e.activityTaskScheduledEventAttributes;
    if (s) scheduled.set(String(e.eventId), { name: s.activityType?.name ?? '?', at: eventMs(e) });
    const c = e.activityTaskCompletedEventAttributes;
    const from = c && scheduled.get(String(c.scheduledEventId));
    if (from) done.set(from.name, [...(done.get(from.name) ?? []), eventMs(e) - from.at]);
  }
  return {
    kinds: [...kinds].sort((a, b) => b[1] - a[1]),
    activities: [...done].map(([name, ms]) => ({
      name,
      perControl: ms.length / times,
      meanMs: ms.reduce((a, b) => a + b, 0) / ms.length,
    })),
  };
}

async function count(
  session: SessionHandle,
  control: string,
  times: number,
  fn: () => Promise<unknown>,
  settle: () => Promise<unknown> = async () => undefined,
): Promise<EventsPer> {
  const before = await history(session);
  for (let i = 0; i < times; i++) await fn();
  await settle();
  const after = await history(session);
  const added = after.events.slice(before.events.length);
  return { control, times, events: added.length, ...breakdown(added, times), sameRun: before.runId === after.runId };
}

/** Fire-and-forget checkpoints have no answer: they are done when the session counts them. */
export async function untilCheckpoints(session: SessionHandle, count: number): Promise<void> {
  while ((await session.status()).checkpointCount < count) await delay(20);
}

/** `times` of each control on a fresh small session, each counted from the history before and after. */
export async function measureHistory(sys: ControlsSystem, times: number): Promise<EventsPer[]> {
  const session = await sys.sessions.start({
    sessionId: `history-${sys.runId}`,
    runtime: { kind: 'memory', initialState: smallState() },
  });
  const rows: EventsPer[] = [];
  rows.push(await count(session, 'checkpoint', times, () => session.checkpoint()));
  rows.push(
    await count(session, 'pause + resume', times, async () => {
      await session.pause();
      await session.resume();
    }),
  );
  let target = (await session.checkpoint()).index!;
  rows.push(
    await count(session, 'rewind', times, async () => {
      target = (await session.rewind({ to: target })).safetyCheckpoint!.index!;
    }),
  );
  const from = (await session.checkpoint()).index!;
  rows.push(await count(session, 'fork (paused)', times, () => session.fork({ from, paused: true })));
  const { checkpointCount } = await session.status();
  rows.push(
    await count(
      session,
      'requestCheckpoint signal',
      times,
      () => session.signal('checkpoint'),
      () => untilCheckpoints(session, checkpointCount + times),
    ),
  );
  await session.stop({ checkpoint: false });
  return rows;
}
