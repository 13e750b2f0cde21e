import { deprecatePatch, log } from '@temporalio/workflow';
import type { ResumeResult, RuntimeInstanceRef } from '../api/messages';
import { ERROR_CODES, PERMANENT_SNAPSHOT_ERRORS } from '../domain/error-codes';
import type { CheckpointRef } from '../domain/schemas';
import { isFinal } from '../domain/session-state';
import { checkpointName, restoreSummary } from '../domain/operator-view';
import { onPlacedHost, summarized } from './activity-proxies';
import { failureMessage, typeOf } from './failures';

import { CONTRACTS_PATCH } from './patches';
import { now, type Session } from './session';

/** What asked for a restore; the timeline says it. */
export type RestoreCause = 'resume' | 'recovery' | 'drain' | 'rewind' | 'fork';

/** The restored runtime, or why there is none: `permanent` when every candidate failed for good. */
export type RestoreOutcome = { ok: true; result: ResumeResult } | { ok: false; permanent: boolean; reason: string };

/**
 * Restores `target`, or else the newest older checkpoint that verifies, and hands the new instance to `watch`.
 * Transient errors were already retried by the activity's retry policy; what reaches here is permanent for that
 * checkpoint.
 */
export async function restoreWithFallback(
  session: Session,
  target: CheckpointRef,
  cause: RestoreCause,
  watch: (runtime: RuntimeInstanceRef) => void,
): Promise<RestoreOutcome> {
  const { state } = session;
  const candidates = [target, ...olderThan(state.checkpoints, target)];
  const skipped: { checkpointId: string; reason: string }[] = [];
  for (const candidate of candidates) {
    try {
      const fallbackFrom = skipped.map((s) => s.checkpointId);
      const summary = restoreSummary(candidate, cause, fallbackFrom);
      const instanceId = session.instanceIdsOfAttempts();
      const runtime = await onPlacedHost(state.spec, `restore ${checkpointName(candidate.checkpointId)}`, (host) =>
        summarized(summary, host.restoreCheckpoint, {
          sessionId: session.id,
          ...session.tenancy,
          checkpointId: candidate.checkpointId,
          expected: recorded(candidate),
          instanceId: instanceId(),
          spec: state.spec.runtime,
          ...session.fencing,
        }),
      );
      state.runtime = runtime;
      state.head = candidate;
      session.restoredTo(candidate);
      state.lastRestore = { checkpointId: candidate.checkpointId, at: now(), fallbackFrom };
      session.record({
        kind: 'restored',
        at: now(),
        checkpointId: candidate.checkpointId,
        instanceId: runtime.instanceId,
        cause,
      });
      watch(runtime);
      return {
        ok: true,
        result: { restoredFrom: candidate, runtime, ...(skipped.length ? { fallbackFrom: skipped } : {}) },
      };
    } catch (err) {
      const type = typeOf(err);
      if (!type || !PERMANENT_SNAPSHOT_ERRORS.includes(type)) {
        // Not a property of this checkpoint (retries exhausted, no host): an older one would not help.
        const reason = `restore of checkpoint ${candidate.checkpointId} failed: ${type ? `${type}: ` : ''}${failureMessage(err)}`;
        return { ok: false, permanent: false, reason };
      }
      const reason = `${type}: ${failureMessage(err)}`;
      skipped.push({ checkpointId: candidate.checkpointId, reason });
      const next = candidates[candidates.indexOf(candidate) + 1];
      session.record({
        kind: 'fallback',
        at: now(),
        fromCheckpointId: candidate.checkpointId,
        toCheckpointId: next?.checkpointId ?? null,
        reason,
      });
      log.warn('checkpoint cannot be restored, falling back', { checkpointId: candidate.checkpointId, reason });
    }
  }
  const reason =
    `no checkpoint of session ${session.id} could be restored: ` +
    skipped.map((s) => `${s.checkpointId} (${s.reason})`).join('; ');
  deprecatePatch(CONTRACTS_PATCH);
  return { ok: false, permanent: true, reason };
}

/**
 * No checkpoint could be restored. The store may still be repaired (a key file put back, a pack restored from a
 * backup), so the session waits, paused, with the failure in status, the timeline and the Web UI: a later resume can
 * succeed. Only a session that has nothing left to restore fails for good.
 */
export function restoreFailed(
  session: Session,
  outcome: { permanent: boolean; reason: string },
  cause: RestoreCause,
  event: 'resumeFailed' | 'rewindAborted' = 'resumeFailed',
): void {
  const { state } = session;
  if (isFinal(state.phase)) return;
  deprecatePatch(CONTRACTS_PATCH);
  state.failure = { type: ERROR_CODES.RestoreFailed, message: outcome.reason, at: now() };
  session.record({ kind: 'restore-failed', at: now(), cause, reason: outcome.reason });
  session.apply({ type: event });
}

/** The session runs again: a failure that left it paused is behind it. */
export function resumed(session: Session): void {
  const { state } = session;
  if (state.failure && !isFinal(state.phase)) state.failure = null;
  session.apply({ type: 'resumeSucceeded' });
}

/** What history says a checkpoint is: restore and verify refuse a manifest that says otherwise. */
export function recorded(ref: CheckpointRef): {
  formatVersion: number;
  digest: string;
  encryption?: 'aes-256-gcm' | 'none';
} {
  return {
    formatVersion: ref.formatVersion,
    digest: ref.digest,
    ...(ref.encryption ? { encryption: ref.encryption } : {}),
  };
}

function olderThan(checkpoints: CheckpointRef[], target: CheckpointRef): CheckpointRef[] {
  return checkpoints.filter((c) => c.sequence < target.sequence).sort((a, b) => b.sequence - a.sequence);
}

/** Starts a runtime from the session's spec, as its first start does, on whichever worker places it. */
export function startFromSpec(session: Session): Promise<RuntimeInstanceRef> {
  const { state } = session;
  const kind = state.spec.runtime.kind;
  const instanceId = session.instanceIdsOfAttempts();
  return onPlacedHost(state.spec, `start the ${kind} runtime`, (host) =>
    summarized(`start ${kind} runtime`, host.startRuntime, {
      sessionId: session.id,
      ...session.tenancy,
      instanceId: instanceId(),
      spec: state.spec.runtime,
      ...session.fencing,
    }),
  );
}
