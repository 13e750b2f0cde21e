/**
 * A session's timeline log: durable, append-only, crash-safe entries `{ index, ... }` kept in the store beside the
 * session's checkpoints, so the timeline outlives the workflow and never grows its history.
 *
 * This module holds what both layouts share (the record format, the TimelineLog interface) and layout 1, the segment
 * files of earlier releases, which the store reads (timeline-objects.ts) but no longer writes: every store now writes
 * layout 2, one object per entry. TimelineSegments, layout 1's writer, stays for the benches that compare the two and
 * for tests that make stores as earlier releases left them.
 *
 * Layout 1: `<root>/<sessionId>/timeline/<first index, 16 digits>.log`, one segment file per SEGMENT_SPAN indices
 * (index i lives in the segment starting at ⌊(i-1)/SEGMENT_SPAN⌋·SEGMENT_SPAN + 1), so a page reads one or two files
 * and an append rewrites nothing: at 100,000 entries a session has 100 segments, not 100,000 files.
 *
 * A segment is a sequence of frames, in the order they were appended (not necessarily index order: indices may arrive
 * with gaps, and a gap may be filled later):
 *
 *   magic "DTL" + record kind u8 (4) | body length u32 BE (4) | index u64 BE (8) | CRC-32 of the 16 bytes before (4) | body
 *
 * The body is the sealed record: kind 1 (`plainTimelineSealer`) is the entry's JSON followed by a SHA-256 binding it to
 * session and index (format 1, and the chunked store without encryption: detects damage and misfiled records, not
 * tampering); kind 2 (engine/timeline-seal.ts) is a sealed object of the envelope in engine/crypto.ts, AES-256-GCM
 * under the lineage's data key, whose authenticated header names the tenant, lineage, session and index.
 *
 * Crash safety. An append writes all its frames with one O_APPEND write and fsyncs the file (and the directory when
 * the file is new) before it resolves. A crash mid-write leaves at most a torn tail: fewer bytes than a header, a body
 * shorter than its header says, or (file systems that extend a file before its data is written) zeros to the end.
 * Readers ignore a torn tail; the next append truncates it before writing. Anything else that does not parse — a
 * header whose CRC fails before the end of the file — is damage (SnapshotCorrupt), never silently skipped, and a
 * record that parses but does not open is SnapshotTampered (or SnapshotCorrupt for a plaintext record's digest).
 * Dropping records from the end of a segment is not detectable (like deleting a manifest): what the log promises is
 * that every entry it returns is the one appended for that session and index.
 *
 * Concurrency. Appenders of a session are serialized: in a process by a queue, across processes (workers sharing the
 * store, a retried activity whose first attempt still runs) by `<session>/timeline/.lock`, created exclusively and
 * touched while held, broken when left untouched for LOCK_STALE_MS (its holder died). Without it an appender could
 * take another's write in flight for a torn tail and truncate it. Readers take no lock: they parse to the last
 * complete frame.
 *
 * Idempotency. An index already stored with byte-identical JSON is skipped (activities are retried); with other JSON
 * the whole append is refused with TimelineConflictError before anything is written. Should two frames for one index
 * ever exist (a lock broken under a live holder), readers take the first.
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import * as fs from 'node:fs/promises';
import { join } from 'node:path';
import { z } from 'zod';
import { SessionId } from '../domain/schemas';
import { isErrnoError } from '../errors';
import { ensureDir, fsyncDir, writevAll } from '../fs-io';
import { keepTouched } from './abandoned';
import { SnapshotCorruptError, SnapshotTamperedError, TimelineConflictError } from './errors';
import { asStoreFull } from './store-full';

/** Indices per segment file. */
export const SEGMENT_SPAN = 1000;
/** An entry's JSON is at most this many bytes. */
export const MAX_TIMELINE_RECORD_BYTES = 64 * 1024;
export const DEFAULT_TIMELINE_PAGE = 100;
export const MAX_TIMELINE_PAGE = 1000;
export const TIMELINE_DIR = 'timeline';
/** The version of a timeline record's payload (a sealed record's header says it). */
export const TIMELINE_FORMAT_VERSION = 1;

/** One timeline entry: an object with the index the workflow gave it (1, 2, 3… per session); the rest is opaque JSON. */
export const TimelineRecord = z.looseObject({ index: z.number().int().min(1).max(Number.MAX_SAFE_INTEGER) });
export type TimelineRecord = z.infer<typeof TimelineRecord>;

export interface ReadTimelineOptions {
  /** The first index to return (inclusive); 1 by default. */
  from?: number;
  /** How many entries at the most; DEFAULT_TIMELINE_PAGE by default, MAX_TIMELINE_PAGE at the most. */
  limit?: number;
}

export interface TimelinePage {
  /** Entries in index order; indices never appended (gaps) are simply absent. */
  entries: TimelineRecord[];
  /** The `from` of the next page: the next stored index after this page, or null when there is none. */
  next: number | null;
}

/**
 * A session's timeline in the snapshot store. Separate from SnapshotStore: a timeline is appended many times per
 * checkpoint and read by page, and the wrappers of SnapshotStore (tests, benches) need not grow with it. Both stores
 * implement it.
 */
export interface TimelineLog {
  /**
   * Appends `entries` (any order; gaps allowed) to the session's timeline, durably once it resolves. Idempotent: an
   * index stored already with byte-identical JSON is skipped. An index stored with other JSON (or given twice
   * differently) refuses the whole append with TimelineConflictError, and nothing is written. A claimed session
   * without checkpoints may append. Throws TypeError for an invalid session id or entry, StoreFullError when the file
   * system has no room.
   */
  appendTimeline(sessionId: string, entries: readonly TimelineRecord[]): Promise<void>;

  /**
   * A page of the session's timeline in index order, from `from`. An unknown session has an empty timeline. Throws
   * SnapshotTamperedError (code SnapshotTampered, or SnapshotCorrupt in plaintext) for a record that does not verify,
   * SnapshotCorruptError for a damaged segment, KeyUnavailableError when the lineage's data key is gone.
   */
  readTimeline(sessionId: string, options?: ReadTimelineOptions): Promise<TimelinePage>;
}

/** Seals and opens the records of one session's timeline. */
export interface TimelineSealer {
  /** The record kind (frame byte 4) this sealer writes. */
  readonly kind: number;
  readonly seal: (index: number, json: Buffer) => Buffer;
  /** The record's JSON, verified for this session and index; throws a SnapshotError when it does not verify. */
  readonly open: (index: number, kind: number, body: Buffer) => Buffer;
}

/** The sealer of a session's records: for an append (may create the lineage's data key) or a read. */
export type SealerFor = (sessionId: string, purpose: 'append' | 'read') => Promise<TimelineSealer>;

export const PLAIN_RECORD = 1;
export const SEALED_RECORD = 2;

const MAGIC = Buffer.from('DTL', 'latin1');
const HEADER_BYTES = 20;

/** Whether `bytes` (a segment's first bytes) start with a frame of an encrypted record: a data key sealed it. */
export function startsWithSealedRecord(bytes: Buffer): boolean {
  return bytes.length >= 4 && bytes.subarray(0, 3).equals(MAGIC) && bytes[3] === SEALED_RECORD;
}
const DIGEST_BYTES = 32;
const SEGMENT_NAME = /^(\d{16})\.log$/;
/** A lock untouched this long belongs to a dead appender; a live one touches it every LOCK_TOUCH_MS. */
const LOCK_STALE_MS = 30_000;
const LOCK_TOUCH_MS = 5_000;
/** How long an appender waits for the lock before giving up (a plain, retryable error). */
const LOCK_WAIT_MS = 60_000;

/**
 * Kind 1: the entry's JSON, then SHA-256 over a label, the session, the index and the JSON. Damage and misfiled records
 * are detected (SnapshotTamperedError with reason 'corrupt', code SnapshotCorrupt); tampering is not: anyone who can
 * write the store can recompute the digest.
 */
export function plainTimelineSealer(sessionId: string): TimelineSealer {
  const digest = (index: number, json: Buffer): Buffer =>
    createHash('sha256').update(`durable-sessions/timeline/v1\0${sessionId}\0${index}\0`).update(json).digest();
  return {
    kind: PLAIN_RECORD,
    seal: (index, json) => Buffer.concat([json, digest(index, json)]),
    open: (index, kind, body) => {
      const fail = (detail: string): never => {
        throw new SnapshotTamperedError(`timeline record ${index} of session ${sessionId} ${detail}`, 'corrupt', {
          sessionId,
          objectId: `timeline/${index}`,
        });
      };
      if (kind !== PLAIN_RECORD) fail(`is of kind ${kind}, not a plaintext record`);
      if (body.length < DIGEST_BYTES) fail('is too short');
      const json = body.subarray(0, body.length - DIGEST_BYTES);
      if (!timingSafeEqual(digest(index, json), body.subarray(body.length - DIGEST_BYTES))) {
        fail('does not match its SHA-256 (plaintext: damaged, or not this session and index)');
      }
      return json;
    },
  };
}

/** A complete frame of a segment. */
export interface Frame {
  index: number;
  kind: number;
  /** Where the body starts in the segment, and its length. */
  at: number;
  length: number;
}

interface ParsedSegment {
  frames: Frame[];
  /** The end of the last complete frame: where a torn tail starts, or the file's size. */
  end: number;
}

/** What this process knows of a segment file (inode `ino`, born at `born`): its frames up to `end` of `size` bytes. */
interface SegmentIndex extends ParsedSegment {
  ino: number;
  born: number;
  size: number;
  /** The first frame of each index, in index order. */
  ordered: Frame[];
}

const EMPTY_INDEX: SegmentIndex = { ino: -1, born: -1, size: 0, end: 0, frames: [], ordered: [] };
/** Segment indexes kept per store: a frame is four numbers, a segment at most SEGMENT_SPAN of them (and repeats). */
const MAX_CACHED_SEGMENTS = 256;

/** One entry of an append, as it will be stored. */
export interface Pending {
  index: number;
  json: Buffer;
}

/**
 * Layout 1: the segment files of the sessions under `root`, each record sealed by `sealerFor`, as earlier releases
 * wrote them (see the module doc). No store writes it.
 */
export class TimelineSegments implements TimelineLog {
  /** The tail of each session's queue of appends in this process. */
  private readonly queues = new Map<string, Promise<unknown>>();
  /** Segments parsed so far, by path (see indexOf). */
  private readonly indexes = new Map<string, SegmentIndex>();

  constructor(
    private readonly root: string,
    private readonly sealerFor: SealerFor,
  ) {}

  dir(sessionId: string): string {
    return join(this.root, sessionId, TIMELINE_DIR);
  }

  async appendTimeline(sessionId: string, entries: readonly TimelineRecord[]): Promise<void> {
    checkSession(sessionId);
    const pending = pendingEntries(sessionId, entries);
    if (pending.size === 0) return;
    const run = (): Promise<void> => this.appendLocked(sessionId, pending);
    // One appender of a session at a time in this process; the lock file orders processes.
    const previous = this.queues.get(sessionId) ?? Promise.resolve();
    const mine = previous.then(run, run);
    const tail = mine.catch(() => undefined);
    this.queues.set(sessionId, tail);
    try {
      await mine;
    } catch (err) {
      throw asStoreFull(err, sessionId, '', `the timeline of session ${sessionId}`);
    } finally {
      if (this.queues.get(sessionId) === tail) this.queues.delete(sessionId);
    }
  }

  async readTimeline(sessionId: string, options: ReadTimelineOptions = {}): Promise<TimelinePage> {
    checkSession(sessionId);
    const { from, limit } = pageOptions(options);
    const dir = this.dir(sessionId);
    const starts = (await segmentStarts(dir)).filter((start) => start + SEGMENT_SPAN > from);
    // One frame more than the page, to know where the next page starts.
    const found: { frame: Frame; body: Buffer }[] = [];
    for (const start of starts) {
      const path = join(dir, segmentName(start));
      const handle = await fs.open(path, 'r').catch((err: unknown) => {
        if (isErrnoError(err, 'ENOENT')) return null;
        throw err;
      });
      if (handle === null) continue;
      try {
        const index = await this.indexOf(handle, path, sessionId, start);
        const wanted = index.ordered.filter((f) => f.index >= from).slice(0, limit + 1 - found.length);
        const bodies = await readBodies(handle, wanted.slice(0, limit - found.length));
        wanted.forEach((frame, i) => found.push({ frame, body: bodies[i] ?? Buffer.alloc(0) }));
      } finally {
        await handle.close();
      }
      if (found.length > limit) break;
    }
    const page = found.slice(0, limit);
    const next = found[limit]?.frame.index ?? null;
    if (page.length === 0) return { entries: [], next };
    const sealer = await this.sealerFor(sessionId, 'read');
    const entries = page.map(({ frame, body }) =>
      entryOf(sessionId, frame, sealer.open(frame.index, frame.kind, body)),
    );
    return { entries, next };
  }

  /** Removes the session's timeline (shred). */
  async remove(sessionId: string): Promise<void> {
    checkSession(sessionId);
    for (const path of this.indexes.keys()) if (path.startsWith(this.dir(sessionId))) this.indexes.delete(path);
    await fs.rm(this.dir(sessionId), { recursive: true, force: true });
    await fsyncDir(join(this.root, sessionId)).catch((err: unknown) => {
      if (!isErrnoError(err, 'ENOENT')) throw err;
    });
  }

  /**
   * The frames of an open segment. Segments only grow (but for a torn tail an appender truncates), so what this
   * process parsed before is kept, by path, and only the bytes after its last complete frame are read again.
   */
  private async indexOf(handle: fs.FileHandle, path: string, sessionId: string, start: number): Promise<SegmentIndex> {
    const { ino, birthtimeMs, size } = await handle.stat();
    const known = this.indexes.get(path);
    this.indexes.delete(path);
    // The same file (a segment removed by shred and made again may reuse the inode, not the birth time).
    const same = known !== undefined && known.ino === ino && known.born === birthtimeMs;
    let index: SegmentIndex;
    if (same && known.end === size) {
      index = known;
    } else {
      const base = same && size >= known.end ? known : null;
      const from = base?.end ?? 0;
      const bytes = await readRange(handle, from, size - from);
      const parsed = parseSegment(bytes, from, sessionId, start);
      const frames = [...(base?.frames ?? []), ...parsed.frames];
      index = { ino, born: birthtimeMs, end: parsed.end, size, frames, ordered: firstOfEachIndex(frames) };
    }
    // Most recently used last; the oldest go beyond MAX_CACHED_SEGMENTS.
    this.indexes.set(path, index);
    for (const old of this.indexes.keys()) {
      if (this.indexes.size <= MAX_CACHED_SEGMENTS) break;
      this.indexes.delete(old);
    }
    return index;
  }

  private async appendLocked(sessionId: string, pending: Map<number, Pending>): Promise<void> {
    const dir = this.dir(sessionId);
    await ensureDurableDir(join(this.root, sessionId), this.root);
    const newDir = await ensureDurableDir(dir, join(this.root, sessionId));
    await withLock(dir, sessionId, async () => {
      const bySegment = new Map<number, Pending[]>();
      for (const entry of [...pending.values()].sort((a, b) => a.index - b.index)) {
        const start = segmentStart(entry.index);
        bySegment.set(start, [...(bySegment.get(start) ?? []), entry]);
      }
      const open: { handle: fs.FileHandle; path: string; index: SegmentIndex; fresh: Pending[] }[] = [];
      let created = newDir;
      try {
        // First every segment is indexed and every repeated index checked, so a conflict writes nothing.
        const repeats: { entry: Pending; frame: Frame; handle: fs.FileHandle }[] = [];
        for (const [start, entries] of bySegment) {
          const path = join(dir, segmentName(start));
          const opened = await openForAppend(path);
          created ||= opened.created;
          const slot = { handle: opened.handle, path, index: EMPTY_INDEX, fresh: [] as Pending[] };
          open.push(slot);
          slot.index = await this.indexOf(slot.handle, path, sessionId, start);
          const stored = new Map(slot.index.ordered.map((f) => [f.index, f]));
          for (const entry of entries) {
            const frame = stored.get(entry.index);
            if (frame) repeats.push({ entry, frame, handle: slot.handle });
            else slot.fresh.push(entry);
          }
        }
        if (repeats.length > 0) {
          const sealer = await this.sealerFor(sessionId, 'read');
          for (const { entry, frame, handle } of repeats) {
            const [body] = await readBodies(handle, [frame]);
            if (!sealer.open(frame.index, frame.kind, body!).equals(entry.json)) {
              throw new TimelineConflictError(
                `timeline index ${entry.index} of session ${sessionId} is stored already with other content`,
                sessionId,
                entry.index,
              );
            }
          }
        }
        if (open.every((slot) => slot.fresh.length === 0)) return;
        const sealer = await this.sealerFor(sessionId, 'append');
        for (const slot of open) {
          if (slot.fresh.length === 0) continue;
          const frames = slot.fresh.map((entry) =>
            frameOf(sealer.kind, entry.index, sealer.seal(entry.index, entry.json)),
          );
          // A torn tail (a crash mid-write) goes first: the new frames must follow the last complete one.
          const { end, size } = slot.index;
          if (end < size) {
            await slot.handle.truncate(end);
            this.indexes.set(slot.path, { ...slot.index, size: end });
          }
          await writevAll(slot.handle, frames);
          await slot.handle.sync();
        }
      } finally {
        await Promise.all(open.map((slot) => slot.handle.close()));
      }
      // A new segment's name is durable once the directory is.
      if (created) await fsyncDir(dir);
    });
  }
}

export function checkSession(sessionId: string): void {
  if (!SessionId.safeParse(sessionId).success) {
    throw new TypeError(`invalid session id: ${JSON.stringify(sessionId)}`);
  }
}

export function pageOptions(options: ReadTimelineOptions): { from: number; limit: number } {
  const from = options.from ?? 1;
  const limit = options.limit ?? DEFAULT_TIMELINE_PAGE;
  if (!Number.isSafeInteger(from) || from < 1) throw new RangeError(`from must be an index (1 or more), not ${from}`);
  if (!Number.isSafeInteger(limit) || limit < 1 || limit > MAX_TIMELINE_PAGE) {
    throw new RangeError(`limit must be 1 to ${MAX_TIMELINE_PAGE}, not ${limit}`);
  }
  return { from, limit };
}

/** The entries of an append by index, checked, as their JSON; the same index twice must be the same JSON. */
export function pendingEntries(sessionId: string, entries: readonly TimelineRecord[]): Map<number, Pending> {
  if (!Array.isArray(entries)) throw new TypeError('timeline entries must be an array');
  const pending = new Map<number, Pending>();
  for (const [position, entry] of entries.entries()) {
    const parsed = TimelineRecord.safeParse(entry);
    if (!parsed.success) {
      throw new TypeError(`invalid timeline entry at ${position}: ${z.prettifyError(parsed.error)}`, {
        cause: parsed.error,
      });
    }
    let json: Buffer;
    try {
      json = Buffer.from(JSON.stringify(entry), 'utf8');
    } catch (err) {
      throw new TypeError(`timeline entry ${parsed.data.index} is not JSON`, { cause: err });
    }
    if (json.length > MAX_TIMELINE_RECORD_BYTES) {
      throw new TypeError(
        `timeline entry ${parsed.data.index} is ${json.length} bytes of JSON, more than ${MAX_TIMELINE_RECORD_BYTES}`,
      );
    }
    const index = parsed.data.index;
    const seen = pending.get(index);
    if (seen && !seen.json.equals(json)) {
      throw new TimelineConflictError(
        `timeline index ${index} of session ${sessionId} is given twice with other content`,
        sessionId,
        index,
      );
    }
    pending.set(index, { index, json });
  }
  return pending;
}

export function segmentStart(index: number): number {
  return Math.floor((index - 1) / SEGMENT_SPAN) * SEGMENT_SPAN + 1;
}

export function segmentName(start: number): string {
  return `${String(start).padStart(16, '0')}.log`;
}

/** The first indices of a timeline's segments, ascending (none for a session without a timeline). */
async function segmentStarts(dir: string): Promise<number[]> {
  let names: string[];
  try {
    names = await fs.readdir(dir);
  } catch (err) {
    if (isErrnoError(err, 'ENOENT')) return [];
    throw err;
  }
  const starts: number[] = [];
  for (const name of names) {
    const match = SEGMENT_NAME.exec(name);
    if (match) starts.push(Number(match[1]));
  }
  return starts.sort((a, b) => a - b);
}

async function readRange(handle: fs.FileHandle, at: number, length: number): Promise<Buffer> {
  const out = Buffer.allocUnsafe(length);
  let done = 0;
  while (done < length) {
    const { bytesRead } = await handle.read(out, done, length - done, at + done);
    if (bytesRead === 0) break;
    done += bytesRead;
  }
  return out.subarray(0, done);
}

/** The bodies of `frames` (of one segment), read in one range: a page's frames are mostly side by side. */
async function readBodies(handle: fs.FileHandle, frames: readonly Frame[]): Promise<Buffer[]> {
  if (frames.length === 0) return [];
  const first = Math.min(...frames.map((f) => f.at));
  const last = Math.max(...frames.map((f) => f.at + f.length));
  const bytes = await readRange(handle, first, last - first);
  // A segment truncated meanwhile (shorter than its index says) reads short: that body is empty and fails to open.
  return frames.map((f) => bytes.subarray(f.at - first, f.at - first + f.length));
}

async function openForAppend(path: string): Promise<{ handle: fs.FileHandle; created: boolean }> {
  try {
    return { handle: await fs.open(path, 'ax+'), created: true };
  } catch (err) {
    if (!isErrnoError(err, 'EEXIST')) throw err;
  }
  return { handle: await fs.open(path, 'a+'), created: false };
}

/** `mkdir` of `dir` whose new entry is made durable in `parent`; whether it was created. */
async function ensureDurableDir(dir: string, parent: string): Promise<boolean> {
  if ((await ensureDir(dir)) === undefined) return false;
  await fsyncDir(parent);
  return true;
}

export function frameOf(kind: number, index: number, body: Buffer): Buffer {
  const header = Buffer.allocUnsafe(HEADER_BYTES);
  MAGIC.copy(header, 0);
  header.writeUInt8(kind, 3);
  header.writeUInt32BE(body.length, 4);
  header.writeUInt32BE(Math.floor(index / 2 ** 32), 8);
  header.writeUInt32BE(index % 2 ** 32, 12);
  header.writeUInt32BE(crc32(header.subarray(0, 16)), 16);
  return Buffer.concat([header, body]);
}

/**
 * The complete frames of a segment and where they end. A torn tail is not an error; a frame that does not parse
 * before it is (SnapshotCorruptError), as is a frame filed in the wrong segment.
 */
export function parseSegment(segment: Buffer, base: number, sessionId: string, start: number): ParsedSegment {
  const frames: Frame[] = [];
  let at = 0;
  while (at < segment.length) {
    const rest = segment.length - at;
    if (rest < HEADER_BYTES || isZero(segment, at)) break;
    const damaged = (detail: string): never => {
      throw new SnapshotCorruptError(
        `timeline segment ${segmentName(start)} of session ${sessionId} is damaged at byte ${base + at}: ${detail}`,
        sessionId,
      );
    };
    if (!segment.subarray(at, at + 3).equals(MAGIC)) damaged('not a timeline frame (bad magic)');
    if (segment.readUInt32BE(at + 16) !== crc32(segment.subarray(at, at + 16))) damaged('its header fails its CRC');
    const kind = segment.readUInt8(at + 3);
    const length = segment.readUInt32BE(at + 4);
    const index = segment.readUInt32BE(at + 8) * 2 ** 32 + segment.readUInt32BE(at + 12);
    if (!Number.isSafeInteger(index) || index < 1 || segmentStart(index) !== start) {
      damaged(`index ${index} does not belong in this segment`);
    }
    if (rest < HEADER_BYTES + length) break;
    frames.push({ index, kind, at: base + at + HEADER_BYTES, length });
    at += HEADER_BYTES + length;
  }
  return { frames, end: base + at };
}

/** Whether every byte of `buffer` from `at` is zero: what some file systems show of a write a crash cut short. */
function isZero(buffer: Buffer, at: number): boolean {
  for (let i = at; i < buffer.length; i++) if (buffer[i] !== 0) return false;
  return true;
}

/** Frames in index order, the first of each index (in file order) only. */
export function firstOfEachIndex(frames: Frame[]): Frame[] {
  const sorted = [...frames].sort((a, b) => a.index - b.index); // stable: the first appended comes first
  return sorted.filter((frame, i) => i === 0 || sorted[i - 1]!.index !== frame.index);
}

export function entryOf(sessionId: string, frame: Frame, json: Buffer): TimelineRecord {
  let entry: unknown;
  try {
    entry = JSON.parse(json.toString('utf8'));
  } catch (err) {
    throw new SnapshotCorruptError(
      `timeline record ${frame.index} of session ${sessionId} is not JSON`,
      sessionId,
      '',
      {
        cause: err,
      },
    );
  }
  // What was appended passed TimelineRecord; a record that opened is that JSON, so checking its index is enough.
  if (typeof entry !== 'object' || entry === null || (entry as { index?: unknown }).index !== frame.index) {
    throw new SnapshotCorruptError(
      `timeline record ${frame.index} of session ${sessionId} is not an entry of index ${frame.index}`,
      sessionId,
    );
  }
  return entry as TimelineRecord;
}

/**
 * Runs `run` holding `<dir>/.lock` (see the module doc). The lock names its holder by a random token; a lock left
 * untouched for LOCK_STALE_MS is moved aside and removed, and taken again only if no other appender did so first.
 */
async function withLock<T>(dir: string, sessionId: string, run: () => Promise<T>): Promise<T> {
  const path = join(dir, '.lock');
  const token = randomBytes(8).toString('hex');
  const startedAt = Date.now();
  for (let attempt = 0; ; attempt++) {
    try {
      await fs.writeFile(path, token, { flag: 'wx' });
      break;
    } catch (err) {
      if (!isErrnoError(err, 'EEXIST')) throw err;
    }
    const held = await fs.stat(path).catch(() => null);
    if (held && Date.now() - held.mtimeMs > LOCK_STALE_MS) {
      await breakStaleLock(path, held.ino, token);
      continue;
    }
    if (Date.now() - startedAt > LOCK_WAIT_MS) {
      throw new Error(`the timeline of session ${sessionId} is locked by another appender (${path})`);
    }
    await new Promise((resolve) => setTimeout(resolve, Math.min(2 ** attempt, 50)));
  }
  const stop = keepTouched(() => [path], LOCK_TOUCH_MS);
  try {
    return await run();
  } finally {
    stop();
    // Only our own lock: should it have been broken meanwhile, another appender's is not removed.
    const holder = await fs.readFile(path, 'utf8').catch(() => null);
    if (holder === token) await fs.rm(path, { force: true });
  }
}

/** Moves aside the lock at `path` if it is still the stale one (inode `ino`) and removes it. */
async function breakStaleLock(path: string, ino: number, token: string): Promise<void> {
  const aside = `${path}.${token}.stale`;
  try {
    await fs.rename(path, aside);
  } catch (err) {
    if (isErrnoError(err, 'ENOENT')) return; // another appender broke it first
    throw err;
  }
  const moved = await fs.stat(aside).catch(() => null);
  // Not the stale lock: another appender took the lock between our look and the move. Put it back if we can.
  if (moved && moved.ino !== ino) await fs.link(aside, path).catch(() => undefined);
  await fs.rm(aside, { force: true });
}

const CRC_TABLE = (() => {
  const table = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    table[n] = c >>> 0;
  }
  return table;
})();

/** CRC-32 (IEEE), for frame headers: zlib.crc32 is not in every Node 20. */
function crc32(bytes: Buffer): number {
  let c = 0xffffffff;
  for (const byte of bytes) c = CRC_TABLE[(c ^ byte) & 0xff]! ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}
