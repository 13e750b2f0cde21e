/**
 * Claims on session ids, shared by both stores: `<sessionId>/claim.json` in the store's blob backend says, once and for
 * good, which owner (a workflow's first run id) a session id belongs to. Written with the backend's `create`, like
 * manifests: of two claimers, on any two machines, exactly one wins. Nothing removes a claim — not gc, not shred, not deleting every checkpoint — so an id once used
 * is never used again.
 */
import { z } from 'zod';
import { SessionId } from '../domain/schemas';
import { strictObject } from '../domain/strict';
import type { BlobBackend } from './blob/backend';
import { SessionIdTakenError } from './errors';
import { asStoreFull } from './store-full';

export const CLAIM_FILE = 'claim.json';
const MAX_CLAIM_BYTES = 4096;

/** An owner is an opaque id (a run id): one line of printable text. */
const Owner = z
  .string()
  .min(1)
  .max(256)
  .refine((s) => !/\p{Cc}/u.test(s), 'an owner must not contain control characters');

const ClaimFile = strictObject({ owner: z.string(), claimedAt: z.string() });

/**
 * Records that `owner` owns `sessionId` in the store on `backend`. Idempotent for the same owner. Throws
 * SessionIdTakenError when another owner claimed it, or when the session's directory holds anything but a claim
 * (checkpoints, a data key, packs, a fork's `lineage.json`: a session from before claims, or made by `fork`).
 */
export async function claimSession(backend: BlobBackend, sessionId: string, owner: string): Promise<void> {
  if (!SessionId.safeParse(sessionId).success || !Owner.safeParse(owner).success) {
    throw new TypeError(`invalid session id or owner: ${JSON.stringify(sessionId)} / ${JSON.stringify(owner)}`);
  }
  const key = `${sessionId}/${CLAIM_FILE}`;
  try {
    if (await sameOwner(backend, key, sessionId, owner)) return;
    const used = new Set<string>();
    for await (const info of backend.list(`${sessionId}/`)) {
      const name = info.key.slice(sessionId.length + 1).split('/')[0]!;
      if (name !== CLAIM_FILE) used.add(name);
    }
    if (used.size > 0) {
      throw new SessionIdTakenError(
        `session id ${sessionId} is taken: the store holds ${[...used].sort().join(', ')} of it from before it was claimed`,
        sessionId,
      );
    }
    const record = { owner, claimedAt: new Date().toISOString() };
    if (await backend.create(key, Buffer.from(`${JSON.stringify(record)}\n`))) return;
    // Another claimer created it first: the same owner retried, or someone else.
    if (!(await sameOwner(backend, key, sessionId, owner))) throw new Error(`the claim on ${sessionId} vanished`);
  } catch (err) {
    throw asStoreFull(err, sessionId, '', `the claim on session ${sessionId}`);
  }
}

/** Whether the claim at `key` is `owner`'s: false if there is none, SessionIdTakenError if it is another's. */
async function sameOwner(backend: BlobBackend, key: string, sessionId: string, owner: string): Promise<boolean> {
  // A claim that cannot be parsed (or is too large to be one) is still a claim: the id is taken, whoever made it.
  // Every error of the read is the store's (a full disk, a bucket that refuses the credentials): it stays what it is.
  const unreadable = (cause?: unknown) =>
    new SessionIdTakenError(`session id ${sessionId} is taken: its claim is unreadable`, sessionId, { cause });
  // One byte past the limit says "too large" without reading more, and without an error to tell from the store's.
  const raw = await backend.read(key, { range: { offset: 0, length: MAX_CLAIM_BYTES + 1 } });
  if (raw === null) return false;
  if (raw.length > MAX_CLAIM_BYTES) throw unreadable();
  let claimed: string;
  try {
    claimed = ClaimFile.parse(JSON.parse(raw.toString('utf8'))).owner;
  } catch (err) {
    throw unreadable(err);
  }
  if (claimed === owner) return true;
  throw new SessionIdTakenError(
    `session id ${sessionId} is taken: it was claimed by ${JSON.stringify(claimed)}, not ${JSON.stringify(owner)}`,
    sessionId,
  );
}
