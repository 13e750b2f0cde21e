/** The activities that only touch the snapshot store: claims, verification, timelines, deletes and forks. */
import { ApplicationFailure, Context } from '@temporalio/activity';
import { ERROR_CODES } from '../domain/error-codes';
import {
  checkpointRefOf,
  type CheckpointRef,
  type VerificationResult,
  type VerificationStatus,
} from '../domain/schemas';
import { storeErrorKind } from '../metrics';
import {
  SnapshotError,
  SnapshotIncompatibleError,
  type SnapshotMaintenance,
  type SnapshotStore,
  type TimelinePage,
  verificationStatusOf,
} from '../snapshots';
import type {
  AppendTimelineInput,
  FindCheckpointInput,
  ForkSessionsInput,
  ReadTimelineInput,
  Tenancy,
  VerifyCheckpointInput,
  VerifyStoredInput,
} from './activity-inputs';
import {
  type ActivityContext,
  checkRecorded,
  storeOf,
  timelineOf,
  records,
  findInTimeline,
  readManifestIfExists,
  throttled,
  toFailure,
  type ForkingStore,
} from './activity-context';

export function storeActivities(ctx: ActivityContext) {
  const { deps, metrics } = ctx;
  return {
    /**
     * Claims a session id for the session whose first run is `owner`, once: session ids are never reused, so a run
     * under an id that already has a lineage in the store is refused (SessionAlreadyExists) before it touches it.
     */
    async claimSession(input: { sessionId: string; owner: string } & Tenancy): Promise<void> {
      try {
        await storeOf(deps, input).claim(input.sessionId, input.owner);
      } catch (err) {
        throw toFailure(err);
      }
    },

    /**
     * Reads a checkpoint back from the store — its manifest against what the session recorded, then every chunk,
     * authenticated — without restoring it anywhere. What it finds about the checkpoint is the result (not a
     * failure); a store that cannot be reached is an error, retried.
     */
    async verifyCheckpoint(input: VerifyCheckpointInput): Promise<VerificationResult> {
      const ctx = Context.current();
      const result = (status: VerificationStatus, detail?: string): VerificationResult => ({
        checkpointId: input.checkpointId,
        status,
        ...(detail !== undefined ? { detail } : {}),
        at: new Date().toISOString(),
      });
      try {
        // The stream is lazy: the manifest is checked before a byte of data is read.
        const known: { size?: number } = {};
        const { manifest, stream } = await storeOf(deps, input).open(input.sessionId, input.checkpointId, {
          onProgress: throttled((bytesDone) => ctx.heartbeat({ phase: 'verify', bytesDone, bytesTotal: known.size })),
          signal: ctx.cancellationSignal,
        });
        known.size = manifest.size;
        try {
          checkRecorded(manifest, input);
        } catch (err) {
          stream.destroy();
          throw err;
        }
        // Every store's stream fails on data that does not match its manifest, its size included.
        for await (const piece of stream) void piece;
        return result('ok');
      } catch (err) {
        // A finding about the checkpoint is a result, and still an error of the store to count.
        const kind = storeErrorKind(err);
        if (kind) metrics.storeError('verify', kind);
        if (err instanceof SnapshotError) return result(verificationStatusOf(err), err.message);
        throw toFailure(err);
      }
    },

    async deleteCheckpoint(input: { sessionId: string; checkpointId: string } & Tenancy): Promise<void> {
      await storeOf(deps, input).delete(input.sessionId, input.checkpointId);
    },

    /** Appends entries to the session's timeline in the store (idempotent: a retry appends the same bytes again). */
    async appendTimeline(input: AppendTimelineInput): Promise<void> {
      try {
        await timelineOf(deps, input).appendTimeline(input.sessionId, records(input.entries));
      } catch (err) {
        throw toFailure(err);
      }
    },

    /**
     * A page of the session's timeline as the store keeps it: how clients, the CLI and the gateway, which hold no
     * store key, read what the session no longer holds (through `timelineReadWorkflow`).
     */
    async readTimeline(input: ReadTimelineInput): Promise<TimelinePage> {
      try {
        return await timelineOf(deps, input).readTimeline(input.sessionId, { from: input.from, limit: input.limit });
      } catch (err) {
        throw toFailure(err);
      }
    },

    /**
     * The checkpoints the store keeps of a session that has ended, read back as the CLI's store `verify` reads them
     * (manifest, link to its parent, every chunk authenticated), oldest first: how clients, the CLI and the gateway,
     * which hold no store key, verify what no workflow holds any more (through `checkpointVerifyWorkflow`).
     */
    async verifyStoredCheckpoints(input: VerifyStoredInput): Promise<VerificationResult[]> {
      const store = storeOf(deps, input) as SnapshotStore & Partial<Pick<SnapshotMaintenance, 'verifyLineage'>>;
      const result = (checkpointId: string, status: VerificationStatus, detail?: string): VerificationResult => ({
        checkpointId,
        status,
        ...(detail !== undefined ? { detail } : {}),
        at: new Date().toISOString(),
      });
      try {
        const results: VerificationResult[] = [];
        if (typeof store.verifyLineage === 'function') {
          for (const r of await store.verifyLineage(input.sessionId)) {
            results.push(result(r.checkpointId, r.status, r.detail));
          }
        } else {
          // A store without maintenance (format 1): each checkpoint it lists, read back on its own.
          for (const { checkpointId } of await store.list(input.sessionId)) {
            try {
              await store.verify(input.sessionId, checkpointId);
              results.push(result(checkpointId, 'ok'));
            } catch (err) {
              if (!(err instanceof SnapshotError)) throw err;
              results.push(result(checkpointId, verificationStatusOf(err), err.message));
            }
          }
        }
        if (input.checkpointId === undefined) return results;
        const one = results.filter((r) => r.checkpointId === input.checkpointId);
        if (one.length === 0) {
          // The words and type of a running session's refusal of a checkpoint it does not have.
          throw ApplicationFailure.nonRetryable(
            `session ${input.sessionId} has no checkpoint ${input.checkpointId}`,
            ERROR_CODES.SnapshotNotFound,
          );
        }
        return one;
      } catch (err) {
        const kind = storeErrorKind(err);
        if (kind) metrics.storeError('verify', kind);
        throw toFailure(err);
      }
    },

    /**
     * A checkpoint of the session named by its timeline index, its id or (conversation runtime) its message index, read
     * from the store's timeline: null when the timeline has no such checkpoint, or retention deleted it since.
     */
    async findCheckpoint(input: FindCheckpointInput): Promise<CheckpointRef | null> {
      try {
        const found = await findInTimeline(timelineOf(deps, input), input);
        if (!found) return null;
        const manifest = await readManifestIfExists(storeOf(deps, input), input.sessionId, found.checkpointId);
        return manifest ? found : null;
      } catch (err) {
        throw toFailure(err);
      }
    },

    /**
     * Makes each target session's first checkpoint from `source`, sharing its chunks (no copy): the target's id is
     * claimed for `owner` first, so nothing else can take it between this and the fork's own start. Idempotent: a
     * retry finds the checkpoints it made.
     */
    async forkSessions(input: ForkSessionsInput): Promise<CheckpointRef[]> {
      const store = storeOf(deps, input) as SnapshotStore & Partial<ForkingStore>;
      const fork = store.fork?.bind(store);
      if (!fork) {
        throw toFailure(
          new SnapshotIncompatibleError(
            'this snapshot store cannot fork: forks need the chunked store (format 2 or later)',
            input.source.sessionId,
            input.source.checkpointId,
          ),
        );
      }
      try {
        // Each fork is a manifest over shared chunks: independent of the others, so made side by side.
        return await Promise.all(
          input.targets.map(async (target) => {
            await store.claim(target.sessionId, target.owner);
            const made = await readManifestIfExists(store, target.sessionId, target.checkpointId);
            const manifest =
              made ??
              (await fork(input.source, {
                sessionId: target.sessionId,
                checkpointId: target.checkpointId,
                trigger: 'fork',
                ...(target.label ? { label: target.label } : {}),
              }));
            return checkpointRefOf(manifest);
          }),
        );
      } catch (err) {
        throw toFailure(err);
      }
    },
  };
}
