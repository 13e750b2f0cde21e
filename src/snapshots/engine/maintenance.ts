/**
 * The chunked store's maintenance — verify a lineage, collect garbage, re-wrap and destroy data keys, clean up after
 * dead writers — behind SnapshotMaintenance. Only the CLI (and a worker's start-up clean-up) calls it; sessions never
 * do.
 */
import * as fs from 'node:fs/promises';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import type { BlobInfo } from '../blob/backend';
import {
  abandonedAge,
  ABANDONED_AFTER_MS,
  isTempName,
  removeAbandonedTemps,
  type AbandonedReport,
  type CleanAbandonedOptions,
} from '../abandoned';
import { messageOf } from '../../errors';
import { SnapshotError, SnapshotTamperedError, verificationStatusOf } from '../errors';
import type { GcReport, SnapshotMaintenance, VerifyResult } from '../snapshot-maintenance';
import { checkSessionId, LEGACY_MANIFEST_SUFFIX, MANIFEST_SUFFIX, TEMP_DIRS, type StoreLayout } from './layout';
import type { LineageKeys } from './lineage-keys';
import type { Loaded, Manifests } from './manifests';
import { livePins, lockForGc, removeAbandonedPins } from './pins';

/** Thrown when a lineage cannot be swept (gc skips it and says why). */
class LineageSkipped extends Error {}

export interface MaintenanceParts {
  layout: StoreLayout;
  manifests: Manifests;
  keys: LineageKeys;
  /** How long an unreferenced pack must be old before garbage collection removes it. */
  gcGraceMs: number;
  /** A loaded checkpoint's state, every chunk authenticated as it is read. */
  open: (loaded: Loaded, sessionId: string, checkpointId: string) => Promise<Readable>;
  /** Removes a session's timeline log (shred). */
  removeTimeline: (sessionId: string) => Promise<void>;
}

export class StoreMaintenance implements SnapshotMaintenance {
  private readonly layout: StoreLayout;
  private readonly manifests: Manifests;
  private readonly keys: LineageKeys;
  private readonly gcGraceMs: number;
  private readonly open: MaintenanceParts['open'];
  private readonly removeTimeline: MaintenanceParts['removeTimeline'];

  constructor(parts: MaintenanceParts) {
    ({
      layout: this.layout,
      manifests: this.manifests,
      keys: this.keys,
      gcGraceMs: this.gcGraceMs,
      open: this.open,
      removeTimeline: this.removeTimeline,
    } = parts);
  }

  /**
   * Walks a session's checkpoints oldest first and checks each manifest, its link to its parent's manifest, and
   * every chunk's authentication tag. Reports one status per checkpoint; changes nothing.
   */
  async verifyLineage(sessionId: string): Promise<VerifyResult[]> {
    checkSessionId(sessionId);
    const names = await this.layout.sessionEntries(sessionId);
    const ids = new Set<string>();
    for (const n of names) {
      if (n.startsWith('.')) continue;
      if (n.endsWith(LEGACY_MANIFEST_SUFFIX)) ids.add(n.slice(0, -LEGACY_MANIFEST_SUFFIX.length));
      else if (n.endsWith(MANIFEST_SUFFIX)) ids.add(n.slice(0, -MANIFEST_SUFFIX.length));
    }
    const results: VerifyResult[] = [];
    // File digests of the manifests loaded so far: a parent verified before its child is not read again for the
    // child's link (ids sort by sequence as the workflow names them, so parents usually come first).
    const digests = new Map<string, string>();
    for (const checkpointId of [...ids].sort()) {
      let sequence: number | null = null;
      let formatVersion: number | null = null;
      try {
        const loaded = await this.manifests.load(sessionId, checkpointId);
        if (loaded.kind === 'chunked') digests.set(checkpointId, loaded.fileDigest);
        sequence = loaded.manifest.sequence;
        formatVersion = loaded.manifest.formatVersion;
        const link =
          loaded.kind === 'chunked'
            ? (loaded.manifest.forkedFrom ??
              (loaded.manifest.parentId ? { sessionId, checkpointId: loaded.manifest.parentId } : null))
            : null;
        if (loaded.kind === 'chunked' && link && loaded.manifest.parentManifestDigest) {
          const parent =
            (link.sessionId === sessionId ? digests.get(link.checkpointId) : undefined) ??
            (await this.manifests.fileDigest(link.sessionId, link.checkpointId));
          if (parent !== null && parent !== loaded.manifest.parentManifestDigest) {
            throw new SnapshotTamperedError(
              `checkpoint ${checkpointId}: its parent ${link.checkpointId} is not the manifest it was written after`,
              'tampered',
              { sessionId, checkpointId },
            );
          }
        }
        // Every chunk is authenticated as it is read; reading to the end is the verification.
        for await (const piece of await this.open(loaded, sessionId, checkpointId)) void piece;
        results.push({ checkpointId, sequence, formatVersion, status: 'ok' });
      } catch (err) {
        // What is not a snapshot error is not the checkpoint's (a failing disk, a codec this worker lacks): the
        // verification itself failed, and says so, rather than calling a sound checkpoint corrupt.
        if (!(err instanceof SnapshotError)) throw err;
        results.push({
          checkpointId,
          sequence,
          formatVersion,
          status: verificationStatusOf(err),
          detail: err.message,
        });
      }
    }
    return results.sort(
      (a, b) => (a.sequence ?? 0) - (b.sequence ?? 0) || a.checkpointId.localeCompare(b.checkpointId),
    );
  }

  /**
   * Removes what writers that died mid-write left: pins not refreshed for `olderThanMs` (ABANDONED_AFTER_MS by
   * default; a pin of a writer from before pins were refreshed, UNTOUCHED_PIN_MS), judged by the backend's own
   * timestamps and clock, and on a local directory the temp files of writes cut short (packs being streamed,
   * manifests, keys, claims and lineage pointers being published, format-1 data), untouched as long; on an object
   * store, the multipart uploads of writes cut short (counted as temp files), no part uploaded for as long. A live writer
   * refreshes its pin and touches its temp files every `touchIntervalMs`, so only a dead writer's are that old. Never
   * touches a manifest, a pack, a key or a claim. Run at worker start and by gc.
   */
  async cleanAbandoned(options: CleanAbandonedOptions = {}): Promise<AbandonedReport> {
    const age = abandonedAge({ ...options, now: options.now ?? (await this.layout.backend.now()).getTime() });
    const dryRun = options.dryRun ?? false;
    // Format-1 temp files live in the session directories too, under the same names' rule.
    const { root } = this.layout;
    const temps =
      root === null
        ? { files: 0, bytes: 0 }
        : await removeAbandonedTemps(root, age.before, { subdirs: TEMP_DIRS, dryRun });
    const pins = await removeAbandonedPins(this.layout.backend, await this.layout.sessionIds(), age, dryRun);
    // An object store's uploads cut short are its temp files: invisible, but stored until aborted.
    const writes = (await this.layout.backend.removeAbandonedWrites?.(new Date(age.before), { dryRun })) ?? {
      writes: 0,
      bytes: 0,
    };
    return {
      tempFiles: temps.files + writes.writes,
      pins: pins.pins,
      bytes: temps.bytes + pins.bytes + writes.bytes,
    };
  }

  /**
   * Mark and sweep, lineage by lineage: a pack survives if any manifest of its lineage references it, if a live
   * writer's pin names it, if it is younger than the grace period, or if it was written after the oldest live writer
   * started. Safe while checkpoints are being written on any host: see pins.ts for the protocol (the lineage's gc lock
   * is held from before the pins are read until the last delete). Ages are the backend's timestamps against its
   * clock. Dead writers' temp files and pins go first (cleanAbandoned), so a stale pin no longer holds packs back.
   */
  async gc(options: { dryRun?: boolean; now?: number } = {}): Promise<GcReport> {
    const { backend } = this.layout;
    const dryRun = options.dryRun ?? false;
    const startedAt = options.now ?? (await backend.now()).getTime();
    const cleaning = { olderThanMs: ABANDONED_AFTER_MS, now: startedAt };
    const abandoned = await this.cleanAbandoned({ ...cleaning, dryRun });
    const abandonedAt = abandonedAge(cleaning);
    const report: GcReport = {
      dryRun,
      lineages: 0,
      skipped: [],
      packsKept: 0,
      packsRemoved: [],
      bytesRemoved: 0,
      abandoned,
    };
    const sessions = await this.layout.sessionIds();
    // The sessions of each lineage (a lineage is itself and its forks); all their manifests keep its packs.
    const members = new Map<string, string[]>();
    const unplaced: string[] = [];
    for (const session of sessions) {
      const lineage = await this.layout.lineageOf(session).catch(() => null);
      if (lineage === null) unplaced.push(session);
      else members.set(lineage, [...(members.get(lineage) ?? []), session]);
    }
    for (const lineage of sessions) {
      const packs: BlobInfo[] = [];
      for await (const info of backend.list(`${lineage}/packs/`)) if (info.key.endsWith('.pack')) packs.push(info);
      const temps = await this.tempPacks(lineage, abandonedAt.before);
      if (packs.length === 0 && temps.length === 0) continue;
      report.lineages++;
      if (unplaced.length > 0) {
        // A session whose lineage is unknown might reference any lineage's packs: sweep nothing.
        report.skipped.push({ lineage, reason: `the lineage of ${unplaced.join(', ')} is unreadable` });
        continue;
      }
      const lock = dryRun ? null : await lockForGc(backend, lineage);
      if (!dryRun && !lock) {
        report.skipped.push({ lineage, reason: 'another collection is sweeping it' });
        continue;
      }
      try {
        // Read after the lock is taken (pins.ts). Abandoned pins are gone (or, in a dry run, counted as gone).
        const pins = await livePins(backend, lineage, abandonedAt);
        const threshold = Math.min(startedAt - this.gcGraceMs, ...pins.starts);
        let live: Set<string>;
        try {
          live = await this.referencedPacks(lineage, members.get(lineage) ?? []);
        } catch (err) {
          if (!(err instanceof LineageSkipped)) throw err;
          report.skipped.push({ lineage, reason: err.message });
          continue;
        }
        for (const info of packs) {
          const packId = info.key.slice(`${lineage}/packs/`.length, -'.pack'.length);
          if (live.has(packId) || pins.packs.has(packId) || info.modifiedAt.getTime() >= threshold) {
            report.packsKept++;
            continue;
          }
          report.packsRemoved.push({ lineage, packId, bytes: info.size });
          report.bytesRemoved += info.size;
          if (!dryRun) await backend.delete(info.key);
        }
        // Temp files of writers that crashed go like unreferenced packs, once they are older than the threshold.
        for (const temp of temps) {
          if (temp.mtimeMs >= threshold) {
            report.packsKept++;
            continue;
          }
          report.packsRemoved.push({ lineage, packId: temp.packId, bytes: temp.size });
          report.bytesRemoved += temp.size;
          if (!dryRun) await fs.rm(temp.path, { force: true });
        }
      } finally {
        await lock?.release();
      }
    }
    return report;
  }

  /**
   * The temp files in a lineage's packs folder on a local directory (packs a writer was streaming when it died), but
   * those cleanAbandoned counts (older than `abandonedBefore`).
   */
  private async tempPacks(
    lineage: string,
    abandonedBefore: number,
  ): Promise<{ path: string; packId: string; size: number; mtimeMs: number }[]> {
    if (this.layout.root === null) return [];
    const dir = join(this.layout.root, lineage, 'packs');
    const found = [];
    for (const name of await fs.readdir(dir).catch(() => [] as string[])) {
      if (!isTempName(name)) continue;
      const path = join(dir, name);
      const st = await fs.stat(path).catch(() => null);
      if (!st?.isFile() || st.mtimeMs < abandonedBefore) continue;
      found.push({ path, packId: name.replace(/^\.(.*)\.tmp$/, '$1'), size: st.size, mtimeMs: st.mtimeMs });
    }
    return found;
  }

  /** Re-wraps every lineage's data key under the primary master key. Chunks are not rewritten. */
  async rekey(): Promise<{ rewrapped: number; unchanged: number }> {
    this.keys.requireKeyring();
    let rewrapped = 0;
    let unchanged = 0;
    for (const lineage of await this.keys.lineages(await this.layout.sessionIds())) {
      if (await this.keys.rewrap(lineage)) rewrapped++;
      else unchanged++;
    }
    return { rewrapped, unchanged };
  }

  /**
   * Destroys the data key of the session's lineage: every checkpoint of the session, and of every other session of
   * its lineage (its origin and forks), is unreadable from then on. Removes those sessions' timeline logs too (sealed
   * under the key, they would be unreadable; in plaintext they would not, and a shred must leave nothing readable).
   * Returns the lineage. The session's claim stays: its id remains used.
   */
  async shred(sessionId: string): Promise<string> {
    checkSessionId(sessionId);
    const lineage = await this.layout.lineageOf(sessionId);
    await this.keys.destroy(lineage);
    for (const session of await this.layout.sessionIds()) {
      // A session whose lineage cannot be read is not known to be this lineage's: its timeline stays.
      if ((await this.layout.lineageOf(session).catch(() => null)) === lineage) await this.removeTimeline(session);
    }
    return lineage;
  }

  /** The packs the chunked manifests of a lineage's sessions reference; LineageSkipped if one cannot be read. */
  private async referencedPacks(lineage: string, sessions: readonly string[]): Promise<Set<string>> {
    const live = new Set<string>();
    for (const session of sessions) {
      for (const checkpointId of await this.layout.chunkedManifestIds(session)) {
        try {
          const loaded = await this.manifests.load(session, checkpointId);
          if (loaded.kind === 'chunked') for (const [, , packId] of loaded.manifest.chunks) live.add(packId);
        } catch (err) {
          // A manifest that cannot be read might still reference packs: never sweep what it may need.
          const where = session === lineage ? '' : ` of fork ${session}`;
          throw new LineageSkipped(`manifest ${checkpointId}${where} is unreadable (${messageOf(err)})`);
        }
      }
    }
    return live;
  }
}
