/**
 * Pins and the gc lock: how garbage collection on one host and checkpoint writers on others share a lineage's packs
 * with nothing but the blob backend between them (no mtimes to touch, no file locks).
 *
 * A pin, `<lineage>/pins/<sessionId>.<checkpointId>`, is present while a checkpoint of the lineage is being written
 * (or branched, or forked). It holds `{"startedAtMs": …, "packs": […]}`: when its writer started, by the backend's
 * clock (the clock pack timestamps are compared with), and the existing packs the writer's manifest will reference
 * without writing them. The writer re-puts it every refresh interval, so its `modifiedAt` says the writer is alive: a
 * pin not refreshed for the cleaning age is a dead writer's. Pins of writers that predate refreshing are empty: their
 * time is their start, and they count as abandoned only after UNTOUCHED_PIN_MS.
 *
 * gc keeps every pack a live pin names and every pack not older than the oldest live pin's start. The lock,
 * `<lineage>/gc.lock`, closes the one gap that leaves — a writer that names a pack in its pin just after gc has read
 * the pins: gc creates the lock before it reads the pins and deletes it after its last delete, and a writer, after
 * naming its packs, waits while a live lock exists before it checks that they are there and publishes. So either gc
 * read the writer's pin with the packs in it, or the writer checks its packs after gc is done (and finds one missing,
 * a SnapshotNotFound, rather than publishing a manifest over it). Both sides create first and look second, which is
 * safe on any backend whose reads see every completed write (a local directory; S3).
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import { z } from 'zod';
import type { BlobBackend } from '../blob/backend';

const PINS_DIR = 'pins';
const GC_LOCK = 'gc.lock';
/** How long an empty pin (its writer does not refresh it) holds packs back: a write never takes this long. */
const UNTOUCHED_PIN_MS = 24 * 60 * 60_000;
const MAX_PIN_BYTES = 1024 * 1024;
/** gc re-puts its lock this often; a lock not re-put for GC_LOCK_STALE_MS is a dead gc's. */
const GC_LOCK_REFRESH_MS = 10_000;
const GC_LOCK_STALE_MS = 2 * 60_000;
const PinFile = z.object({ startedAtMs: z.number(), packs: z.array(z.string()).optional() });

/** A pin held by a running writer. */
export interface Pin {
  /**
   * Names `packIds` in the pin (packs the writer's manifest will reference without writing them) and waits until no
   * gc sweeps the lineage: from then on, until the pin is released, gc keeps them.
   */
  protect(packIds: Iterable<string>): Promise<void>;
  /** Stops refreshing the pin and removes it. */
  release(): Promise<void>;
}

export function pinKey(lineage: string, sessionId: string, checkpointId: string): string {
  return `${lineage}/${PINS_DIR}/${sessionId}.${checkpointId}`;
}

/** Pins `<sessionId>.<checkpointId>` in `lineage` and re-puts it every `refreshIntervalMs` until it is released. */
export async function createPin(
  backend: BlobBackend,
  lineage: string,
  sessionId: string,
  checkpointId: string,
  { refreshIntervalMs }: { refreshIntervalMs: number },
): Promise<Pin> {
  const key = pinKey(lineage, sessionId, checkpointId);
  // The start as the backend dates it, not as this host's clock does: gc compares it with the packs' timestamps.
  const startedAtMs = (await backend.now()).getTime();
  let body = Buffer.from(JSON.stringify({ startedAtMs }));
  await backend.put(key, body);
  let writing: Promise<void> = Promise.resolve();
  const put = (): Promise<void> => {
    const next = writing.then(() => backend.put(key, body));
    writing = next.catch(() => undefined); // a refresh that fails is retried at the next one
    return next;
  };
  const timer = setInterval(() => void put().catch(() => undefined), refreshIntervalMs);
  // A write in progress keeps the process alive by itself; the timer must not keep it alive once the write is done.
  timer.unref();
  return {
    protect: async (packIds) => {
      body = Buffer.from(JSON.stringify({ startedAtMs, packs: [...new Set(packIds)].sort() }));
      await put();
      await waitWhileSwept(backend, lineage);
    },
    release: async () => {
      clearInterval(timer);
      await writing;
      await backend.delete(key);
    },
  };
}

/** When a pin counts as abandoned: not re-put since `before`, or for an empty pin UNTOUCHED_PIN_MS before `now`. */
interface PinAge {
  before: number;
  now: number;
}

/** What the live pins of a lineage hold back: packs newer than the oldest start, and the packs they name. */
export interface LivePins {
  starts: number[];
  packs: Set<string>;
}

export async function livePins(backend: BlobBackend, lineage: string, age: PinAge): Promise<LivePins> {
  const live: LivePins = { starts: [], packs: new Set() };
  for await (const info of backend.list(`${lineage}/${PINS_DIR}/`)) {
    const pin = await readPin(backend, info.key, info.modifiedAt.getTime());
    if (!pin || pin.touchedAtMs < cutoff(pin, age)) continue;
    live.starts.push(pin.startedAtMs);
    for (const packId of pin.packs) live.packs.add(packId);
  }
  return live;
}

/** Removes the abandoned pins of `lineages`. Returns how many and their bytes. */
export async function removeAbandonedPins(
  backend: BlobBackend,
  lineages: readonly string[],
  age: PinAge,
  dryRun: boolean,
): Promise<{ pins: number; bytes: number }> {
  const found = { pins: 0, bytes: 0 };
  for (const lineage of lineages) {
    for await (const info of backend.list(`${lineage}/${PINS_DIR}/`)) {
      const pin = await readPin(backend, info.key, info.modifiedAt.getTime());
      if (!pin || pin.touchedAtMs >= cutoff(pin, age)) continue;
      if (!dryRun) {
        // Refreshed since it was listed: its writer lives after all.
        const now = await backend.stat(info.key);
        if (!now || now.modifiedAt.getTime() !== info.modifiedAt.getTime()) continue;
        await backend.delete(info.key);
      }
      found.pins++;
      found.bytes += info.size;
    }
  }
  return found;
}

interface PinState {
  startedAtMs: number;
  touchedAtMs: number;
  /** Whether its writer refreshes it (it says when it started). */
  touched: boolean;
  packs: string[];
}

async function readPin(backend: BlobBackend, key: string, modifiedAtMs: number): Promise<PinState | null> {
  const raw = await backend.read(key, { maxBytes: MAX_PIN_BYTES }).catch(() => null);
  if (raw === null) return null;
  let said: z.infer<typeof PinFile> | null = null;
  try {
    said = raw.length > 0 ? PinFile.parse(JSON.parse(raw.toString('utf8'))) : null;
  } catch {
    // Not a pin of ours (or cut short by a crash of a writer that predates whole-object writes): dated by its time.
  }
  // Never later than its time: a start in the future would hold back nothing the writer wrote.
  return said === null
    ? { startedAtMs: modifiedAtMs, touchedAtMs: modifiedAtMs, touched: false, packs: [] }
    : {
        startedAtMs: Math.min(said.startedAtMs, modifiedAtMs),
        touchedAtMs: modifiedAtMs,
        touched: true,
        packs: said.packs ?? [],
      };
}

function cutoff(pin: PinState, { before, now }: PinAge): number {
  return pin.touched ? before : Math.min(before, now - UNTOUCHED_PIN_MS);
}

/** The gc lock of a lineage, held while a collection reads its pins and deletes its packs. */
export interface GcLock {
  release(): Promise<void>;
}

/** Takes the lineage's gc lock, or returns null if a live collection holds it. A dead collection's lock is taken over. */
export async function lockForGc(backend: BlobBackend, lineage: string): Promise<GcLock | null> {
  const key = `${lineage}/${GC_LOCK}`;
  const token = Buffer.from(randomBytes(8).toString('hex'));
  if (!(await backend.create(key, token))) {
    const held = await backend.stat(key);
    if (held && (await backend.now()).getTime() - held.modifiedAt.getTime() < GC_LOCK_STALE_MS) return null;
    await backend.delete(key);
    if (!(await backend.create(key, token))) return null;
  }
  const timer = setInterval(() => void backend.put(key, token).catch(() => undefined), GC_LOCK_REFRESH_MS);
  timer.unref();
  return {
    release: async () => {
      clearInterval(timer);
      // Only our own: a lock taken over meanwhile is another collection's.
      if ((await backend.read(key, { maxBytes: 64 }))?.equals(token)) await backend.delete(key);
    },
  };
}

/** Waits while a live collection holds the lineage's gc lock (see the module doc). */
async function waitWhileSwept(backend: BlobBackend, lineage: string): Promise<void> {
  const key = `${lineage}/${GC_LOCK}`;
  for (let attempt = 0; ; attempt++) {
    const held = await backend.stat(key);
    if (!held) return;
    if ((await backend.now()).getTime() - held.modifiedAt.getTime() >= GC_LOCK_STALE_MS) return;
    await delay(Math.min(10 * 2 ** attempt, 500));
  }
}
