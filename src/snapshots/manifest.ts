import { z } from 'zod';
import { CheckpointId, CheckpointTrigger, Label, SessionId } from '../domain/schemas';
import type { CheckpointManifest, NewCheckpoint } from './snapshot-store';

/** The manifest fields every format shares, and the checks a new checkpoint passes before anything is written. */

/** Format 1's manifest; the chunked formats extend it (engine/manifests.ts). */
export const CheckpointManifestSchema = z.object({
  formatVersion: z.number().int(),
  checkpointId: CheckpointId,
  sessionId: SessionId,
  sequence: z.number().int().min(1),
  parentId: CheckpointId.nullable(),
  runtime: z.object({ kind: z.string().min(1), version: z.string() }),
  size: z.number().int().min(0),
  digest: z.string().regex(/^sha256:[0-9a-f]{64}$/),
  createdAt: z.iso.datetime(),
  label: Label.optional(),
  trigger: CheckpointTrigger,
}) satisfies z.ZodType<CheckpointManifest>;

/** What a writer must say about a new checkpoint (ids, sequence, parent, runtime, label, trigger). */
export const NewCheckpointSchema = CheckpointManifestSchema.omit({
  formatVersion: true,
  size: true,
  digest: true,
  createdAt: true,
}) satisfies z.ZodType<NewCheckpoint>;

/** Refuses a new checkpoint the store could not read back (bad id, label, sequence…) before anything is written. */
export function checkNew<T extends { sessionId: string; checkpointId: string }>(
  schema: z.ZodType<T>,
  value: unknown,
): T {
  const parsed = schema.safeParse(value);
  if (!parsed.success) {
    throw new TypeError(`invalid checkpoint: ${z.prettifyError(parsed.error)}`, { cause: parsed.error });
  }
  return parsed.data;
}
