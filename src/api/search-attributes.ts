import { defineSearchAttributeKey, SearchAttributeType, type SearchAttributePair } from '@temporalio/common';
import { DEFAULT_TENANT } from '../domain/names';

/**
 * Custom search attributes the session workflow upserts, so operators can filter sessions in the Web UI
 * (`SessionState = "paused"`). They must be registered on the namespace before a worker runs:
 * `temporal operator search-attribute create --name SessionState --type Keyword` (the embedded dev server
 * and docker-compose do this). Never put secrets here: search attributes are not encrypted.
 */
export const sessionStateKey = defineSearchAttributeKey('SessionState', SearchAttributeType.KEYWORD);
export const sessionRuntimeKey = defineSearchAttributeKey('SessionRuntime', SearchAttributeType.KEYWORD);
/** Whose session it is; absent on sessions of the `default` tenant started before tenants existed. */
export const sessionTenantKey = defineSearchAttributeKey('SessionTenant', SearchAttributeType.KEYWORD);
/** The spec's `labels`, for filtering (`SessionLabels = "team=infra"` matches a session that has that label). */
export const sessionLabelsKey = defineSearchAttributeKey('SessionLabels', SearchAttributeType.KEYWORD_LIST);
/** The task queue of the worker host the session's runtime lives on; absent while it has none (paused, ended). */
export const sessionHostKey = defineSearchAttributeKey('SessionHost', SearchAttributeType.KEYWORD);
/** Checkpoints taken (all runs), the head's id and when the newest was recorded (the workflow's clock). */
export const checkpointCountKey = defineSearchAttributeKey('CheckpointCount', SearchAttributeType.INT);
export const headCheckpointKey = defineSearchAttributeKey('HeadCheckpoint', SearchAttributeType.KEYWORD);
export const lastCheckpointAtKey = defineSearchAttributeKey('LastCheckpointAt', SearchAttributeType.DATETIME);
/** The error code of the session's failure (`RuntimeLost`, `SnapshotCorrupt`, …); absent while it has none. */
export const failureCodeKey = defineSearchAttributeKey('FailureCode', SearchAttributeType.KEYWORD);
/** Set on a fork at its start: `<source session>/<checkpoint>`, so an operator finds a session's family. */
export const forkedFromKey = defineSearchAttributeKey('ForkedFrom', SearchAttributeType.KEYWORD);

/**
 * What a session's workflow starts with, whoever starts it (a client, or the source of a fork): its phase, runtime,
 * tenant, labels and, on a fork, where it came from.
 */
export function startSearchAttributes(
  spec: { runtime: { kind: string }; tenant?: string; labels?: string[] },
  phase: 'starting' | 'paused',
  forkOf?: { sessionId: string; checkpointId: string },
): SearchAttributePair[] {
  return [
    { key: sessionStateKey, value: phase },
    { key: sessionRuntimeKey, value: spec.runtime.kind },
    { key: sessionTenantKey, value: spec.tenant ?? DEFAULT_TENANT },
    ...(spec.labels?.length ? [{ key: sessionLabelsKey, value: spec.labels }] : []),
    ...(forkOf ? [{ key: forkedFromKey, value: `${forkOf.sessionId}/${forkOf.checkpointId}` }] : []),
  ];
}

/** Name → type, as the `temporal` CLI spells them. */
export const SEARCH_ATTRIBUTES = {
  SessionState: 'Keyword',
  SessionRuntime: 'Keyword',
  SessionTenant: 'Keyword',
  SessionLabels: 'KeywordList',
  SessionHost: 'Keyword',
  CheckpointCount: 'Int',
  HeadCheckpoint: 'Keyword',
  LastCheckpointAt: 'Datetime',
  FailureCode: 'Keyword',
  ForkedFrom: 'Keyword',
} as const;
