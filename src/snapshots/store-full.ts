import { messageOf } from '../errors';
import { SnapshotError, StoreFullError } from './errors';

/** What each errno that means "no room" says, for a message an operator can act on. */
const NO_ROOM: ReadonlyMap<unknown, string> = new Map([
  ['ENOSPC', 'no space left on the device'],
  ['EDQUOT', 'the disk quota is exhausted'],
  ['EROFS', 'the file system is read-only'],
]);

/**
 * `err` as a StoreFullError when the file system refused room for a write (ENOSPC, EDQUOT, EROFS, from any step:
 * a pack, a manifest, a key, a temp file, an fsync); any other error as it is. Retrying such a write only fails
 * again, so it must not look like transient I/O.
 */
export function asStoreFull(err: unknown, sessionId: string, checkpointId: string, what: string): unknown {
  if (err instanceof SnapshotError) return err;
  const code = (err as { code?: unknown } | null)?.code;
  const reason = NO_ROOM.get(code);
  if (reason === undefined) return err;
  const detail = messageOf(err);
  return new StoreFullError(`${what} was not stored: ${reason} (${detail})`, sessionId, checkpointId, { cause: err });
}
