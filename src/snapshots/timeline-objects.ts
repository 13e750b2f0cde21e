/**
 * Timeline format 2, for stores on a blob backend that is not a local directory: one object per entry, written with
 * the backend's `create`, so that the index is the commit point and two appenders on two machines never both store
 * one index — no shared file, no append, no lock.
 *
 *   <session>/timeline/<first index, 16 digits>.seg            empty: segment `first` has entries (a listing of
 *                                                              `timeline/` finds segments without listing entries)
 *   <session>/timeline-entries/<first, 16 digits>/<index, 16>  the entry: one frame, as in a format-1 segment
 *   <session>/timeline/<first, 16 digits>.log                  format-1 segments (timeline-log.ts), read as before
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
/** The version of the timeline's layout this module writes (format 1: segment files, timeline-log.ts). */
export const TIMELINE_LAYOUT_VERSION = 2;
/** A format-1 segment holds at most SEGMENT_SPAN records, each a header and at most this much. */
const MAX_SEGMENT_BYTES = SEGMENT_SPAN * (MAX_TIMELINE_RECORD_BYTES + 1024);
const MAX_ENTRY_BYTES = MAX_TIMELINE_RECORD_BYTES + 1024;
const LISTED = /^(\d{16})\.(log|seg)$/;

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
    const legacy = new Map<number, Map<number, Stored>>();
    const fresh: Pending[] = [];
    let reader: Awaited<ReturnType<SealerFor>> | null = null;
    for (const entry of pending) {
      const start = segmentStart(entry.index);
      if (!legacy.has(start)) legacy.set(start, await this.legacySegment(sessionId, start));
      const stored = legacy.get(start)!.get(entry.index) ?? (await this.entry(sessionId, entry.index));
      if (!stored) {
        fresh.push(entry);
        continue;
      }
      reader ??= await this.sealerFor(sessionId, 'read');
      this.checkSame(sessionId, entry, stored, reader);
    }
    if (fresh.length === 0) return;
    const sealer = await this.sealerFor(sessionId, 'append');
    for (const start of new Set(fresh.map((e) => segmentStart(e.index)))) {
      await this.backend.create(`${sessionId}/${TIMELINE_DIR}/${segmentKey(start)}.seg`, Buffer.alloc(0));
    }
    for (const entry of fresh) {
      const frame = frameOf(sealer.kind, entry.index, sealer.seal(entry.index, entry.json));
      if (await this.backend.create(this.entryKey(sessionId, entry.index), frame)) continue;
      // Another appender stored this index meanwhile: the same entry (a retried activity), or a conflict.
      const stored = await this.entry(sessionId, entry.index);
      if (!stored) throw new Error(`timeline entry ${entry.index} of session ${sessionId} vanished`);
      reader ??= await this.sealerFor(sessionId, 'read');
      this.checkSame(sessionId, entry, stored, reader);
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
    for await (const { key } of this.backend.list(`${sessionId}/${TIMELINE_DIR}/`)) {
      const match = LISTED.exec(key.slice(sessionId.length + TIMELINE_DIR.length + 2));
      if (match && Number(match[1]) + SEGMENT_SPAN > from) starts.add(Number(match[1]));
    }
    // One entry more than the page, to know where the next page starts.
    const found: (() => Promise<Stored>)[] = [];
    const indices: number[] = [];
    for (const start of [...starts].sort((a, b) => a - b)) {
      const inSegment = new Map<number, () => Promise<Stored>>();
      for (const [index, stored] of await this.legacySegment(sessionId, start)) {
        inSegment.set(index, async () => stored);
      }
      const prefix = `${sessionId}/${TIMELINE_ENTRIES_DIR}/${segmentKey(start)}/`;
      for await (const { key } of this.backend.list(prefix)) {
        const index = Number(key.slice(prefix.length));
        // The first stored wins, as in format 1: a format-1 record of an index is never shadowed.
        if (Number.isSafeInteger(index) && !inSegment.has(index)) {
          inSegment.set(index, async () => {
            const stored = await this.entry(sessionId, index);
            if (!stored) throw new Error(`timeline entry ${index} of session ${sessionId} vanished`);
            return stored;
          });
        }
      }
      for (const index of [...inSegment.keys()].filter((i) => i >= from).sort((a, b) => a - b)) {
        if (indices.length > limit) break;
        indices.push(index);
        found.push(inSegment.get(index)!);
      }
      if (indices.length > limit) break;
    }
    const next = indices[limit] ?? null;
    const page = await Promise.all(found.slice(0, limit).map((load) => load()));
    if (page.length === 0) return { entries: [], next };
    const sealer = await this.sealerFor(sessionId, 'read');
    const entries = page.map(({ frame, bytes }) =>
      entryOf(
        sessionId,
        frame,
        sealer.open(frame.index, frame.kind, bytes.subarray(frame.at, frame.at + frame.length)),
      ),
    );
    return { entries, next };
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

function segmentKey(start: number): string {
  return segmentName(start).slice(0, -'.log'.length);
}
