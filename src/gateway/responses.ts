import { z } from '@hono/zod-openapi';
import type { ZodType } from 'zod';
import type { AppendResult, ForkResult, ResumeResult, RewindResult, SessionStatus, StopResult } from '../api';
import type { SessionSummary, TimelinePage } from '../client';
import {
  BranchTip,
  CarriedState,
  FailureInfo,
  ForkOrigin,
  RejectedSignal,
  RunControlState,
  RuntimeInstanceRef,
  TimelineEntry,
} from '../domain/records';
import { CheckpointId, CheckpointRef, SessionId, TenantId, TimelineIndex, VerificationResult } from '../domain/schemas';

/**
 * What the gateway answers, as the OpenAPI document describes it: the domain's own schemas wherever the workflow has
 * one, and schemas here for the results that are only TypeScript interfaces (src/api/messages.ts, whose types the
 * workflow bundle imports: it stays as it is, and the checks at the end of this file keep each interface and its
 * schema the same type).
 *
 * Answers are open: the domain's objects are strict (an unknown input field is refused), but a newer gateway may add
 * fields to an answer, so no object here refuses one. Every field an answer always has is required.
 */

/** Domain schemas and their open versions, each a component of the document. */
const components = new Map<ZodType, ZodType>();

/** `schema` as an answer: every object in it open, and each domain schema with a component replaced by it. */
function open<T extends ZodType>(schema: T): T {
  const known = components.get(schema);
  if (known) return known as T;
  const def = schema._zod.def as z.core.$ZodTypeDef & Record<string, unknown>;
  // As a child of `schema`, the clone keeps its description.
  const clone = (changes: Record<string, unknown>) => schema.clone({ ...def, ...changes }, { parent: true });
  switch (def.type) {
    case 'object': {
      const shape = (schema as unknown as z.ZodObject).shape;
      return clone({
        shape: Object.fromEntries(
          Object.entries(shape).map(([k, v]) => [k, TIMESTAMP_FIELD.test(k) ? dateTime(open(v)) : open(v)]),
        ),
        catchall: undefined,
      });
    }
    case 'array':
      return clone({ element: open(def.element as ZodType) });
    case 'optional':
      return clone({ innerType: open(def.innerType as ZodType) });
    case 'nullable': {
      const inner = open(def.innerType as ZodType);
      // A nullable component would be `allOf: [$ref, {type: [object, null]}]`, which admits no null (the component
      // is an object): a union with null says what is meant.
      return (components.has(def.innerType as ZodType) ? z.union([inner, z.null()]) : clone({ innerType: inner })) as T;
    }
    case 'union':
      return clone({ options: (def.options as ZodType[]).map(open) });
    default:
      return schema;
  }
}

/** Fields that hold a moment (`at`, `startedAt`, `createdAt`…): ISO 8601 strings, documented as `date-time`. */
const TIMESTAMP_FIELD = /^at$|[a-z]At$/;

/** `schema` (a string, maybe optional or nullable) documented as `format: date-time`. */
function dateTime<T extends ZodType>(schema: T): T {
  const def = schema._zod.def as z.core.$ZodTypeDef & Record<string, unknown>;
  const clone = (changes: Record<string, unknown>) => schema.clone({ ...def, ...changes }, { parent: true });
  switch (def.type) {
    case 'string':
      // A clone: a schema made before @hono/zod-openapi was loaded has no `openapi` of its own.
      return (clone({}) as unknown as z.ZodString).openapi({ format: 'date-time' }) as unknown as T;
    case 'optional':
    case 'nullable':
      return clone({ innerType: dateTime(def.innerType as ZodType) });
    default:
      return schema;
  }
}

/** The open version of a domain schema, as the component `name`; the same schema inside others refers to it. */
function component<T extends ZodType>(name: string, schema: T): T {
  const out = (open(schema) as unknown as { openapi: (name: string) => T }).openapi(name);
  components.set(schema, out);
  return out;
}

export const CheckpointRefAnswer = component('CheckpointRef', CheckpointRef);
export const RuntimeInstanceAnswer = component('RuntimeInstanceRef', RuntimeInstanceRef);
export const FailureInfoAnswer = component('FailureInfo', FailureInfo);
component('VerificationResult', VerificationResult);
component('RejectedSignal', RejectedSignal);
component('ForkOrigin', ForkOrigin);
component('BranchTip', BranchTip);
/**
 * Each kind of timeline entry is a component of its own (`TimelineEntryCheckpoint`, `TimelineEntryForked`…), and the
 * entry is one of them by `kind` (a discriminator with its mapping): generators then make one model per kind, named
 * after it, instead of numbered ones whose nested models collide.
 */
const entryKinds = (TimelineEntry as unknown as z.ZodDiscriminatedUnion<z.ZodObject[]>).options.map((option) => {
  const kind = (option.shape.kind as z.ZodLiteral<string>).value;
  return component(`TimelineEntry${kind.replace(/(^|-)(\w)/g, (_, __, c: string) => c.toUpperCase())}`, option);
});
export const TimelineEntryAnswer = z
  .discriminatedUnion('kind', entryKinds as unknown as [z.ZodObject, ...z.ZodObject[]])
  .openapi('TimelineEntry') as unknown as typeof TimelineEntry;
components.set(TimelineEntry, TimelineEntryAnswer);

/** A session's status (`GET /v1/sessions/{id}`, the answer of a start and of `configure`). */
export const SessionStatusAnswer = component(
  'SessionStatus',
  z.object({
    sessionId: SessionId,
    tenant: TenantId.optional().describe('set for a session of another tenant than `default`'),
    ...CarriedState.pick({
      phase: true,
      runtime: true,
      head: true,
      failure: true,
      lastRestore: true,
      lastRejectedSignal: true,
      startedAt: true,
      updatedAt: true,
    }).shape,
    runtimeKind: RuntimeInstanceRef.shape.kind,
    recentPhases: z
      .array(z.object({ n: z.number().int().min(0), phase: CarriedState.shape.phase, at: z.string() }))
      .optional()
      .describe('the phases this run went through, newest last (at most 16), numbered from its start'),
    checkpointCount: RunControlState.shape.checkpointCount,
    pendingControls: z.number().int().min(0).describe('controls accepted and not yet finished'),
    lastVerification: VerificationResult.nullable(),
    rejectedSignals: z.array(RejectedSignal).describe('the newest refused signals (at most ten), oldest first'),
    headIndex: TimelineIndex.nullable().describe('the head’s timeline index'),
    timelineLength: z.number().int().min(0),
    ...RunControlState.pick({
      branch: true,
      tips: true,
      runs: true,
      policies: true,
      forkedFrom: true,
      forks: true,
      forkCount: true,
      lastActivityAt: true,
      messageCount: true,
    }).shape,
    retention: RunControlState.shape.retention.unwrap().nullable(),
  }),
);

/** The answer of `POST /v1/sessions?wait=false`: the start was sent, the session is not running yet. */
export const StartedAnswer = z.object({ sessionId: SessionId }).openapi('SessionStarted');

export const SessionSummaryAnswer = z
  .object({
    sessionId: SessionId,
    /** The phase and runtime the session published (search attributes), absent until it has. */
    phase: z.string().optional(),
    runtimeKind: z.string().optional(),
    /** Temporal's status of the session's workflow (RUNNING, COMPLETED, …). */
    workflowStatus: z.string(),
    startedAt: z.string().openapi({ format: 'date-time' }),
  })
  .openapi('SessionSummary');

export const SessionPageAnswer = z
  .object({
    sessions: z.array(SessionSummaryAnswer),
    next: z.string().nullable().describe('the `cursor` of the next page; null on the last'),
  })
  .openapi('SessionPage');

export const TimelinePageAnswer = z
  .object({
    entries: z.array(TimelineEntryAnswer),
    next: TimelineIndex.nullable().describe('the `from` of the next page; null at the end'),
  })
  .openapi('TimelinePage');

export const ResumeResultAnswer = component(
  'ResumeResult',
  z.object({
    restoredFrom: CheckpointRef,
    fallbackFrom: z.array(z.object({ checkpointId: CheckpointId, reason: z.string() })).optional(),
    runtime: RuntimeInstanceRef,
  }),
);

export const StopResultAnswer = component(
  'StopResult',
  z.object({ phase: z.literal('completed'), finalCheckpoint: CheckpointRef.nullable() }),
);

export const VerifyResultAnswer = component('VerifyResult', z.object({ results: z.array(VerificationResult) }));

export const RewindResultAnswer = component(
  'RewindResult',
  z.object({
    restoredFrom: CheckpointRef,
    safetyCheckpoint: CheckpointRef.nullable(),
    branch: z.number().int().min(0),
    runtime: RuntimeInstanceRef.nullable(),
  }),
);

export const ForkResultAnswer = component(
  'ForkResult',
  z.object({
    from: CheckpointRef,
    forks: z.array(z.object({ sessionId: SessionId, checkpoint: CheckpointRef })),
  }),
);

export const AppendResultAnswer = component(
  'AppendResult',
  z.object({
    messageCount: z.number().int().min(0),
    firstIndex: z.number().int().min(0),
    checkpoint: CheckpointRef.nullable(),
  }),
);

/** `touch` answers nothing but that it was done. */
export const TouchAnswer = z.object({});

export const HealthAnswer = z.object({ ok: z.literal(true) });

/*
 * Each schema and the interface it documents are one type: a field added to, dropped from, or made optional or
 * nullable in either fails the build here. Mutual assignability alone misses an optional field one side lacks, hence
 * the key check.
 */
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? SameKeys<A, B> : false) : false;
type SameKeys<A, B> = [keyof A] extends [keyof B] ? ([keyof B] extends [keyof A] ? true : false) : false;
/** What JSON makes of an object: a Date is its ISO string, a field that may be undefined one that may be absent. */
type Json<T> = { [K in Exclude<keyof T, MaybeUndefined<T>>]: T[K] extends Date ? string : T[K] } & {
  [K in MaybeUndefined<T>]?: Exclude<T[K], undefined>;
};
type MaybeUndefined<T> = { [K in keyof T]-?: undefined extends T[K] ? K : never }[keyof T];

const sameTypes: {
  status: Same<z.infer<typeof SessionStatusAnswer>, SessionStatus>;
  summary: Same<z.infer<typeof SessionSummaryAnswer>, Json<SessionSummary>>;
  timeline: Same<z.infer<typeof TimelinePageAnswer>, TimelinePage>;
  resume: Same<z.infer<typeof ResumeResultAnswer>, ResumeResult>;
  stop: Same<z.infer<typeof StopResultAnswer>, StopResult>;
  rewind: Same<z.infer<typeof RewindResultAnswer>, RewindResult>;
  fork: Same<z.infer<typeof ForkResultAnswer>, ForkResult>;
  append: Same<z.infer<typeof AppendResultAnswer>, AppendResult>;
} = { status: true, summary: true, timeline: true, resume: true, stop: true, rewind: true, fork: true, append: true };
void sameTypes;
