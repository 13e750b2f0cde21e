/**
 * Pins: `<lineage>/pins/<sessionId>.<checkpointId>`, present while a checkpoint of the lineage is being written
 * (or branched, or forked). gc keeps every pack not older than the oldest live pin's start, so the packs such a writer
 * writes, and those it reuses and touches, survive until its manifest references them.
 *
 * A pin holds `{"startedAtMs": …}`: when its writer started, by the file system's clock (the clock pack mtimes are
 * compared with). Its mtime says the writer is alive: the writer touches it every TOUCH_INTERVAL_MS, so a pin
 * untouched for the cleaning age belongs to a writer that died. Pins of writers that predate touching are empty and
 * never touched: their mtime is their start, and they count as abandoned only after UNTOUCHED_PIN_MS.
 */
import * as fs from 'node:fs/promises';
import { join } from 'node:path';
import { z } from 'zod';
import { keepTouched, removeIfBefore, sessionDirs } from '../abandoned';
import { ensureDir, readSmall } from '../../fs-io';

const PINS_DIR = 'pins';
/** How long an empty pin (its writer does not touch it) holds packs back: a write never takes this long. */
const UNTOUCHED_PIN_MS = 24 * 60 * 60_000;
const MAX_PIN_BYTES = 4096;
const PinFile = z.object({ startedAtMs: z.number() });

/** A pin held by a running writer. */
export interface Pin {
  /** Stops touching the pin and removes it. */
  release(): Promise<void>;
}

/**
 * Pins `<sessionId>.<checkpointId>` in `lineageDir` and keeps it touched, with whatever `alsoTouch` names (the temp
 * files the writer streams into), until it is released.
 */
export async function createPin(
  lineageDir: string,
  sessionId: string,
  checkpointId: string,
  { touchIntervalMs, alsoTouch = () => [] }: { touchIntervalMs: number; alsoTouch?: () => Iterable<string> },
): Promise<Pin> {
  const dir = join(lineageDir, PINS_DIR);
  await ensureDir(dir);
  const path = join(dir, `${sessionId}.${checkpointId}`);
  try {
    const handle = await fs.open(path, 'w');
    try {
      // The start as the file system dates it, not as this host's clock does: gc compares it with pack mtimes.
      const { mtimeMs } = await handle.stat();
      await handle.writeFile(JSON.stringify({ startedAtMs: mtimeMs }));
    } finally {
      await handle.close();
    }
  } catch (err) {
    // An empty pin left here would hold packs back for UNTOUCHED_PIN_MS.
    await fs.rm(path, { force: true });
    throw err;
  }
  const stop = keepTouched(() => [path, ...alsoTouch()], touchIntervalMs);
  return {
    release: async () => {
      stop();
      await fs.rm(path, { force: true });
    },
  };
}

/** When a pin counts as abandoned: untouched since `before` (an mtime), or for an empty pin UNTOUCHED_PIN_MS before `now`. */
interface PinAge {
  before: number;
  now: number;
}

/** The starts of a lineage's live pins: an abandoned pin is a dead writer's and holds nothing back. */
export async function livePinStarts(lineageDir: string, age: PinAge): Promise<number[]> {
  const dir = join(lineageDir, PINS_DIR);
  const starts: number[] = [];
  for (const name of await fs.readdir(dir).catch(() => [] as string[])) {
    const pin = await readPin(join(dir, name));
    if (pin && pin.touchedAtMs >= cutoff(pin, age)) starts.push(pin.startedAtMs);
  }
  return starts;
}

/** Removes the abandoned pins of every lineage of `root`. Returns how many and their bytes. */
export async function removeAbandonedPins(
  root: string,
  age: PinAge,
  dryRun: boolean,
): Promise<{ pins: number; bytes: number }> {
  const found = { pins: 0, bytes: 0 };
  for (const lineage of await sessionDirs(root)) {
    const dir = join(root, lineage, PINS_DIR);
    for (const name of await fs.readdir(dir).catch(() => [] as string[])) {
      const path = join(dir, name);
      const pin = await readPin(path);
      if (!pin) continue;
      const bytes = await removeIfBefore(path, cutoff(pin, age), dryRun);
      if (bytes === null) continue;
      found.pins++;
      found.bytes += bytes;
    }
  }
  return found;
}

interface PinState {
  startedAtMs: number;
  touchedAtMs: number;
  /** Whether its writer touches it (it says when it started). */
  touched: boolean;
}

async function readPin(path: string): Promise<PinState | null> {
  const st = await fs.lstat(path).catch(() => null);
  if (!st?.isFile()) return null;
  const raw = await readSmall(path, MAX_PIN_BYTES).catch(() => null);
  let said: number | null = null;
  try {
    said = raw && raw.length > 0 ? PinFile.parse(JSON.parse(raw.toString('utf8'))).startedAtMs : null;
  } catch {
    // Cut short by a crash between its two writes, or not a pin of ours: dated by its mtime, like an empty one.
  }
  // Never later than the mtime: a start in the future would hold back nothing the writer wrote.
  return said === null
    ? { startedAtMs: st.mtimeMs, touchedAtMs: st.mtimeMs, touched: false }
    : { startedAtMs: Math.min(said, st.mtimeMs), touchedAtMs: st.mtimeMs, touched: true };
}

function cutoff(pin: PinState, { before, now }: PinAge): number {
  return pin.touched ? before : Math.min(before, now - UNTOUCHED_PIN_MS);
}
