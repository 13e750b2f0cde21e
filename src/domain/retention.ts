import type { CheckpointRef, RetentionPolicy } from './schemas';

/**
 * Which checkpoints a retention policy lets go. Pure: the workflow calls it after each new checkpoint and deletes
 * what it returns. The head (what the session's state descends from) is never chosen; labelled checkpoints are kept
 * unless `keepLabelled` is false. A checkpoint goes when it is beyond the newest `keepLast`, or older than
 * `maxAgeMs`; without a policy nothing goes.
 */
export function checkpointsToDelete(
  checkpoints: readonly CheckpointRef[],
  headId: string | null,
  policy: RetentionPolicy | undefined,
  now: number,
): CheckpointRef[] {
  if (!policy || (policy.keepLast === undefined && policy.maxAgeMs === undefined)) return [];
  const keepLabelled = policy.keepLabelled ?? true;
  const newestFirst = [...checkpoints].sort((a, b) => b.sequence - a.sequence);
  return newestFirst.filter((c, rank) => {
    if (c.checkpointId === headId) return false;
    if (keepLabelled && c.label !== undefined) return false;
    const beyondLast = policy.keepLast !== undefined && rank >= policy.keepLast;
    const tooOld = policy.maxAgeMs !== undefined && now - Date.parse(c.createdAt) > policy.maxAgeMs;
    return beyondLast || tooOld;
  });
}
