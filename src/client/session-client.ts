import { defaultPayloadConverter } from '@temporalio/common';
import { decodeTypedSearchAttributes } from '@temporalio/common/lib/converter/payload-search-attributes';
import { requiredTsToDate } from '@temporalio/common/lib/time';
import {
  ApplicationFailure,
  WithStartWorkflowOperation,
  WorkflowExecutionAlreadyStartedError,
  WorkflowFailedError,
  WorkflowNotFoundError,
  WorkflowUpdateFailedError,
  type Client,
  type WorkflowHandle,
  type WorkflowStartOptions,
} from '@temporalio/client';
import { z } from 'zod';
import {
  appendUpdate,
  regenerateUpdate,
  type AppendResult,
  branchUpdate,
  configureUpdate,
  forkUpdate,
  rewindUpdate,
  touchSignal,
  touchUpdate,
  type ForkResult,
  type RewindResult,
  checkpointSignal,
  checkpointUpdate,
  DEFAULT_TASK_QUEUE,
  pauseSignal,
  pauseUpdate,
  resumeSignal,
  resumeUpdate,
  parseSessionKey,
  sessionDetails,
  sessionSummary,
  sessionWorkflowId,
  startUpdate,
  statusQuery,
  stopSignal,
  stopUpdate,
  verifyUpdate,
  timelineQuery,
  type ResumeResult,
  type SessionStatus,
  type SessionWorkflowInput,
  type StopResult,
  type TimelineEntry,
} from '../api/messages';
import { sessionRuntimeKey, sessionStateKey, startSearchAttributes } from '../api/search-attributes';
import { ERROR_CODES, isErrorCode } from '../domain/error-codes';
import { isError } from '../errors';
import { createHmac, randomBytes, randomUUID, timingSafeEqual } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import { inputFingerprint } from '../domain/fingerprint';
import { DEFAULT_TENANT, forkSessionIds } from '../domain/names';
import { foldTimeline, inView, mergeByIndex } from '../domain/timeline';
import type { SnapshotStore, TimelineLog } from '../snapshots';
import {
  AppendInput,
  RegenerateInput,
  BranchInput,
  ConfigureInput,
  ForkInput,
  RewindInput,
  TimelinePageInput,
  CheckpointInput,
  PauseInput,
  ResumeInput,
  SessionId,
  SessionLabels,
  StartSessionInput,
  StopInput,
  TenantId,
  VerifyInput,
  type CheckpointRef,
  type VerificationResult,
} from '../domain/schemas';
import { PHASES, type Phase } from '../domain/session-state';
import {
  InvalidInputError,
  SessionAlreadyExistsError,
  SessionBusyError,
  SessionClosedError,
  SessionError,
  SessionNotFoundError,
  SessionRuntimeError,
  SnapshotNotFoundError,
  sessionErrorFor,
} from './errors';

export interface SessionClientOptions {
  /** A connected Temporal client (its data converter, namespace and connection are used as they are). */
  client: Client;
  taskQueue?: string;
  /**
   * The secret list cursors are sealed with (HMAC-SHA256): a cursor altered or made elsewhere is refused at once.
   * Clients that take each other's cursors (gateways behind one load balancer) need the same one; default: random
   * per client (its `forTenant` clients share it).
   */
  cursorKey?: Uint8Array;
  /**
   * The snapshot store's timeline (`openSnapshotStore(config)` gives one): `timeline()` pages through a session's
   * whole timeline, also after the session ended. Without it, only the recent window the session holds is readable.
   */
  timeline?: TimelineLog;
  /**
   * Whose sessions this client starts, lists and reaches (default `default`). Another tenant's session is not found
   * through it, whatever its id: ids are unique within a tenant only.
   */
  tenant?: string;
}

/** A page of a session's timeline: entries in index order, and the `from` of the next page (null at the end). */
export interface TimelinePage {
  entries: TimelineEntry[];
  next: number | null;
}

export interface IoProgress {
  activity: string;
  phase?: string;
  bytesDone: number;
  bytesTotal?: number;
  attempt: number;
  lastFailure?: string;
}

/** temporal.api.enums.v1.WorkflowExecutionStatus by number, named as the SDK names them (WorkflowExecutionStatusName). */
const EXECUTION_STATUS = [
  'UNSPECIFIED',
  'RUNNING',
  'COMPLETED',
  'FAILED',
  'CANCELLED',
  'TERMINATED',
  'CONTINUED_AS_NEW',
  'TIMED_OUT',
  'PAUSED',
];

/** What `listPage` filters by (strict: an unknown field is refused). */
export const SessionListFilter = z.strictObject({
  phase: z.enum(PHASES).optional(),
  runtime: z.enum(['workspace', 'memory', 'conversation']).optional(),
  forkedFrom: SessionId.optional(),
  /** Sessions that have this label. */
  label: SessionLabels.element.optional(),
  limit: z.number().int().min(1).max(1000).optional(),
  cursor: z
    .string()
    .max(4096)
    .regex(/^[A-Za-z0-9_-]*$/, 'cursor must be a cursor this API returned')
    .optional(),
});
export type SessionListFilter = z.infer<typeof SessionListFilter>;

export interface SessionSummary {
  sessionId: string;
  phase: string | undefined;
  runtimeKind: string | undefined;
  workflowStatus: string;
  startedAt: Date;
}

/**
 * Starts and steers sessions. Inputs are checked with the same schemas the workflow uses, so bad input is
 * refused before anything is sent; failures come back as typed SessionErrors.
 *
 * @example
 * const sessions = new SessionClient({ client });
 * const session = await sessions.start({ sessionId: 'build-42', runtime: { kind: 'workspace', command: ['npm', 'run', 'dev'] } });
 * const checkpoint = await session.pause({ reason: 'nightly' });
 * await session.resume();
 */
export class SessionClient {
  readonly taskQueue: string;
  readonly tenant: string;
  private readonly cursorKey: Uint8Array;

  private readonly context: HandleContext;

  constructor(private readonly options: SessionClientOptions) {
    this.cursorKey = options.cursorKey ?? randomBytes(32);
    this.taskQueue = options.taskQueue ?? DEFAULT_TASK_QUEUE;
    this.tenant = parseInput(TenantId, options.tenant ?? DEFAULT_TENANT, '');
    this.context = {
      timeline: tenantTimeline(options.timeline, this.tenant),
      forkEnded: (source, input, from) => this.forkEnded(source, input, from),
    };
  }

  /** A client for the sessions of `tenant`, on the same connection, task queue and store. */
  forTenant(tenant: string): SessionClient {
    return new SessionClient({ ...this.options, tenant, cursorKey: this.cursorKey });
  }

  /**
   * Forks of a session that has ended: each fork's first run makes its first checkpoint from the source's (chunks
   * shared) and claims its own id, through the same start path and checks as `start`. Answers once each fork exists.
   */
  private async forkEnded(source: SessionHandle, input: ForkInput, from: CheckpointRef): Promise<ForkResult> {
    const spec = await source.startSpec();
    const ids = forkSessionIds(source.sessionId, input.newSessionId, input.count ?? 1, randomUUID().slice(0, 8));
    const origin = {
      sessionId: source.sessionId,
      checkpointId: from.checkpointId,
      ...(from.index !== undefined ? { index: from.index } : {}),
    };
    const forks: ForkResult['forks'] = [];
    for (const sessionId of ids) {
      const forkSpec = parseInput(StartSessionInput, { ...spec, ...input.overrides, sessionId }, sessionId);
      const forkOfEnded = {
        from: origin,
        source: from,
        ...(input.label ? { label: input.label } : {}),
        ...(input.paused ? { paused: true } : {}),
      };
      const { status } = await this.startAndAnswer(
        this.startOptions(forkSpec, { spec: forkSpec, forkOfEnded }, { forkOf: origin }),
        forkSpec,
      );
      forks.push({ sessionId, checkpoint: status.head! });
    }
    return { from, forks };
  }

  /**
   * Starts a new session and returns once it is running. Start and first answer are one call (update-with-start), so
   * a start that cannot succeed fails here with its typed error — InvalidInputError for a bad spec, SessionRuntimeError
   * for a command that cannot run, SessionAlreadyExistsError for an id that is or was in use — and leaves nothing
   * behind: no workflow running, no directory. With `{ wait: false }` it returns as soon as the session's workflow
   * exists; `status()` and `result()` then tell how the start went.
   */
  async start(spec: StartSessionInput, options: { wait?: boolean } = {}): Promise<SessionHandle> {
    const input = this.ownSpec(
      parseInput(StartSessionInput, spec, typeof spec?.sessionId === 'string' ? spec.sessionId : ''),
    );
    const startOptions = this.startOptions(input, { spec: input });
    if (options.wait === false) {
      try {
        const handle = await this.options.client.workflow.start('sessionWorkflow', startOptions);
        return new SessionHandle(input.sessionId, handle, this.context);
      } catch (err) {
        throw alreadyExists(err, input.sessionId);
      }
    }
    const { handle } = await this.startAndAnswer(startOptions, input);
    return new SessionHandle(input.sessionId, handle, this.context);
  }

  /** The spec with this client's tenant in it (none for `default`); a spec naming another tenant is refused. */
  private ownSpec(spec: StartSessionInput): StartSessionInput {
    const tenant = spec.tenant ?? this.tenant;
    if (tenant !== this.tenant) {
      throw new InvalidInputError(
        `session ${spec.sessionId} names tenant "${tenant}", but this client starts sessions of "${this.tenant}"`,
        spec.sessionId,
        [{ code: 'custom', path: ['tenant'], message: `expected "${this.tenant}" or no tenant` }],
      );
    }
    return this.tenant === DEFAULT_TENANT ? spec : { ...spec, tenant: this.tenant };
  }

  /** How every session's workflow is started: a new session, or a fork of one that has ended. */
  private startOptions(
    spec: StartSessionInput,
    args: SessionWorkflowInput,
    { forkOf }: { forkOf?: { sessionId: string; checkpointId: string } } = {},
  ): WorkflowStartOptions & { workflowIdConflictPolicy: 'FAIL' } {
    return {
      workflowId: sessionWorkflowId(spec.sessionId, spec.tenant),
      taskQueue: this.taskQueue,
      args: [args],
      // Session ids are never reused: neither a running nor an ended session's id starts another.
      workflowIdReusePolicy: 'REJECT_DUPLICATE',
      workflowIdConflictPolicy: 'FAIL',
      typedSearchAttributes: startSearchAttributes(spec, 'starting', forkOf),
      staticSummary: sessionSummary(spec, forkOf?.sessionId),
      staticDetails: sessionDetails(spec),
    };
  }

  /** Starts the workflow with its `start` update (update-with-start): its status once started, or the typed failure. */
  private async startAndAnswer(
    startOptions: WorkflowStartOptions & { workflowIdConflictPolicy: 'FAIL' },
    spec: StartSessionInput,
  ): Promise<{ status: SessionStatus; handle: WorkflowHandle }> {
    const startWorkflowOperation = new WithStartWorkflowOperation('sessionWorkflow', startOptions);
    try {
      const status = await this.options.client.workflow
        .executeUpdateWithStart(startUpdate, { args: [spec], startWorkflowOperation })
        .catch((err: unknown) => this.whyNotStarted(err, startOptions.workflowId, spec.sessionId));
      return { status, handle: await startWorkflowOperation.workflowHandle() };
    } catch (err) {
      throw alreadyExists(err, spec.sessionId);
    }
  }

  /** The typed reason a start with its first answer failed; a run that ended before answering says it in its result. */
  private async whyNotStarted(err: unknown, workflowId: string, sessionId: string): Promise<never> {
    const typed = toSessionError(err, sessionId);
    if (typed instanceof SessionError || err instanceof WorkflowExecutionAlreadyStartedError) throw typed;
    const ended = await this.options.client.workflow
      .getHandle(workflowId)
      .result()
      .then(
        () => err,
        (failure: unknown) => toSessionError(failure, sessionId),
      );
    throw ended;
  }

  /** A handle to an existing session. Nothing is sent until it is used. */
  get(sessionId: string): SessionHandle {
    const id = parseInput(SessionId, sessionId, String(sessionId));
    return new SessionHandle(
      id,
      this.options.client.workflow.getHandle(sessionWorkflowId(id, this.tenant)),
      this.context,
    );
  }

  /**
   * One page of sessions, newest first, from Temporal's visibility store: filtered by phase, runtime kind and fork
   * family (`forkedFrom`: the sessions forked from that one, forks of forks not included), `limit` a page (default
   * 100, at most 1000), and `cursor` the page after a previous one's `next`. A session whose workflow handed over
   * (continue-as-new) is listed once, by its newest run.
   */
  async listPage(filter: SessionListFilter = {}): Promise<{ sessions: SessionSummary[]; next: string | null }> {
    const f = parseInput(SessionListFilter, filter, '');
    const clauses = [
      `WorkflowType = 'sessionWorkflow'`,
      `TaskQueue = '${this.taskQueue}'`,
      'SessionState IS NOT NULL',
      `ExecutionStatus != 'ContinuedAsNew'`,
      // Sessions from before tenants have no SessionTenant: they are the default tenant's.
      this.tenant === DEFAULT_TENANT
        ? `(SessionTenant = '${DEFAULT_TENANT}' OR SessionTenant IS NULL)`
        : `SessionTenant = '${this.tenant}'`,
    ];
    if (f.phase !== undefined) clauses.push(`SessionState = '${f.phase}'`);
    if (f.runtime !== undefined) clauses.push(`SessionRuntime = '${f.runtime}'`);
    if (f.forkedFrom !== undefined) clauses.push(`ForkedFrom STARTS_WITH '${f.forkedFrom}/'`);
    if (f.label !== undefined) clauses.push(`SessionLabels = '${f.label}'`);
    const query = clauses.join(' AND ');
    const res = await this.options.client.workflowService.listWorkflowExecutions({
      namespace: this.options.client.options.namespace,
      query,
      pageSize: f.limit ?? 100,
      nextPageToken: f.cursor ? openCursor(this.cursorKey, f.cursor, query) : undefined,
    });
    const sessions = (res.executions ?? []).map((wf): SessionSummary => {
      const attributes = decodeTypedSearchAttributes(wf.searchAttributes?.indexedFields);
      return {
        sessionId: parseSessionKey((wf.execution?.workflowId ?? '').replace(/^session-/, '')).sessionId,
        phase: attributes.get(sessionStateKey),
        runtimeKind: attributes.get(sessionRuntimeKey),
        workflowStatus: EXECUTION_STATUS[wf.status ?? 0] ?? 'UNKNOWN',
        startedAt: requiredTsToDate(wf.startTime, 'startTime'),
      };
    });
    const token = res.nextPageToken;
    return { sessions, next: token && token.length > 0 ? sealCursor(this.cursorKey, Buffer.from(token), query) : null };
  }

  /**
   * Sessions on this client's task queue, newest first (from Temporal's visibility store), each id once. Runs that
   * were refused at their first task (a reused id, a bad raw start) never publish a phase and are not sessions.
   */
  async list(filter: { phase?: Phase; limit?: number } = {}): Promise<SessionSummary[]> {
    const out: SessionSummary[] = [];
    const limit = filter.limit || undefined;
    for (let cursor: string | undefined; ;) {
      const want = Math.min(1000, limit === undefined ? 1000 : limit - out.length);
      const page = await this.listPage({ phase: filter.phase, limit: want, cursor });
      out.push(...page.sessions);
      if (page.next === null || (limit !== undefined && out.length >= limit)) return out;
      cursor = page.next;
    }
  }
}

/**
 * A list cursor: Temporal's page token followed by an HMAC of it and of the query it pages (tenant and filters), under
 * the client's cursor key. Temporal answers a token it cannot read with UNKNOWN, which the Temporal client retries
 * until its deadline; a cursor this client (or one with the same key) did not hand out for this query — mistyped,
 * made up, altered or forged — is refused at once instead, and never reaches Temporal.
 */
const CURSOR_MAC_BYTES = 16;

function cursorMac(key: Uint8Array, token: Buffer, query: string): Buffer {
  return createHmac('sha256', key).update(query).update('\0').update(token).digest().subarray(0, CURSOR_MAC_BYTES);
}

function sealCursor(key: Uint8Array, token: Buffer, query: string): string {
  return Buffer.concat([token, cursorMac(key, token, query)]).toString('base64url');
}

function openCursor(key: Uint8Array, cursor: string, query: string): Buffer {
  const bytes = Buffer.from(cursor, 'base64url');
  const token = bytes.subarray(0, -CURSOR_MAC_BYTES);
  const mac = bytes.subarray(-CURSOR_MAC_BYTES);
  if (bytes.length <= CURSOR_MAC_BYTES || !timingSafeEqual(cursorMac(key, token, query), mac)) {
    const message = 'cursor must be a cursor this API returned for the same filters';
    throw new InvalidInputError(`invalid input: cursor: ${message}`, '', [
      { code: 'custom', path: ['cursor'], message },
    ]);
  }
  return token;
}

/**
 * The timeline of `tenant`'s sessions in the store `log` belongs to: that tenant's, when the store keeps tenants (the
 * chunked store does); else `log` for the default tenant only, since another tenant's session of the same id is not
 * the one `log` holds.
 */
function tenantTimeline(log: TimelineLog | undefined, tenant: string): TimelineLog | undefined {
  const store = log as Partial<Pick<SnapshotStore, 'forTenant'>> | undefined;
  if (typeof store?.forTenant === 'function') return store.forTenant(tenant);
  return tenant === DEFAULT_TENANT ? log : undefined;
}

/** What a handle needs of its client: the store's timeline, and how to fork a session that has ended. */
interface HandleContext {
  timeline?: TimelineLog;
  forkEnded?: (source: SessionHandle, input: ForkInput, from: CheckpointRef) => Promise<ForkResult>;
}

/**
 * Controls and views of one session. Every control takes an optional idempotency key; one is generated when absent,
 * so a retry of the same call by the SDK is still answered once.
 */
export class SessionHandle {
  constructor(
    readonly sessionId: string,
    readonly workflow: WorkflowHandle,
    private readonly context: HandleContext = {},
  ) {}

  private get timelineLog(): TimelineLog | undefined {
    return this.context.timeline;
  }

  /**
   * Goes back to a checkpoint (`to`: its timeline index or id) in place. A running session is checkpointed first
   * (trigger `rewind-safety`) and restored from the target; a paused one restores it on resume. Later checkpoints are
   * kept; a new branch starts at the target.
   */
  async rewind(input: RewindInput): Promise<RewindResult> {
    const args = withKey(parseInput(RewindInput, input, this.sessionId));
    return this.update(() =>
      this.workflow.executeUpdate(rewindUpdate, { args: [args], updateId: updateIdFor('rewind', args) }),
    );
  }

  /**
   * New independent sessions (`count`, default 1) whose first state is a checkpoint of this one (`from`, default the
   * current state); they share its chunks in the store. This session is unchanged and keeps running.
   */
  async fork(input: ForkInput = {}): Promise<ForkResult> {
    const args = withKey(parseInput(ForkInput, input, this.sessionId));
    try {
      return await this.update(() =>
        this.workflow.executeUpdate(forkUpdate, { args: [args], updateId: updateIdFor('fork', args) }),
      );
    } catch (err) {
      // An ended session has no workflow to do it: its checkpoints are forked from here (DBOS's fork of a finished run).
      if (!(err instanceof SessionClosedError) || !this.context.forkEnded) throw err;
      return this.context.forkEnded(this, args, await this.endedCheckpoint(args));
    }
  }

  /** The checkpoint of an ended session that a fork names: by index or id, else its head. */
  private async endedCheckpoint(input: ForkInput): Promise<CheckpointRef> {
    if (input.messageIndex !== undefined) {
      throw new InvalidInputError(
        `session ${this.sessionId} has ended: fork it by "from" (an index or checkpoint id), not by messageIndex`,
        this.sessionId,
        [],
      );
    }
    const { from } = input;
    if (from === undefined) {
      const { head } = await this.status();
      if (!head) throw new SnapshotNotFoundError(`session ${this.sessionId} has no checkpoint`, this.sessionId, '');
      return head;
    }
    for (let page: TimelinePage | null = await this.timelinePage({ from: 1, limit: 1000, all: true }); page;) {
      for (const e of page.entries) {
        if (e.kind === 'checkpoint' && (e.index === from || e.checkpoint.checkpointId === from)) return e.checkpoint;
      }
      page = page.next === null ? null : await this.timelinePage({ from: page.next, limit: 1000, all: true });
    }
    throw new SnapshotNotFoundError(`session ${this.sessionId} has no checkpoint ${String(from)}`, this.sessionId, '');
  }

  /** The spec the session was started with, from its workflow's history (a continued run carries it too). */
  async startSpec(): Promise<StartSessionInput> {
    const history = await this.call(() => this.workflow.fetchHistory());
    const payload = history.events?.[0]?.workflowExecutionStartedEventAttributes?.input?.payloads?.[0];
    const input = payload ? defaultPayloadConverter.fromPayload<SessionWorkflowInput>(payload) : undefined;
    if (!input?.spec) throw new SessionNotFoundError(`session ${this.sessionId} has no start spec`, this.sessionId);
    return input.spec;
  }

  /** A fork of the current state: `branch({ count: 3 })` makes three sessions like this one. */
  async branch(input: BranchInput = {}): Promise<ForkResult> {
    const args = withKey(parseInput(BranchInput, input, this.sessionId));
    return this.update(() =>
      this.workflow.executeUpdate(branchUpdate, { args: [args], updateId: updateIdFor('branch', args) }),
    );
  }

  /**
   * Conversation runtime: appends messages (checked against the tool-call pair rules where they are stored), with a
   * checkpoint after them when `checkpoint` is true (trigger `turn`).
   */
  async append(input: AppendInput): Promise<AppendResult> {
    const args = withKey(parseInput(AppendInput, input, this.sessionId));
    return this.update(() =>
      this.workflow.executeUpdate(appendUpdate, { args: [args], updateId: updateIdFor('append', args) }),
    );
  }

  /** Conversation runtime: a fork from just before the last assistant turn, to answer it again. */
  async regenerate(input: RegenerateInput = {}): Promise<ForkResult> {
    const args = withKey(parseInput(RegenerateInput, input, this.sessionId));
    return this.update(() =>
      this.workflow.executeUpdate(regenerateUpdate, {
        args: [args],
        updateId: updateIdFor('regenerate', args),
      }),
    );
  }

  /** Replaces the live session's policies and/or retention. */
  async configure(input: ConfigureInput): Promise<SessionStatus> {
    const args = withKey(parseInput(ConfigureInput, input, this.sessionId));
    return this.update(() =>
      this.workflow.executeUpdate(configureUpdate, {
        args: [args],
        updateId: updateIdFor('configure', args),
      }),
    );
  }

  /** Says the session is in use: its idle-pause timer starts again. Fire-and-forget with `{ wait: false }`. */
  async touch(options: { wait?: boolean } = {}): Promise<void> {
    if (options.wait === false) {
      await this.update(() => this.workflow.signal(touchSignal, {}));
      return;
    }
    await this.update(() => this.workflow.executeUpdate(touchUpdate, { args: [{}] }));
  }

  /** Captures the running session; returns the new checkpoint's reference. */
  async checkpoint(input: CheckpointInput = {}): Promise<CheckpointRef> {
    const args = withKey(parseInput(CheckpointInput, input, this.sessionId));
    return this.update(() =>
      this.workflow.executeUpdate(checkpointUpdate, {
        args: [args],
        updateId: updateIdFor('checkpoint', args),
      }),
    );
  }

  /** Checkpoints, then stops the runtime to free its compute; returns the checkpoint. */
  async pause(input: PauseInput = {}): Promise<CheckpointRef> {
    const args = withKey(parseInput(PauseInput, input, this.sessionId));
    return this.update(() =>
      this.workflow.executeUpdate(pauseUpdate, { args: [args], updateId: updateIdFor('pause', args) }),
    );
  }

  /** Restores the newest (or the given) checkpoint that verifies, possibly on another machine. */
  async resume(input: ResumeInput = {}): Promise<ResumeResult> {
    const args = withKey(parseInput(ResumeInput, input, this.sessionId));
    return this.update(() =>
      this.workflow.executeUpdate(resumeUpdate, { args: [args], updateId: updateIdFor('resume', args) }),
    );
  }

  /** Ends the session, with a final checkpoint of a running session unless `checkpoint: false`. */
  async stop(input: StopInput = {}): Promise<StopResult> {
    const args = withKey(parseInput(StopInput, input, this.sessionId));
    return this.update(() =>
      this.workflow.executeUpdate(stopUpdate, { args: [args], updateId: updateIdFor('stop', args) }),
    );
  }

  /**
   * Reads the session's checkpoints (or one) back from the store on a worker — each manifest against what the
   * session recorded, every chunk authenticated — and returns what each one is: `ok`, `missing`, `corrupt`,
   * `tampered`, `incompatible` or `key-unavailable`. Changes nothing; the results also go to the timeline.
   */
  async verify(input: VerifyInput = {}): Promise<VerificationResult[]> {
    const args = parseInput(VerifyInput, input, this.sessionId);
    return this.update(() => this.workflow.executeUpdate(verifyUpdate, { args: [args] }));
  }

  /** Fire-and-forget controls: no result; a control that cannot run shows in `status().lastRejectedSignal`. */
  async signal(
    control: 'checkpoint' | 'pause' | 'resume' | 'stop',
    input: Record<string, unknown> = {},
  ): Promise<void> {
    const send = async () => {
      switch (control) {
        case 'checkpoint':
          return this.workflow.signal(checkpointSignal, parseInput(CheckpointInput, input, this.sessionId));
        case 'pause':
          return this.workflow.signal(pauseSignal, parseInput(PauseInput, input, this.sessionId));
        case 'resume':
          return this.workflow.signal(resumeSignal, parseInput(ResumeInput, input, this.sessionId));
        case 'stop':
          return this.workflow.signal(stopSignal, parseInput(StopInput, input, this.sessionId));
      }
    };
    try {
      await send();
    } catch (err) {
      // Signalling a closed workflow reports "not found"; the session exists, it has ended.
      if (err instanceof WorkflowNotFoundError && (await this.exists())) throw this.closed(err);
      throw toSessionError(err, this.sessionId);
    }
  }

  private closed(cause: unknown): SessionClosedError {
    return new SessionClosedError(`session ${this.sessionId} has ended: no control can change it`, this.sessionId, {
      cause,
    });
  }

  private async exists(): Promise<boolean> {
    try {
      await this.workflow.describe();
      return true;
    } catch {
      return false;
    }
  }

  /**
   * Snapshot I/O in progress (capture, restore), read from the heartbeats of the session's pending activities:
   * bytes done (and the total, when known), the attempt, and the failure a retry is recovering from.
   */
  async progress(): Promise<IoProgress[]> {
    const description = await this.call(() => this.workflow.describe());
    return (description.raw.pendingActivities ?? []).flatMap((a): IoProgress[] => {
      const activity = a.activityType?.name ?? '';
      if (activity === 'watchRuntime') return [];
      const payload = a.heartbeatDetails?.payloads?.[0];
      const details = payload ? defaultPayloadConverter.fromPayload<Partial<IoProgress>>(payload) : {};
      return [
        {
          activity,
          phase: details.phase,
          bytesDone: details.bytesDone ?? 0,
          bytesTotal: details.bytesTotal,
          attempt: a.attempt ?? 1,
          lastFailure: a.lastFailure?.message ?? undefined,
        },
      ];
    });
  }

  status(): Promise<SessionStatus> {
    return this.call(() => this.workflow.query(statusQuery));
  }

  /**
   * Timeline entries in index order (`from`, `limit`, `branch`; checkpoints replaced by `regenerate` only with
   * `all`). Indices are stable: pass one back as `rewind({ to })` or `fork({ from })`.
   */
  async timeline(options: TimelinePageInput = {}): Promise<TimelineEntry[]> {
    return (await this.timelinePage(options)).entries;
  }

  /**
   * A page of the timeline: from the store's log (when the client has the store) and the recent window the session
   * holds (entries not yet in the store among them), each index once. An ended session's timeline is read from the
   * store alone.
   */
  async timelinePage(options: TimelinePageInput = {}): Promise<TimelinePage> {
    const page = parseInput(TimelinePageInput, options, this.sessionId);
    const limit = page.limit ?? 100;
    const recent = await this.call(() => this.workflow.query(timelineQuery)).catch((err: unknown) => {
      if (this.timelineLog && err instanceof SessionNotFoundError === false) return [] as TimelineEntry[];
      throw err;
    });
    const firstRecent = recent.find((e) => e.index !== undefined)?.index ?? Infinity;
    let from = page.from ?? 1;
    const out: TimelineEntry[] = [];
    // Read the store up to where the recent window begins; the window (newest) needs no store read.
    while (this.timelineLog && from < firstRecent && out.length < limit) {
      const stored = await this.call(() => this.timelineLog!.readTimeline(this.sessionId, { from, limit: 1000 }));
      const entries = stored.entries as unknown as TimelineEntry[];
      out.push(...entries.filter((e) => (e.index ?? 0) < firstRecent));
      if (stored.next === null || entries.length === 0) break;
      from = stored.next;
    }
    const merged = foldTimeline(mergeByIndex(out, recent)).filter(
      (e) => (e.index ?? Infinity) >= (page.from ?? 1) && inView(e, page),
    );
    const entries = merged.slice(0, limit);
    const last = entries[entries.length - 1];
    const more = merged.length > limit || (this.timelineLog !== undefined && from < firstRecent && out.length >= limit);
    return { entries, next: more && last?.index !== undefined ? last.index + 1 : null };
  }

  /** Waits for the session to end: its stop result, or a typed error if it failed. */
  result(): Promise<StopResult> {
    return this.call(() => this.workflow.result() as Promise<StopResult>);
  }

  /**
   * Sends a control. A session handing over to its next run refuses new controls for a moment (Busy, nothing
   * changed): the control is sent again, with the same key, after a short pause.
   */
  private async update<T>(fn: () => Promise<T>): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await fn();
      } catch (err) {
        if (isClosedWorkflowError(err)) throw this.closed(err);
        const typed = toSessionError(err, this.sessionId);
        if (typed instanceof SessionBusyError && attempt < BUSY_ATTEMPTS) {
          await delay(Math.min(50 * attempt, 500));
          continue;
        }
        throw typed;
      }
    }
  }

  private async call<T>(fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (err) {
      throw toSessionError(err, this.sessionId);
    }
  }
}

/** How often a control refused as Busy is sent again (about half a minute in all). */
const BUSY_ATTEMPTS = 80;

/** A workflow id in use is the session id in use: session ids are never reused. */
function alreadyExists(err: unknown, sessionId: string): unknown {
  return err instanceof WorkflowExecutionAlreadyStartedError
    ? new SessionAlreadyExistsError(`session ${sessionId} already exists`, sessionId, { cause: err })
    : err;
}

/** Every control carries an idempotency key: the caller's, or one made here (a retried call then runs once). */
function withKey<T extends { idempotencyKey?: string }>(input: T): T {
  return input.idempotencyKey === undefined ? { ...input, idempotencyKey: randomUUID() } : input;
}

/**
 * The server deduplicates updates by id within a run whatever their name and input, so the control and the input's
 * digest are part of the id: a key reused for another control, or with other input, then reaches the workflow, which
 * refuses it; a retry of the same control and input is still answered by the server with the first outcome.
 */
function updateIdFor(control: string, args: { idempotencyKey?: string }): string | undefined {
  const key = args.idempotencyKey;
  return key === undefined ? undefined : `${control}:${key}:${inputFingerprint(args)}`;
}

function parseInput<T>(schema: z.ZodType<T>, raw: unknown, sessionId: string): T {
  const result = schema.safeParse(raw);
  if (!result.success) {
    const summary = result.error.issues.map((i) => `${i.path.join('.') || 'input'}: ${i.message}`).join('; ');
    throw new InvalidInputError(`invalid input: ${summary}`, sessionId, result.error.issues);
  }
  return result.data;
}

/** Walks the cause chain to the first failure of ours and turns it into the matching SessionError. */
export function toSessionError(err: unknown, sessionId: string): unknown {
  if (err instanceof SessionError) return err;
  if (err instanceof WorkflowNotFoundError) {
    return new SessionNotFoundError(`session ${sessionId} does not exist`, sessionId, { cause: err });
  }
  for (let cause: unknown = err; isError(cause); cause = cause.cause) {
    if (cause instanceof ApplicationFailure && isErrorCode(cause.type)) {
      return sessionErrorFor(cause.type, cause.message, sessionId, err, cause.details?.[0]);
    }
  }
  if (err instanceof WorkflowUpdateFailedError || err instanceof WorkflowFailedError) {
    return new SessionRuntimeError(ERROR_CODES.RuntimeFailed, err.message, sessionId, { cause: err });
  }
  return err;
}

function isClosedWorkflowError(err: unknown): boolean {
  return isError(err) && /workflow execution already completed/i.test(err.message);
}
