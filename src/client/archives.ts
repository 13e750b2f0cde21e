import { createReadStream } from 'node:fs';
import type { TimelineEntry } from '../api/messages';

interface TimelinePage {
  entries: TimelineEntry[];
  next: number | null;
}
import { SnapshotNotFoundError } from '../domain/errors';
import type { CheckpointManifest, SnapshotStore } from '../snapshots';
import type { ArchiveKey, ArchiveSeal } from '../snapshots/archive';

/** Where an import reads its archive: a file, or an opener (the archive is read twice: verified, then stored). */
export type ArchiveSource = string | (() => AsyncIterable<Uint8Array>);

export function archiveOpener(source: ArchiveSource): () => AsyncIterable<Uint8Array> {
  return typeof source === 'string' ? () => createReadStream(source, { highWaterMark: 1 << 20 }) : source;
}

/**
 * The checkpoint ids an export writes, oldest first: the one asked for (the session's newest by default) and, with
 * `ancestors`, its parent chain as far as the store holds it. A checkpoint the store lacks is SnapshotNotFound, before
 * a byte is written.
 */
export async function checkpointsToExport(
  store: SnapshotStore,
  sessionId: string,
  checkpointId: string | undefined,
  ancestors: boolean,
): Promise<string[]> {
  let head: CheckpointManifest;
  if (checkpointId === undefined) {
    const all = await store.list(sessionId);
    if (all.length === 0)
      throw new SnapshotNotFoundError(`session ${sessionId} has no checkpoint to export`, sessionId);
    head = all[all.length - 1]!;
  } else {
    head = await store.readManifest(sessionId, checkpointId);
  }
  const ids = [head.checkpointId];
  for (let parent = head.parentId; ancestors && parent !== null;) {
    const manifest = await store.readManifest(sessionId, parent).catch((err: unknown) => {
      // Retention may have deleted older checkpoints: the chain is exported as far as it goes.
      if (err instanceof SnapshotNotFoundError) return null;
      throw err;
    });
    if (!manifest) break;
    ids.unshift(manifest.checkpointId);
    parent = manifest.parentId;
  }
  return ids;
}

export function sealOf(input: { recipientPublicKey?: string; passphrase?: string }): ArchiveSeal {
  return input.passphrase !== undefined ? { passphrase: input.passphrase } : { recipient: input.recipientPublicKey! };
}

export function keyOf(input: { privateKey?: string; passphrase?: string }): ArchiveKey {
  return input.passphrase !== undefined ? { passphrase: input.passphrase } : { privateKey: input.privateKey! };
}

/** The message count of each of `checkpointIds`, from the session's timeline (a conversation's checkpoints). */
export async function messageCountsOf(
  handle: { timelinePage(options: { from: number; limit: number; all: true }): Promise<TimelinePage> },
  checkpointIds: readonly string[],
): Promise<Map<string, number>> {
  const wanted = new Set(checkpointIds);
  const counts = new Map<string, number>();
  for (let from: number | null = 1; from !== null && counts.size < wanted.size;) {
    const page: TimelinePage = await handle.timelinePage({ from, limit: 1000, all: true });
    for (const e of page.entries) {
      if (e.kind !== 'checkpoint' || !wanted.has(e.checkpoint.checkpointId)) continue;
      const count = e.checkpoint.messageCount ?? e.messageIndex;
      if (count !== undefined) counts.set(e.checkpoint.checkpointId, count);
    }
    from = page.entries.length ? page.next : null;
  }
  return counts;
}
