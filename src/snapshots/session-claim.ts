/**
 * Claims on session ids, shared by both stores: `<root>/<sessionId>/claim.json` says, once and for good, which owner
 * (a workflow's first run id) a session id belongs to. Published with a hard link, like manifests: of two claimers
 * exactly one wins. Nothing removes a claim — not gc, not shred, not deleting every checkpoint — so an id once used
 * is never used again.
 */
import * as fs from 'node:fs/promises';
import { join } from 'node:path';
import { z } from 'zod';
import { SessionId } from '../domain/schemas';
import { strictObject } from '../domain/strict';
import { ensureDir, fsyncDir, publish, readSmall } from '../fs-io';
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
 * Records that `owner` owns `sessionId` in the store at `root`. Idempotent for the same owner. Throws
 * SessionIdTakenError when another owner claimed it, or when the session's directory holds anything but a claim
 * (checkpoints, a data key, packs, a fork's `lineage.json`: a session from before claims, or made by `fork`).
 * In-flight temp files (names starting with a dot) do not count: a concurrent claim of the same owner makes them.
 */
export async function claimSession(root: string, sessionId: string, owner: string): Promise<void> {
  if (!SessionId.safeParse(sessionId).success || !Owner.safeParse(owner).success) {
    throw new TypeError(`invalid session id or owner: ${JSON.stringify(sessionId)} / ${JSON.stringify(owner)}`);
  }
  const dir = join(root, sessionId);
  const path = join(dir, CLAIM_FILE);
  try {
    if (await sameOwner(path, sessionId, owner)) return;
    const used = (await fs.readdir(dir).catch(() => [] as string[])).filter(
      (name) => name !== CLAIM_FILE && !name.startsWith('.'),
    );
    if (used.length > 0) {
      throw new SessionIdTakenError(
        `session id ${sessionId} is taken: the store holds ${used.sort().join(', ')} of it from before it was claimed`,
        sessionId,
      );
    }
    if ((await ensureDir(dir)) !== undefined) await fsyncDir(root);
    const record = { owner, claimedAt: new Date().toISOString() };
    if (await publish(path, Buffer.from(`${JSON.stringify(record)}\n`), { replace: false })) return;
    // Another claimer linked first: the same owner retried, or someone else.
    if (!(await sameOwner(path, sessionId, owner))) throw new Error(`the claim on ${sessionId} vanished`);
  } catch (err) {
    throw asStoreFull(err, sessionId, '', `the claim on session ${sessionId}`);
  }
}

/** Whether the claim at `path` is `owner`'s: false if there is none, SessionIdTakenError if it is another's. */
async function sameOwner(path: string, sessionId: string, owner: string): Promise<boolean> {
  // A claim that cannot be parsed (or is too large to be one) is still a claim: the id is taken, whoever made it.
  // I/O errors (they have an errno code) stay what they are: retryable.
  const unreadable = (cause: unknown) =>
    new SessionIdTakenError(`session id ${sessionId} is taken: its claim is unreadable`, sessionId, { cause });
  const raw = await readSmall(path, MAX_CLAIM_BYTES).catch((err: unknown) => {
    throw (err as { code?: unknown }).code === undefined ? unreadable(err) : err;
  });
  if (raw === null) return false;
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
