import { z } from '@hono/zod-openapi';
import type { Context } from 'hono';
import { streamSSE, type SSEStreamingApi } from 'hono/streaming';
import type { SessionStatus, TimelineEntry } from '../api';
import type { IoProgress, SessionHandle, TimelinePage } from '../client';
import { InvalidInputError } from '../domain/errors';
import { FINAL_PHASES, STABLE_PHASES } from '../domain/session-state';

/** How a stream reads the session's status (the gateway's, shared with its other readers of the session). */
export type StatusReader = (handle: SessionHandle) => Promise<SessionStatus>;

/** How a stream reads the timeline after an index (the gateway's, shared by the streams of one session). */
export type TimelineReader = (handle: SessionHandle, from: number) => Promise<TimelinePage>;

/** What a stream reads with, and whether the key that opened it still may. */
export interface StreamReaders {
  status?: StatusReader;
  timeline?: TimelineReader;
  /** Checked at every poll: false ends the stream (the key was revoked, or its role or tenant changed). */
  authorized?: () => boolean;
  /** When the next poll is: the gateway's clock, shared by all its streams (default: a clock of the stream's own). */
  clock?: PollClock;
}

const POLL_MS = 250;

/**
 * The polls of every stream of a gateway, on one clock: streams that wait for the next poll wake together at a
 * multiple of `ms`, in one turn of the event loop, so the streams of one session read it together (one query a poll,
 * not one a stream), however far apart they were opened and however late the loop runs.
 */
export class PollClock {
  private next?: { at: number; tick: Promise<void> };

  constructor(readonly ms: number = POLL_MS) {}

  /** Resolves at the next multiple of `ms` on the wall clock. */
  wait(): Promise<void> {
    const at = (Math.floor(Date.now() / this.ms) + 1) * this.ms;
    if (this.next?.at !== at) {
      this.next = { at, tick: new Promise((resolve) => setTimeout(resolve, at - Date.now())) };
    }
    return this.next.tick;
  }
}

export interface EventStreamOptions {
  /** How often the session is read (default 250 ms); a `clock` given in the readers sets it instead. */
  pollMs?: number;
  /** A comment line this often keeps proxies from closing an idle stream (default 15 s). */
  keepAliveMs?: number;
}

/**
 * One event of the stream, as the OpenAPI document describes each event of a `text/event-stream` (fields as a client
 * parses them): its name, its JSON as text, and for a timeline entry the entry's index.
 */
export const SessionEvent = z
  .object({
    event: z.enum(['phase', 'progress', 'timeline']),
    data: z.string().describe('the event as JSON'),
    id: z.string().regex(/^\d+$/).optional().describe('a timeline entry’s index'),
  })
  .openapi('SessionEvent');

/**
 * A session's events as Server-Sent Events, read from the session as it goes (Temporal pushes nothing to a client):
 *
 * - `phase` — `{ phase, headIndex, failure, updatedAt }`, first on connecting and at every change;
 * - `progress` — `{ activity, phase, bytesDone, bytesTotal?, attempt }` of a capture or restore under way, when it moves;
 * - `timeline` — each new timeline entry, with the entry's index as the event `id`.
 *
 * A new stream starts at the newest entry; one that reconnects with `Last-Event-ID` (or asks `?after=`) gets every
 * timeline entry after that index first, so it misses none. Phase and progress are current state, sent again on
 * connecting. The stream ends after an ended session's last entries, and as soon as `authorized` says the key that
 * opened it no longer holds what it held then (checked at every poll).
 */
export async function sessionEvents(
  c: Context,
  handle: SessionHandle,
  options: EventStreamOptions = {},
  {
    status: readStatus = (h) => h.status(),
    timeline: readTimeline = (h, from) => h.timelinePage({ from, limit: 100, all: true }),
    authorized = () => true,
    clock = new PollClock(options.pollMs),
  }: StreamReaders = {},
) {
  const asked = lastEventId(c, handle.sessionId);
  // Unknown session or no access: a problem document, before any stream starts.
  const first = await readStatus(handle);
  // A first connection follows from now on; `?after=0` replays the whole timeline.
  const after = asked ?? first.timelineLength;
  return streamSSE(c, (stream) =>
    follow(stream, handle, first, after, options, { status: readStatus, timeline: readTimeline, authorized, clock }),
  );
}

async function follow(
  stream: SSEStreamingApi,
  handle: SessionHandle,
  first: SessionStatus,
  after: number,
  { keepAliveMs = 15_000 }: EventStreamOptions,
  readers: Required<StreamReaders>,
): Promise<void> {
  let status = first;
  let sentPhase: string | undefined;
  // The newest phase change sent (by its number within the run): the first status's history is not replayed.
  let sentRun = first.runs;
  let sentChange = first.recentPhases?.at(-1)?.n ?? 0;
  let lastIndex = after;
  let lastProgress = '';
  let lastWrite = Date.now();
  const write = async (event: string, data: unknown, id?: string) => {
    await stream.writeSSE({ event, data: JSON.stringify(data), ...(id ? { id } : {}) });
    lastWrite = Date.now();
  };
  while (!stream.aborted) {
    // Entries first: a client that sees a phase has seen the entries that led to it.
    while (status.timelineLength > lastIndex && !stream.aborted) {
      const page = await readers.timeline(handle, lastIndex + 1);
      const entries = page.entries.filter((e): e is TimelineEntry & { index: number } => (e.index ?? 0) > lastIndex);
      if (entries.length === 0) break;
      for (const entry of entries) {
        await write('timeline', entry, String(entry.index));
        lastIndex = entry.index;
      }
    }
    // Every phase the session went through since the last read, then where it is now.
    const { headIndex, failure } = status;
    const changes = status.recentPhases ?? [];
    const missed = status.runs === sentRun ? changes.filter((p) => p.n > sentChange) : changes;
    for (const change of missed) {
      if (change.phase === sentPhase) continue;
      sentPhase = change.phase;
      await write('phase', { phase: change.phase, headIndex, failure, updatedAt: change.at });
    }
    sentRun = status.runs;
    sentChange = changes.at(-1)?.n ?? sentChange;
    if (status.phase !== sentPhase) {
      sentPhase = status.phase;
      await write('phase', { phase: status.phase, headIndex, failure, updatedAt: status.updatedAt });
    }
    if (FINAL_PHASES.includes(status.phase)) break;
    // Progress exists only while a control runs: a paused or running session is not asked for it every poll.
    if (status.pendingControls > 0 || !(STABLE_PHASES as readonly string[]).includes(status.phase)) {
      const progress: IoProgress[] = await handle.progress().catch(() => []);
      const text = JSON.stringify(progress);
      if (text !== lastProgress) {
        lastProgress = text;
        for (const p of progress) await write('progress', p);
      }
    }
    if (Date.now() - lastWrite >= keepAliveMs) {
      await stream.write(': keep-alive\n\n');
      lastWrite = Date.now();
    }
    await readers.clock.wait();
    // A key revoked, or moved to another role or tenant, while its stream is open: the stream ends with it.
    if (stream.aborted || !readers.authorized()) break;
    status = await readers.status(handle);
  }
}

function lastEventId(c: Context, sessionId: string): number | undefined {
  const raw = c.req.header('last-event-id') ?? c.req.query('after');
  if (raw === undefined || raw === '') return undefined;
  const n = Number(raw);
  if (!Number.isSafeInteger(n) || n < 0) {
    throw new InvalidInputError('Last-Event-ID (or after) must be a timeline index', sessionId, []);
  }
  return n;
}
