/**
 * Where the chunked store keeps what, and the small file operations on it.
 *
 *   <root>/<lineage>/keys/data-key.json          the lineage's data key, wrapped by a master key (lineage-keys.ts)
 *   <root>/<lineage>/packs/<packId>.pack          a header, then sealed chunks (packs.ts); immutable once renamed
 *   <root>/<lineage>/pins/<session>.<checkpoint>  present while a writer runs: garbage collection keeps its packs
 *   <root>/<sessionId>/<checkpointId>.manifest    the sealed manifest: chunk list, parent's manifest digest
 *   <root>/<sessionId>/lineage.json               of a fork only: the lineage whose key and packs it uses
 *   <root>/<sessionId>/claim.json                 who owns the session id (session-claim.ts); never removed
 *   <root>/<sessionId>/timeline/<first>.log       the session's timeline log (timeline-log.ts); removed by shred only
 *
 * A session's lineage is its own id unless it is a fork.
 */
import * as fs from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { z } from 'zod';
import { CheckpointId, SessionId } from '../../domain/schemas';
import { ensureDir, exists, publish, readSmall } from '../../fs-io';
import { SnapshotCorruptError, SnapshotNotFoundError } from '../errors';
import { createPin, type Pin } from './pins';

export const MANIFEST_SUFFIX = '.manifest';
/** Format 1's manifests (fs-snapshot-store.ts), beside the chunked ones in a session's directory. */
export const LEGACY_MANIFEST_SUFFIX = '.manifest.json';
export const LINEAGE_FILE = 'lineage.json';
export const MAX_MANIFEST_BYTES = 64 * 1024 * 1024;
/** Folders of a lineage's directory where writers make temp files (a session's own directory has them too). */
export const TEMP_DIRS = ['packs', 'keys'];

/** `<session>/lineage.json` of a fork: the lineage whose key and packs the session uses. */
const LineageFile = z.object({ lineage: SessionId });

export class StoreLayout {
  /** Sessions known to be forks, and their lineage. */
  private readonly lineages = new Map<string, string>();

  readonly root: string;

  constructor(
    root: string,
    private readonly touchIntervalMs: number,
  ) {
    this.root = resolve(root);
  }

  sessionDir(sessionId: string): string {
    return join(this.root, sessionId);
  }

  lineageDir(lineage: string): string {
    return join(this.root, lineage);
  }

  packsDir(lineage: string): string {
    return join(this.lineageDir(lineage), 'packs');
  }

  manifestPath(sessionId: string, checkpointId: string): string {
    return join(this.root, sessionId, `${checkpointId}${MANIFEST_SUFFIX}`);
  }

  legacyManifestPath(sessionId: string, checkpointId: string): string {
    return join(this.root, sessionId, `${checkpointId}${LEGACY_MANIFEST_SUFFIX}`);
  }

  lineageFilePath(sessionId: string): string {
    return join(this.root, sessionId, LINEAGE_FILE);
  }

  /** The names in a session's directory (none for a session the store has never seen). */
  async sessionEntries(sessionId: string): Promise<string[]> {
    return fs.readdir(this.sessionDir(sessionId)).catch(() => [] as string[]);
  }

  /** The ids of a session's chunked manifests. */
  async chunkedManifestIds(sessionId: string): Promise<string[]> {
    return (await this.sessionEntries(sessionId))
      .filter((n) => n.endsWith(MANIFEST_SUFFIX) && !n.startsWith('.'))
      .map((n) => n.slice(0, -MANIFEST_SUFFIX.length));
  }

  async manifestExists(sessionId: string, checkpointId: string): Promise<boolean> {
    return (
      (await exists(this.manifestPath(sessionId, checkpointId))) ||
      (await exists(this.legacyManifestPath(sessionId, checkpointId)))
    );
  }

  /** A manifest file's bytes as stored, chunked or format 1, or null if there is none. */
  async manifestFile(sessionId: string, checkpointId: string): Promise<Buffer | null> {
    return (
      (await readSmall(this.manifestPath(sessionId, checkpointId), MAX_MANIFEST_BYTES)) ??
      (await readSmall(this.legacyManifestPath(sessionId, checkpointId), MAX_MANIFEST_BYTES))
    );
  }

  /** The lineage of a session: its own id, or for a fork the one its `lineage.json` names. */
  async lineageOf(sessionId: string): Promise<string> {
    const known = this.lineages.get(sessionId);
    if (known) return known;
    const raw = await readSmall(this.lineageFilePath(sessionId), MAX_MANIFEST_BYTES);
    if (raw === null) return sessionId;
    let parsed: { lineage: string };
    try {
      parsed = LineageFile.parse(JSON.parse(raw.toString('utf8')));
    } catch (err) {
      throw new SnapshotCorruptError(`${LINEAGE_FILE} of session ${sessionId} is malformed`, sessionId, '', {
        cause: err,
      });
    }
    // Written once, never changed: a forged one fails every manifest of the session (their header names the lineage).
    this.lineages.set(sessionId, parsed.lineage);
    return parsed.lineage;
  }

  /**
   * Makes a new session a fork in `lineage`: publishes its `lineage.json`, once (false if the session has one
   * already: a fork starts a new session).
   */
  async joinLineage(sessionId: string, lineage: string): Promise<boolean> {
    await ensureDir(this.sessionDir(sessionId));
    const joined = await publish(this.lineageFilePath(sessionId), Buffer.from(JSON.stringify({ lineage })), {
      replace: false,
    });
    if (joined) this.lineages.set(sessionId, lineage);
    return joined;
  }

  /** Marks a checkpoint as being written into a lineage, for gc (pins.ts); touched, with `alsoTouch`, until released. */
  pin(lineage: string, sessionId: string, checkpointId: string, alsoTouch?: () => Iterable<string>): Promise<Pin> {
    return createPin(this.lineageDir(lineage), sessionId, checkpointId, {
      touchIntervalMs: this.touchIntervalMs,
      ...(alsoTouch ? { alsoTouch } : {}),
    });
  }

  /**
   * Every pack named must exist (else SnapshotNotFound). With `touch` (a new manifest over existing chunks: a write's
   * reused packs, a rewind's or a fork's source), each is touched too, so that a concurrent gc keeps it.
   */
  async requirePacks(
    lineage: string,
    packIds: Iterable<string>,
    sessionId: string,
    checkpointId: string,
    { touch }: { touch: boolean },
  ): Promise<void> {
    const packsDir = this.packsDir(lineage);
    for (const packId of new Set(packIds)) {
      const path = join(packsDir, `${packId}.pack`);
      const now = new Date();
      const present = touch
        ? await fs.utimes(path, now, now).then(
            () => true,
            () => false,
          )
        : await exists(path);
      if (!present) {
        throw new SnapshotNotFoundError(
          `checkpoint ${checkpointId} of session ${sessionId} is missing pack ${packId}`,
          sessionId,
          checkpointId,
        );
      }
    }
  }
}

/** Refuses ids that could escape the root before they touch a path. */
export function checkIds(sessionId: string, checkpointId: string): { sessionId: string; checkpointId: string } {
  if (!SessionId.safeParse(sessionId).success || !CheckpointId.safeParse(checkpointId).success) {
    throw new TypeError(
      `invalid session or checkpoint id: ${JSON.stringify(sessionId)} / ${JSON.stringify(checkpointId)}`,
    );
  }
  return { sessionId, checkpointId };
}

/** `checkIds` for a session alone (verifyLineage, shred): the same refusal in the same words. */
export function checkSessionId(sessionId: string): string {
  if (!SessionId.safeParse(sessionId).success) {
    throw new TypeError(`invalid session or checkpoint id: ${JSON.stringify(sessionId)} / "x"`);
  }
  return sessionId;
}
