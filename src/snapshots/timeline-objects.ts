/**
 * Timeline layout 2, what every store writes (on a local directory too): one object per entry, written with the
 * backend's `create`, so that the index is the commit point and two appenders, in one process or on two machines,
 * never both store one index — no shared file, no append, no lock. A crash mid-write leaves at most the backend's
 * temp file (a dot-name on a local directory), which no listing shows: an entry is whole or absent.
 *
 *   <session>/timeline/<first index, 16 digits>.seg            empty: segment `first` has entries (a listing of
 *                                                              `timeline/` finds segments without listing entries)
 *   <session>/timeline-entries/<first, 16 digits>/<index, 16>  the entry: one frame, as in a format-1 segment
 *   <session>/timeline/<first, 16 digits>.log                  layout-1 segments (timeline-log.ts) of earlier
 *                                                              releases: read, never written nor rewritten
 *
 * A page merges both by index; where an index is in both, the segment's record is the one (it was stored first, and
 * an append checks it before creating the object, so only a writer of layout 1 racing this one could add the other).
 *
 * An entry object holds exactly the frame a format-1 segment would (header with the index, CRC, sealed record), so
 * records are sealed, bound and opened the same way. Idempotency is as in format 1: the same index with
 * byte-identical JSON is skipped, other JSON is TimelineConflictError, checked before anything is written; an
 * appender that loses a create race compares with the winner's record and fails the same way if they differ.
 */
import type { BlobBackend } from './blob/backend';
import { SnapshotCorruptError, TimelineConflictError } from './errors';
import { asStoreFull } from './store-full';
import {
  checkSession,
  entryOf,
  firstOfEachIndex,
  frameOf,
  pageOptions,
  parseSegment,
  pendingEntries,
  segmentName,
  segmentStart,
  SEGMENT_SPAN,
  TIMELINE_DIR,
  MAX_TIMELINE_RECORD_BYTES,
  type Frame,
  type Pending,
  type ReadTimelineOptions,
  type SealerFor,
  type TimelineLog,
  type TimelinePage,
  type TimelineRecord,
} from './timeline-log';

export const TIMELINE_ENTRIES_DIR = 'timeline-entries';
/**
 * The version of the timeline's layout this module writes (layout 1: segment files, timeline-log.ts). The store
 * records no number: the layout of a record is its key (`timeline/*.log` or `timeline-entries/…`), and a store of an
 * earlier release is read as it is, never rewritten.
 */
export const TIMELINE_LAYOUT_VERSION = 2;
/** A format-1 segment holds at most SEGMENT_SPAN records, each a header and at most this much. */
const MAX_SEGMENT_BYTES = SEGMENT_SPAN * (MAX_TIMELINE_RECORD_BYTES + 1024);
const MAX_ENTRY_BYTES = MAX_TIMELINE_RECORD_BYTES + 1024;
const LISTED = /^(\d{16})\.(log|seg)$/;
/** Entry objects read or written at once by one append or page. */
const ENTRIES_AT_ONCE = 16;

/** An index a page lists: how to load its record, and whether a layout-1 record and an object both hold it. */
interface Listed {
  index: number;
  load: () => Promise<Stored>;
  twin: boolean;
}

/** A stored record: its frame and the bytes its body is in. */
interface Stored {
  frame: Frame;
  bytes: Buffer;
}

export class TimelineObjects implements TimelineLog {
  constructor(
    private readonly backend: BlobBackend,
    private readonly sealerFor: SealerFor,
  ) {}

  async appendTimeline(sessionId: string, entries: readonly TimelineRecord[]): Promise<void> {
    checkSession(sessionId);
    const pending = pendingEntries(sessionId, entries);
    if (pending.size === 0) return;
    try {
      await this.append(
        sessionId,
        [...pending.values()].sort((a, b) => a.index - b.index),
      );
    } catch (err) {
      throw asStoreFull(err, sessionId, '', `the timeline of session ${sessionId}`);
    }
  }

  private async append(sessionId: string, pending: Pending[]): Promise<void> {
    // First every repeated index is checked, so a conflict writes nothing.
    const starts = [...new Set(pending.map((e) => segmentStart(e.index)))];
    const legacy = new Map(
      await Promise.all(starts.map(async (start) => [start, await this.legacySegment(sessionId, start)] as const)),
    );
    const stored = await atMostAtOnce(
      pending,
      async (entry) =>
        legacy.get(segmentStart(entry.index))!.get(entry.index) ?? (await this.entry(sessionId, entry.index)),
    );
    const fresh: Pending[] = [];
    let reader: Awaited<ReturnType<SealerFor>> | null = null;
    for (const [i, entry] of pending.entries()) {
      const found = stored[i];
      if (!found) {
        fresh.push(entry);
        continue;
      }
      reader ??= await this.sealerFor(sessionId, 'read');
      this.checkSame(sessionId, entry, found, reader);
    }
    if (fresh.length === 0) return;
    const sealer = await this.sealerFor(sessionId, 'append');
    for (const start of new Set(fresh.map((e) => segmentStart(e.index)))) {
      // Looked up first: a create that finds the marker there has already paid for a durable write.
      const marker = `${sessionId}/${TIMELINE_DIR}/${segmentKey(start)}.seg`;
      if (!(await this.backend.stat(marker))) await this.backend.create(marker, Buffer.alloc(0));
    }
    // Each entry is its own commit point, so they are written side by side (see bench/README.md, "Timeline").
    const lost = await atMostAtOnce(fresh, async (entry) => {
      const frame = frameOf(sealer.kind, entry.index, sealer.seal(entry.index, entry.json));
      return (await this.backend.create(this.entryKey(sessionId, entry.index), frame)) ? null : entry;
    });
    for (const entry of lost) {
      if (!entry) continue;
      // Another appender stored this index meanwhile: the same entry (a retried activity), or a conflict.
      const winner = await this.entry(sessionId, entry.index);
      if (!winner) throw new Error(`timeline entry ${entry.index} of session ${sessionId} vanished`);
      reader ??= await this.sealerFor(sessionId, 'read');
      this.checkSame(sessionId, entry, winner, reader);
    }
  }

  private checkSame(sessionId: string, entry: Pending, stored: Stored, reader: Awaited<ReturnType<SealerFor>>): void {
    const { frame, bytes } = stored;
    const json = reader.open(frame.index, frame.kind, bytes.subarray(frame.at, frame.at + frame.length));
    if (!json.equals(entry.json)) {
      throw new TimelineConflictError(
        `timeline index ${entry.index} of session ${sessionId} is stored already with other content`,
        sessionId,
        entry.index,
      );
    }
  }

  async readTimeline(sessionId: string, options: ReadTimelineOptions = {}): Promise<TimelinePage> {
    checkSession(sessionId);
    const { from, limit } = pageOptions(options);
    const starts = new Set<number>();
    for await (const key of this.backend.listKeys(`${sessionId}/${TIMELINE_DIR}/`)) {
      const match = LISTED.exec(key.slice(sessionId.length + TIMELINE_DIR.length + 2));
      if (match && Number(match[1]) + SEGMENT_SPAN > from) starts.add(Number(match[1]));
    }
    // One entry more than the page, to know where the next page starts.
    const found: Listed[] = [];
    for (const start of [...starts].sort((a, b) => a - b)) {
      const inSegment = new Map<number, Listed>();
      for (const [index, stored] of await this.legacySegment(sessionId, start)) {
        inSegment.set(index, { index, load: async () => stored, twin: false });
      }
      const prefix = `${sessionId}/${TIMELINE_ENTRIES_DIR}/${segmentKey(start)}/`;
      for await (const key of this.backend.listKeys(prefix)) {
        const index = Number(key.slice(prefix.length));
        if (!Number.isSafeInteger(index)) continue;
        const legacy = inSegment.get(index);
        // A layout-1 record of an index is the one (stored first); an object beside it must say the same.
        if (legacy) legacy.twin = true;
        else inSegment.set(index, { index, load: () => this.present(sessionId, index), twin: false });
      }
      const wanted = [...inSegment.values()].filter((e) => e.index >= from).sort((a, b) => a.index - b.index);
      found.push(...wanted.slice(0, limit + 1 - found.length));
      if (found.length > limit) break;
    }
    const next = found[limit]?.index ?? null;
    const listed = found.slice(0, limit);
    const page = await atMostAtOnce(listed, ({ load }) => load());
    if (page.length === 0) return { entries: [], next };
    const sealer = await this.sealerFor(sessionId, 'read');
    const open = ({ frame, bytes }: Stored): Buffer =>
      sealer.open(frame.index, frame.kind, bytes.subarray(frame.at, frame.at + frame.length));
    const entries: TimelineRecord[] = [];
    for (const [i, stored] of page.entries()) {
      const json = open(stored);
      if (listed[i]!.twin && !open(await this.present(sessionId, stored.frame.index)).equals(json)) {
        throw new TimelineConflictError(
          `timeline index ${stored.frame.index} of session ${sessionId} is stored twice with other content: in a ` +
            'segment file of an earlier release and as an entry object',
          sessionId,
          stored.frame.index,
        );
      }
      entries.push(entryOf(sessionId, stored.frame, json));
    }
    return { entries, next };
  }

  /** The entry object of `index`, which a listing found. */
  private async present(sessionId: string, index: number): Promise<Stored> {
    const stored = await this.entry(sessionId, index);
    if (!stored) throw new Error(`timeline entry ${index} of session ${sessionId} vanished`);
    return stored;
  }

  /** Removes the session's timeline, both formats (shred). */
  async remove(sessionId: string): Promise<void> {
    checkSession(sessionId);
    for (const dir of [TIMELINE_DIR, TIMELINE_ENTRIES_DIR]) {
      for await (const { key } of this.backend.list(`${sessionId}/${dir}/`)) await this.backend.delete(key);
    }
  }

  private entryKey(sessionId: string, index: number): string {
    return `${sessionId}/${TIMELINE_ENTRIES_DIR}/${segmentKey(segmentStart(index))}/${String(index).padStart(16, '0')}`;
  }

  /** The entry object of `index`, parsed, or null if there is none. */
  private async entry(sessionId: string, index: number): Promise<Stored | null> {
    const bytes = await this.backend.read(this.entryKey(sessionId, index), { maxBytes: MAX_ENTRY_BYTES });
    if (bytes === null) return null;
    const { frames, end } = parseSegment(bytes, 0, sessionId, segmentStart(index));
    if (frames.length !== 1 || end !== bytes.length || frames[0]!.index !== index) {
      throw new SnapshotCorruptError(
        `timeline entry ${index} of session ${sessionId} is not one record of its index`,
        sessionId,
      );
    }
    return { frame: frames[0]!, bytes };
  }

  /** The records of a format-1 segment file, the first of each index, by index (none if there is no such file). */
  private async legacySegment(sessionId: string, start: number): Promise<Map<number, Stored>> {
    const key = `${sessionId}/${TIMELINE_DIR}/${segmentName(start)}`;
    const bytes = await this.backend.read(key, { maxBytes: MAX_SEGMENT_BYTES });
    const out = new Map<number, Stored>();
    if (bytes === null) return out;
    for (const frame of firstOfEachIndex(parseSegment(bytes, 0, sessionId, start).frames)) {
      out.set(frame.index, { frame, bytes });
    }
    return out;
  }
}

/** `run` of every item, at most ENTRIES_AT_ONCE at a time; the results in the items' order. */
async function atMostAtOnce<T, R>(items: readonly T[], run: (item: T) => Promise<R>): Promise<R[]> {
  const results: R[] = new Array<R>(items.length);
  let next = 0;
  const lane = async (): Promise<void> => {
    while (next < items.length) {
      const i = next++;
      results[i] = await run(items[i]!);
    }
  };
  await Promise.all(Array.from({ length: Math.min(ENTRIES_AT_ONCE, items.length) }, lane));
  return results;
}

function segmentKey(start: number): string {
  return segmentName(start).slice(0, -'.log'.length);
}
