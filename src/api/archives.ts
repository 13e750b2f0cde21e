import { z } from 'zod';
import { CheckpointId, ForkOverrides, SessionId } from '../domain/schemas';
import { strictObject } from '../domain/strict';

/**
 * Export and import of sessions: operations of the client, not controls of a session. They are not sent to a
 * session's workflow — an export reads the store (a paused, stopped or failed session's checkpoints export alike, no
 * worker of the session needed) and an import makes a new session, as `start` does — and an archive's bytes cannot
 * travel in Temporal payloads (2 MB at most). So they live beside `CONTROLS`, with the same shape of documentation,
 * and every surface (SessionClient, CLI, HTTP, Python) is checked against this list.
 */

const Pem = z
  .string()
  .min(1)
  .max(4096)
  .regex(/^-----BEGIN [A-Z ]+-----[\s\S]+-----END [A-Z ]+-----\s*$/, 'expected a PEM key');
const Passphrase = z.string().min(1).max(1024);

/** What `export` takes beside the session id: which checkpoints, and whom the archive is sealed for (one of two). */
export const ExportSessionInput = strictObject({
  /** The checkpoint to export; the session's newest when absent. */
  checkpointId: CheckpointId.optional(),
  /** Export the checkpoint's ancestors too (its parent, the parent's parent…), oldest first. */
  ancestors: z.boolean().optional(),
  /** Seal for this X25519 public key (PEM, SPKI): only its private key opens the archive. */
  recipientPublicKey: Pem.optional(),
  /** Seal with this passphrase (scrypt). */
  passphrase: Passphrase.optional(),
}).refine((i) => (i.recipientPublicKey === undefined) !== (i.passphrase === undefined), {
  message: 'give exactly one of recipientPublicKey and passphrase',
  path: ['recipientPublicKey'],
});
export type ExportSessionInput = z.infer<typeof ExportSessionInput>;

/** What `import` takes beside the archive: the key that opens it (one of two), the new session's id and settings. */
export const ImportSessionInput = strictObject({
  /** The new session's id; `<exported session>-imported-<random>` when absent. Never an id in use or used before. */
  sessionId: SessionId.optional(),
  /** The recipient's X25519 private key (PEM, PKCS#8). */
  privateKey: Pem.optional(),
  passphrase: Passphrase.optional(),
  /** Leave the new session paused at its first checkpoint instead of resuming it (default false). */
  paused: z.boolean().optional(),
  /** Settings of the exported session's spec that the new session sets differently. */
  overrides: ForkOverrides.optional(),
}).refine((i) => (i.privateKey === undefined) !== (i.passphrase === undefined), {
  message: 'give exactly one of privateKey and passphrase',
  path: ['privateKey'],
});
export type ImportSessionInput = z.infer<typeof ImportSessionInput>;

/** What `import` answers: the new session and the checkpoints now in this deployment's store, oldest first. */
export interface ImportResult {
  sessionId: string;
  importedFrom: { sessionId: string; checkpointId: string };
  checkpoints: { checkpointId: string; size: number }[];
}

export interface SessionOperationDoc {
  summary: string;
  does: string;
  fields: Record<string, string>;
}

/** The client operations every surface offers beside the controls. */
export const SESSION_OPERATIONS = {
  export: {
    summary: 'write a portable archive of a checkpoint (and its ancestors), sealed for a recipient or a passphrase',
    does:
      'Streams an archive of the checkpoint: format version, runtime kind and version, manifests, digests, and the ' +
      'state re-encrypted for an X25519 public key or a passphrase. No key of this deployment is in it.',
    fields: {
      checkpointId: 'the checkpoint (default: the newest)',
      ancestors: 'include its ancestors, oldest first',
      recipientPublicKey: 'seal for this X25519 public key (PEM)',
      passphrase: 'seal with this passphrase',
    },
  },
  import: {
    summary: 'start a new session from an archive, after verifying all of it',
    does:
      'Verifies every record and digest of the archive, then stores its checkpoints under a new session id (a new ' +
      'data key, under this deployment’s master keys) and starts the session from the newest, resumed unless paused. ' +
      'A damaged, cut or wrongly keyed archive changes nothing.',
    fields: {
      sessionId: 'the new session id (default: <exported>-imported-<random>)',
      privateKey: 'the recipient’s X25519 private key (PEM)',
      passphrase: 'the passphrase the archive was sealed with',
      paused: 'leave the new session paused at its checkpoint',
      overrides: 'description, labels, retention, policies, backgroundVerify, liveness set differently',
    },
  },
} as const satisfies Record<string, SessionOperationDoc>;
export type SessionOperationName = keyof typeof SESSION_OPERATIONS;
