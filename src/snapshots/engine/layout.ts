/**
 * Where the chunked store keeps what, as keys of its blob backend (blob/backend.ts). On the file-system backend a key
 * is a path under the store's directory, so the layout on disk is the one the store has always had.
 *
 *   <lineage>/keys/data-key.json          the lineage's data key, wrapped by a master key (lineage-keys.ts)
 *   <lineage>/packs/<packId>.pack          a header, then sealed chunks (packs.ts); immutable once written
 *   <lineage>/pins/<session>.<checkpoint>  present while a writer runs: garbage collection keeps its packs (pins.ts)
 *   <sessionId>/<checkpointId>.manifest    the sealed manifest: chunk list, parent's manifest digest
 *   <sessionId>/lineage.json               of a fork only: the lineage whose key and packs it uses
 *   <sessionId>/claim.json                 who owns the session id (session-claim.ts); never removed
 *   <sessionId>/timeline/…                 the session's timeline: segment markers (and layout 1's segment files)
 *   <sessionId>/timeline-entries/…         one object per timeline entry (timeline-objects.ts); removed by shred only
 *
 * A session's lineage is its own id unless it is a fork. Manifests, claims, lineage pointers and new data keys are
 * written with the backend's `create`: of two writers of one of them, on any two machines, exactly one publishes it.
 */
import { z } from 'zod';
import { CheckpointId, SessionId } from '../../domain/schemas';
import type { BlobBackend } from '../blob/backend';
import { SnapshotCorruptError, SnapshotNotFoundError } from '../errors';
import { createPin, type Pin } from './pins';

export const MANIFEST_SUFFIX = '.manifest';
/** Format 1's manifests (fs-snapshot-store.ts), beside the chunked ones in a session's directory. */
export const LEGACY_MANIFEST_SUFFIX = '.manifest.json';
export const LINEAGE_FILE = 'lineage.json';
export const MAX_MANIFEST_BYTES = 64 * 1024 * 1024;
/**
 * Folders of a lineage's or session's directory where writers make temp files (the directory itself has them too):
 * the file-system backend writes every object through a temp file beside it, timeline entries included.
 */
export const TEMP_DIRS = ['packs', 'keys', 'pins', 'timeline', 'timeline-entries/*'];

/** `<session>/lineage.json` of a fork: the lineage whose key and packs the session uses. */
const LineageFile = z.object({ lineage: SessionId });

export function packKey(lineage: string, packId: string): string {
  return `${lineage}/packs/${packId}.pack`;
}

export class StoreLayout {
  /** Sessions known to be forks, and their lineage. */
  private readonly lineages = new Map<string, string>();

  constructor(
    readonly backend: BlobBackend,
    /**
     * The directory the backend keeps its objects in, for what only a local directory has: temp files its writers
     * leave when they die. Null on any other backend.
     */
    readonly root: string | null,
    private readonly touchIntervalMs: number,
  ) {}

  manifestKey(sessionId: string, checkpointId: string): string {
    return `${sessionId}/${checkpointId}${MANIFEST_SUFFIX}`;
  }

  legacyManifestKey(sessionId: string, checkpointId: string): string {
    return `${sessionId}/${checkpointId}${LEGACY_MANIFEST_SUFFIX}`;
  }

  lineageFileKey(sessionId: string): string {
    return `${sessionId}/${LINEAGE_FILE}`;
  }

  /**
   * The names directly in a session's folder: `claim.json`, manifests, and the first segment of deeper keys
   * (`packs`, `keys`, `timeline`…). None for a session the store has never seen.
   */
  async sessionEntries(sessionId: string): Promise<string[]> {
    const names = new Set<string>();
    for await (const key of this.backend.listKeys(`${sessionId}/`)) {
      names.add(key.slice(sessionId.length + 1).split('/')[0]!);
    }
    return [...names];
  }

  /** The ids of a session's chunked manifests. */
  async chunkedManifestIds(sessionId: string): Promise<string[]> {
    return (await this.sessionEntries(sessionId))
      .filter((n) => n.endsWith(MANIFEST_SUFFIX))
      .map((n) => n.slice(0, -MANIFEST_SUFFIX.length));
  }

  async manifestExists(sessionId: string, checkpointId: string): Promise<boolean> {
    return (
      (await this.backend.stat(this.manifestKey(sessionId, checkpointId))) !== null ||
      (await this.backend.stat(this.legacyManifestKey(sessionId, checkpointId))) !== null
    );
  }

  /** A manifest's bytes as stored, chunked or format 1, or null if there is none. */
  async manifestFile(sessionId: string, checkpointId: string): Promise<Buffer | null> {
    const maxBytes = MAX_MANIFEST_BYTES;
    return (
      (await this.backend.read(this.manifestKey(sessionId, checkpointId), { maxBytes })) ??
      (await this.backend.read(this.legacyManifestKey(sessionId, checkpointId), { maxBytes }))
    );
  }

  /** The lineage of a session: its own id, or for a fork the one its `lineage.json` names. */
  async lineageOf(sessionId: string): Promise<string> {
    const known = this.lineages.get(sessionId);
    if (known) return known;
    const raw = await this.backend.read(this.lineageFileKey(sessionId), { maxBytes: MAX_MANIFEST_BYTES });
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
   * Makes a new session a fork in `lineage`: creates its `lineage.json`, once (false if the session has one already:
   * a fork starts a new session).
   */
  async joinLineage(sessionId: string, lineage: string): Promise<boolean> {
    const joined = await this.backend.create(this.lineageFileKey(sessionId), Buffer.from(JSON.stringify({ lineage })));
    if (joined) this.lineages.set(sessionId, lineage);
    return joined;
  }

  /** Marks a checkpoint as being written into a lineage, for gc (pins.ts); refreshed until released. */
  pin(lineage: string, sessionId: string, checkpointId: string): Promise<Pin> {
    return createPin(this.backend, lineage, sessionId, checkpointId, { refreshIntervalMs: this.touchIntervalMs });
  }

  /** Every pack named must exist, else SnapshotNotFound. */
  async requirePacks(
    lineage: string,
    packIds: Iterable<string>,
    sessionId: string,
    checkpointId: string,
  ): Promise<void> {
    for (const packId of new Set(packIds)) {
      if ((await this.backend.stat(packKey(lineage, packId))) === null) {
        throw new SnapshotNotFoundError(
          `checkpoint ${checkpointId} of session ${sessionId} is missing pack ${packId}`,
          sessionId,
          checkpointId,
        );
      }
    }
  }

  /** The sessions (and lineages) the store holds anything of: the first segments of keys that are session ids. */
  async sessionIds(): Promise<string[]> {
    const ids = new Set<string>();
    for await (const key of this.backend.listKeys('')) {
      const first = key.slice(0, key.indexOf('/'));
      if (!ids.has(first) && key.includes('/') && SessionId.safeParse(first).success) ids.add(first);
    }
    return [...ids];
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
