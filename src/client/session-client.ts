import { decodeFromPayloadsAtIndex } from '@temporalio/common/lib/internal-non-workflow';
import { decodeTypedSearchAttributes } from '@temporalio/common/lib/converter/payload-search-attributes';
import { requiredTsToDate } from '@temporalio/common/lib/time';
import {
  ApplicationFailure,
  ServiceError,
  WithStartWorkflowOperation,
  WorkflowExecutionAlreadyStartedError,
  WorkflowFailedError,
  WorkflowNotFoundError,
  WorkflowUpdateFailedError,
  type Client,
  type WorkflowHandle,
  type WorkflowStartOptions,
} from '@temporalio/client';
import { temporal } from '@temporalio/proto';
import { z } from 'zod';
import {
  CONTROLS,
  type ControlMethods,
  type ControlName,
  type ControlResult,
  type ControlSpec,
  type SignalledControl,
} from '../api/controls';
import {
  type AppendResult,
  type ForkResult,
  type RewindResult,
  DEFAULT_TASK_QUEUE,
  parseSessionKey,
  sessionDetails,
  sessionSummary,
  sessionWorkflowId,
  startUpdate,
  statusQuery,
  timelineQuery,
  type ResumeResult,
  type SessionStatus,
  type SessionWorkflowInput,
  type StopResult,
  type TimelineEntry,
} from '../api/messages';
import {
  checkpointCountKey,
  failureCodeKey,
  headCheckpointKey,
  lastCheckpointAtKey,
  sessionHostKey,
  sessionRuntimeKey,
  sessionStateKey,
  startSearchAttributes,
} from '../api/search-attributes';
import { ERROR_CODES, isErrorCode } from '../domain/error-codes';
import { isError } from '../errors';
import { createHmac, randomBytes, randomUUID, timingSafeEqual } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import { inputFingerprint } from '../domain/fingerprint';
import { DEFAULT_TENANT, forkSessionIds } from '../domain/names';
import { workerTimeline, workerVerify } from './worker-reads';
import { describeEntry, foldTimeline, inView, mergeByIndex, nearestIndex } from '../domain/timeline';
import type { SnapshotStore, TimelineLog } from '../snapshots';
// The archive module alone: a client that exports or imports loads no engine (it is handed the store).
import { exportArchive, importArchive } from '../snapshots/archive';
import type { Readable } from 'node:stream';
import { ExportSessionInput, ImportSessionInput, type ImportResult, type SessionOperationName } from '../api/archives';
import { archiveOpener, checkpointsToExport, keyOf, messageCountsOf, sealOf, type ArchiveSource } from './archives';
import {
  type AppendInput,
  type RegenerateInput,
  type BranchInput,
  type ConfigureInput,
  ForkInput,
  type RewindInput,
  TimelinePageInput,
  type CheckpointInput,
  type PauseInput,
  type ResumeInput,
  RuntimeKindSchema,
  SessionId,
  SessionLabels,
  StartSessionInput,
  type StopInput,
  TenantId,
  VerifyInput,
  type CheckpointRef,
  checkpointRefOf,
  type VerificationResult,
} from '../domain/schemas';
import { PHASES, type Phase } from '../domain/session-state';
import { PlacementConstraints } from '../domain/placement';
import { loadConfig, type Config } from '../config';
import { connectTemporalClient } from './connect';
import {
  InvalidInputError,
  SessionAlreadyExistsError,
  SessionBusyError,
  SessionClosedError,
  SessionError,
  SessionFailedError,
  WorkerUnavailableError,
  type LastKnownSession,
  type SessionFailure,
  SessionNotFoundError,
  SessionRuntimeError,
  SnapshotNotFoundError,
  failureOf,
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
   * Where `timeline()` reads what a session no longer holds (an ended session's whole timeline). By default a worker
   * reads it with its store and keys (`workerTimeline`: one short workflow a page), so a client holds no store key; a
   * process that has the store itself (a worker's own tools) may pass it (`openSnapshotStore(config)`).
   */
  timeline?: TimelineLog;
  /**
   * Whose sessions this client starts, lists and reaches (default `default`). Another tenant's session is not found
   * through it, whatever its id: ids are unique within a tenant only.
   */
  tenant?: string;
  /**
   * The snapshot store with its keys, for `export` and `import`: they re-encrypt a checkpoint between this store's data
   * keys and an archive's, so they run where the keys are (a worker's host, the CLI with the worker's configuration).
   */
  store?: SnapshotStore;
  /** Whether `close()` closes the client's connection: set by `SessionClient.connect`, which opened it. */
  ownsConnection?: boolean;
  /**
   * How long `status()` waits for a worker to answer (default 15 s). Then it asks Temporal what it knows and throws
   * WorkerUnavailableError with it: a session whose workers are all gone is answered, not waited on forever.
   */
  statusTimeoutMs?: number;
}

/** What `SessionClient.connect` takes beside the configuration. */
export type ConnectOptions = Pick<SessionClientOptions, 'tenant' | 'timeline' | 'store'>;

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
  runtime: RuntimeKindSchema.optional(),
  forkedFrom: SessionId.optional(),
  /** Sessions that have this label. */
  label: SessionLabels.element.optional(),
  /** Sessions whose runtime is (or was last) on this worker: its worker id or host task queue. */
  host: PlacementConstraints.shape.host,
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
 * const sessions = await SessionClient.connect(); // as the worker's environment says: TEMPORAL_ADDRESS, DS_PAYLOAD_KEYS…
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
      timeline: options.timeline
        ? tenantTimeline(options.timeline, this.tenant)
        : workerTimeline(options.client, this.taskQueue, this.tenant),
      ...(options.statusTimeoutMs !== undefined ? { statusTimeoutMs: options.statusTimeoutMs } : {}),
      forkEnded: (source, input, from) => this.forkEnded(source, input, from),
      verifyEnded: workerVerify(options.client, this.taskQueue, this.tenant),
    };
  }

  /**
   * Connects as the worker's configuration says (`loadConfig()`, the environment, by default): Temporal's address,
   * TLS or API key, namespace, task queue and the payload codec with its keys. `close()` closes the connection.
   * @throws MissingPayloadKeyError when payloads are encrypted and no payload key is configured.
   * @example
   * const sessions = await SessionClient.connect(loadConfig());
   * try {
   *   await sessions.start({ sessionId: 'build-42', runtime: { kind: 'memory' } });
   * } finally {
   *   await sessions.close();
   * }
   */
  static async connect(config: Config = loadConfig(), options: ConnectOptions = {}): Promise<SessionClient> {
    const client = await connectTemporalClient(config);
    return new SessionClient({ ...options, client, taskQueue: config.taskQueue, ownsConnection: true });
  }

  /** Closes the connection `connect` opened; a client given its Temporal client leaves that one open. */
  async close(): Promise<void> {
    if (this.options.ownsConnection) await this.options.client.connection.close();
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

  /**
   * A portable archive of a checkpoint of the session (its newest by default; with `ancestors`, its parent chain too),
   * sealed for an X25519 public key or a passphrase; see docs/design.md §5.11. The stream reads the store as it is
   * consumed (bounded memory) and needs no worker of the session: a paused, stopped or failed session exports alike.
   * The checkpoints and the session's spec are looked up before it is returned, so a missing one is a typed error here.
   * @example
   * const archive = await sessions.export('build-42', { recipientPublicKey: fs.readFileSync('peer.pub', 'utf8') });
   * await pipeline(archive, fs.createWriteStream('build-42.dsa'));
   */
  async export(sessionId: string, input: ExportSessionInput): Promise<Readable> {
    const id = parseInput(SessionId, sessionId, String(sessionId));
    const args = parseInput(ExportSessionInput, input, id);
    const store = this.archiveStore('export', id);
    const checkpointIds = await checkpointsToExport(store, id, args.checkpointId, args.ancestors === true);
    // The importing deployment gives the session its own id and tenant.
    const handle = this.get(id);
    const spec: Partial<StartSessionInput> = { ...(await handle.startSpec()) };
    delete spec.sessionId;
    delete spec.tenant;
    // A conversation goes on from its message count, which its timeline holds, not its state.
    const messageCounts =
      spec.runtime?.kind === 'conversation' ? await messageCountsOf(handle, checkpointIds) : undefined;
    return exportArchive(store, {
      sessionId: id,
      checkpointIds,
      seal: sealOf(args),
      spec,
      ...(messageCounts ? { messageCounts } : {}),
    });
  }

  /**
   * Starts a new session from an archive (`export`'s, from this deployment or another): every record and digest is
   * verified first, then its checkpoints are stored under the new id, sealed under this store's keys (a new data
   * key), and the session starts from the newest, resumed unless `paused`. It begins like a fork of the exported
   * checkpoint. A damaged, cut or wrongly keyed archive is a typed error (SnapshotTampered, SnapshotCorrupt,
   * SnapshotIncompatible) and changes nothing: no session, nothing in the store.
   * @example
   * const { session } = await sessions.import('build-42.dsa', { privateKey: fs.readFileSync('me.key', 'utf8') });
   */
  async import(archive: ArchiveSource, input: ImportSessionInput): Promise<{ session: SessionHandle } & ImportResult> {
    const args = parseInput(ImportSessionInput, input, input?.sessionId ?? '');
    const store = this.archiveStore('import', args.sessionId ?? '');
    const owner = `import-${randomUUID()}`;
    let spec: StartSessionInput | undefined;
    const imported = await importArchive(store, {
      open: archiveOpener(archive),
      key: keyOf(args),
      owner,
      sessionId: ({ header, spec: archived }) => {
        const sessionId = args.sessionId ?? importedId(header.source.sessionId);
        const raw = { ...(archived as object), ...args.overrides, sessionId };
        spec = this.ownSpec(parseInput(StartSessionInput, raw, sessionId));
        if (spec.runtime.kind !== header.runtime.kind) {
          throw new InvalidInputError(
            `the archive's spec is a ${spec.runtime.kind} session, its checkpoint a ${header.runtime.kind} one`,
            sessionId,
            [],
          );
        }
        return sessionId;
      },
    });
    const head = imported.manifests[imported.manifests.length - 1]!;
    const { messageCount } = imported.header.checkpoints[imported.header.checkpoints.length - 1]!;
    const from = { sessionId: imported.header.source.sessionId, checkpointId: head.checkpointId };
    const fork = {
      from,
      checkpoint: { ...checkpointRefOf(head), ...(messageCount !== undefined ? { messageCount } : {}) },
      claimOwner: owner,
      ...(args.paused ? { paused: true } : {}),
      // A conversation goes on from its message count; its timeline starts at this checkpoint, so nothing before it
      // is a turn to regenerate or a cut to refuse.
      ...(messageCount !== undefined ? { conversation: { unsafeCuts: [], turnStarts: [] } } : {}),
    };
    const { handle } = await this.startAndAnswer(
      this.startOptions(spec!, { spec: spec!, fork }, { forkOf: from }),
      spec!,
    );
    return {
      session: new SessionHandle(spec!.sessionId, handle, this.context),
      sessionId: spec!.sessionId,
      importedFrom: from,
      checkpoints: imported.manifests.map((m) => ({ checkpointId: m.checkpointId, size: m.size })),
    };
  }

  /** Whether this client can `export` and `import` (it was given the store). */
  get movesArchives(): boolean {
    return this.options.store !== undefined;
  }

  /** The store export and import use, for this client's tenant. */
  private archiveStore(operation: SessionOperationName, sessionId: string): SnapshotStore {
    const store = this.options.store;
    if (!store) {
      throw new InvalidInputError(
        `${operation} needs the snapshot store and its keys: give SessionClient the store (options.store)`,
        sessionId,
        [],
      );
    }
    if (this.tenant === DEFAULT_TENANT) return store;
    if (!store.forTenant) throw new InvalidInputError(`this store keeps one tenant only`, sessionId, []);
    return store.forTenant(this.tenant);
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
    // A worker id is short for its host task queue on this client's task queue.
    if (f.host !== undefined) {
      clauses.push(`SessionHost = '${f.host.includes('@') ? f.host : `${this.taskQueue}@${f.host}`}'`);
    }
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
  async list(filter: { phase?: Phase; host?: string; limit?: number } = {}): Promise<SessionSummary[]> {
    const out: SessionSummary[] = [];
    const limit = filter.limit || undefined;
    for (let cursor: string | undefined; ;) {
      const want = Math.min(1000, limit === undefined ? 1000 : limit - out.length);
      const page = await this.listPage({ phase: filter.phase, host: filter.host, limit: want, cursor });
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
function tenantTimeline(log: TimelineLog, tenant: string): TimelineLog | undefined {
  const store = log as Partial<Pick<SnapshotStore, 'forTenant'>>;
  if (typeof store.forTenant === 'function') return store.forTenant(tenant);
  return tenant === DEFAULT_TENANT ? log : undefined;
}

/** What a handle needs of its client: the store's timeline, and how to fork a session that has ended. */
interface HandleContext {
  timeline?: Pick<TimelineLog, 'readTimeline'>;
  statusTimeoutMs?: number;
  forkEnded?: (source: SessionHandle, input: ForkInput, from: CheckpointRef) => Promise<ForkResult>;
  verifyEnded?: (sessionId: string, checkpointId?: string) => Promise<VerificationResult[]>;
}

/**
 * Controls and views of one session. Every control takes an optional idempotency key; one is generated when absent,
 * so a retry of the same call by the SDK is still answered once.
 */
export class SessionHandle implements ControlMethods {
  constructor(
    readonly sessionId: string,
    readonly workflow: WorkflowHandle,
    private readonly context: HandleContext = {},
  ) {}

  private get timelineLog(): Pick<TimelineLog, 'readTimeline'> | undefined {
    return this.context.timeline;
  }

  /**
   * Goes back to a checkpoint (`to`: its timeline index or id) in place. A running session is checkpointed first
   * (trigger `rewind-safety`) and restored from the target; a paused one restores it on resume. Later checkpoints are
   * kept; a new branch starts at the target.
   */
  rewind(input: RewindInput): Promise<RewindResult> {
    return this.control('rewind', input);
  }

  /**
   * New independent sessions (`count`, default 1) whose first state is a checkpoint of this one (`from`, default the
   * current state); they share its chunks in the store. This session is unchanged and keeps running.
   */
  async fork(input: ForkInput = {}): Promise<ForkResult> {
    const args = withKey(parseInput(ForkInput, input, this.sessionId));
    try {
      return await this.control('fork', args);
    } catch (err) {
      // An ended session has no workflow to do it: its checkpoints are forked from here (DBOS's fork of a finished run).
      const ended = err instanceof SessionClosedError || err instanceof SessionFailedError;
      if (!ended || !this.context.forkEnded) throw err;
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
    const indices = new Map<string, number>();
    let there: TimelineEntry | undefined;
    for (let page: TimelinePage | null = await this.timelinePage({ from: 1, limit: 1000, all: true }); page;) {
      for (const e of page.entries) {
        if (e.kind === 'checkpoint' && (e.index === from || e.checkpoint.checkpointId === from)) return e.checkpoint;
        if (e.kind === 'checkpoint' && e.index !== undefined) indices.set(e.checkpoint.checkpointId, e.index);
        if (e.index === from) there = e;
      }
      page = page.next === null ? null : await this.timelinePage({ from: page.next, limit: 1000, all: true });
    }
    const near = typeof from === 'number' ? nearestIndex([...indices.values()], from) : undefined;
    const hint = near === undefined ? '' : `; the nearest checkpoint is at index ${near}`;
    if (there && typeof from === 'number') {
      // The same refusal the workflow gives a session that still runs.
      const message = `index ${from} of session ${this.sessionId} is ${describeEntry(there, (id) => indices.get(id))}, not a checkpoint${hint}`;
      const issue = {
        code: 'custom' as const,
        path: [],
        message,
        input: from,
        params: { nearest: near ?? null, kind: there.kind },
      };
      throw new InvalidInputError(message, this.sessionId, [issue]);
    }
    const what = typeof from === 'number' ? `at index ${from}` : from;
    throw new SnapshotNotFoundError(`session ${this.sessionId} has no checkpoint ${what}${hint}`, this.sessionId, '');
  }

  /** The spec the session was started with, from its workflow's history (a continued run carries it too). */
  async startSpec(): Promise<StartSessionInput> {
    const history = await this.call(() => this.workflow.fetchHistory());
    const payload = history.events?.[0]?.workflowExecutionStartedEventAttributes?.input?.payloads?.[0];
    // Through the client's own converter: with payload encryption on, the start input is sealed like every payload.
    const converter = this.workflow.client.options.loadedDataConverter;
    const input = payload ? await decodeFromPayloadsAtIndex<SessionWorkflowInput>(converter, 0, [payload]) : undefined;
    if (!input?.spec) throw new SessionNotFoundError(`session ${this.sessionId} has no start spec`, this.sessionId);
    return input.spec;
  }

  /** A fork of the current state: `branch({ count: 3 })` makes three sessions like this one. */
  branch(input: BranchInput = {}): Promise<ForkResult> {
    return this.control('branch', input);
  }

  /**
   * Conversation runtime: appends messages (checked against the tool-call pair rules where they are stored), with a
   * checkpoint after them when `checkpoint` is true (trigger `turn`).
   */
  append(input: AppendInput): Promise<AppendResult> {
    return this.control('append', input);
  }

  /** Conversation runtime: a fork from just before the last assistant turn, to answer it again. */
  regenerate(input: RegenerateInput = {}): Promise<ForkResult> {
    return this.control('regenerate', input);
  }

  /** Replaces the live session's policies and/or retention. */
  configure(input: ConfigureInput): Promise<SessionStatus> {
    return this.control('configure', input);
  }

  /** Says the session is in use: its idle-pause timer starts again. Fire-and-forget with `{ wait: false }`. */
  async touch(options: { wait?: boolean } = {}): Promise<void> {
    if (options.wait === false) return this.signal('touch');
    await this.control('touch', {});
  }

  /** Captures the running session; returns the new checkpoint's reference. */
  checkpoint(input: CheckpointInput = {}): Promise<CheckpointRef> {
    return this.control('checkpoint', input);
  }

  /** Checkpoints, then stops the runtime to free its compute; returns the checkpoint. */
  pause(input: PauseInput = {}): Promise<CheckpointRef> {
    return this.control('pause', input);
  }

  /** Restores the newest (or the given) checkpoint that verifies, possibly on another machine. */
  resume(input: ResumeInput = {}): Promise<ResumeResult> {
    return this.control('resume', input);
  }

  /** Ends the session, with a final checkpoint of a running session unless `checkpoint: false`. */
  stop(input: StopInput = {}): Promise<StopResult> {
    return this.control('stop', input);
  }

  /**
   * Reads the session's checkpoints (or one) back from the store on a worker — each manifest against what the
   * session recorded, every chunk authenticated — and returns what each one is: `ok`, `missing`, `corrupt`,
   * `tampered`, `incompatible` or `key-unavailable`. Changes nothing; the results also go to the timeline. A session
   * that has ended is verified by a worker from the store (every checkpoint it keeps there; nothing goes to a timeline).
   */
  async verify(input: VerifyInput = {}): Promise<VerificationResult[]> {
    try {
      return await this.control('verify', input);
    } catch (err) {
      // An ended session has no workflow to ask: a worker reads what it left in the store (no key is needed here).
      const ended = err instanceof SessionClosedError || err instanceof SessionFailedError;
      if (!ended || !this.context.verifyEnded) throw err;
      const { checkpointId } = parseInput(VerifyInput, input, this.sessionId);
      return this.call(() => this.context.verifyEnded!(this.sessionId, checkpointId));
    }
  }

  /**
   * The one path of every control: its input checked with the registry's schema, an idempotency key added where the
   * control takes one, sent as its update, and sent again while the session hands over to its next run (Busy).
   */
  private async control<N extends ControlName>(name: N, input: unknown): Promise<ControlResult<N>> {
    const spec = CONTROLS[name] as ControlSpec;
    const parsed = parseInput(spec.input, input, this.sessionId);
    const args = takesKey(spec) ? withKey(parsed as { idempotencyKey?: string }) : parsed;
    return this.update(() =>
      this.workflow.executeUpdate(spec.update, {
        args: [args],
        updateId: updateIdFor(name, args as { idempotencyKey?: string }),
      }),
    ) as Promise<ControlResult<N>>;
  }

  /**
   * Fire-and-forget controls (those with a signal twin): no result; a control that cannot run shows in
   * `status().lastRejectedSignal` and the timeline.
   */
  async signal(control: SignalledControl, input: Record<string, unknown> = {}): Promise<void> {
    const spec = CONTROLS[control] as ControlSpec;
    try {
      await this.workflow.signal(spec.signal!, parseInput(spec.input, input, this.sessionId));
    } catch (err) {
      // Signalling a closed workflow reports "not found"; the session exists, it has ended.
      if (err instanceof WorkflowNotFoundError) throw await this.ended(err);
      throw toSessionError(err, this.sessionId);
    }
  }

  /**
   * Why a control found no open workflow: the session failed (SessionFailedError with its failure), ended otherwise
   * (SessionClosedError), or does not exist. The server says "not found" for a run that closed while an update waited
   * on it, so the answer comes from the workflow's description, never from the error alone.
   */
  private async ended(cause: unknown): Promise<SessionError> {
    let status: string | undefined;
    let closedAt: Date | undefined;
    try {
      const description = await this.workflow.describe();
      status = description.status.name;
      closedAt = description.closeTime;
    } catch (err) {
      const typed = toSessionError(err, this.sessionId);
      return typed instanceof SessionError ? typed : this.closed(cause);
    }
    if (status !== 'FAILED') return this.closed(cause);
    const failure = await this.workflow.result().then(
      () => undefined,
      (err: unknown) => failedRunOf(err, (closedAt ?? new Date()).toISOString()),
    );
    const why = failure ? `${failure.type}: ${failure.message}` : 'its workflow failed';
    return new SessionFailedError(
      `session ${this.sessionId} has failed (${why}): no control can change it`,
      this.sessionId,
      failure,
      { cause },
    );
  }

  private closed(cause: unknown): SessionClosedError {
    return new SessionClosedError(`session ${this.sessionId} has ended: no control can change it`, this.sessionId, {
      cause,
    });
  }

  /**
   * Snapshot I/O in progress (capture, restore), read from the heartbeats of the session's pending activities:
   * bytes done (and the total, when known), the attempt, and the failure a retry is recovering from.
   */
  async progress(): Promise<IoProgress[]> {
    const description = await this.call(() => this.workflow.describe());
    const converter = this.workflow.client.options.loadedDataConverter;
    const pending = (description.raw.pendingActivities ?? []).filter((a) => a.activityType?.name !== 'watchRuntime');
    return Promise.all(
      pending.map(async (a): Promise<IoProgress> => {
        // Heartbeat details are sealed like every payload when encryption is on: decoded through the client's codec.
        const payloads = a.heartbeatDetails?.payloads;
        const details = payloads?.length
          ? await decodeFromPayloadsAtIndex<Partial<IoProgress>>(converter, 0, payloads)
          : {};
        return {
          activity: a.activityType?.name ?? '',
          phase: details.phase,
          bytesDone: details.bytesDone ?? 0,
          bytesTotal: details.bytesTotal,
          attempt: a.attempt ?? 1,
          lastFailure: a.lastFailure?.message ?? undefined,
        };
      }),
    );
  }

  /**
   * The session as its workflow holds it. A query needs a worker: when none answers within `statusTimeoutMs`, this
   * throws WorkerUnavailableError with what Temporal knows (the execution's status and the session's search
   * attributes) and when a worker last polled its task queue.
   */
  async status(): Promise<SessionStatus> {
    const bound = this.context.statusTimeoutMs ?? DEFAULT_STATUS_TIMEOUT_MS;
    const abort = new AbortController();
    const { connection } = this.workflow.client;
    const query = connection
      .withAbortSignal(abort.signal, () => this.workflow.query(statusQuery))
      .then(
        (status) => ({ status }),
        (err: unknown) => ({ err }),
      );
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<'late'>((resolve) => (timer = setTimeout(() => resolve('late'), bound)));
    const first = await Promise.race([query, late]).finally(() => clearTimeout(timer));
    if (first === 'late') abort.abort();
    else if ('status' in first) return first.status;
    // The server may give up on a query no worker took before the bound (a gRPC error, not the session's): then it
    // is unanswered too. Temporal itself being unreachable shows in the describe that follows.
    else if (!(first.err instanceof ServiceError)) throw toSessionError(first.err, this.sessionId);
    throw await this.unanswered(bound);
  }

  /** Why no worker answered, and what Temporal itself knows of the session. */
  private async unanswered(bound: number): Promise<SessionError> {
    const description = await this.call(() => this.workflow.describe());
    const attributes = description.typedSearchAttributes;
    const at = attributes.get(lastCheckpointAtKey);
    const taskQueue = description.taskQueue;
    const lastPollAt = await this.lastPoll(taskQueue);
    const lastKnown: LastKnownSession = {
      workflowStatus: description.status.name,
      phase: attributes.get(sessionStateKey) ?? null,
      runtimeKind: attributes.get(sessionRuntimeKey) ?? null,
      host: attributes.get(sessionHostKey) ?? null,
      checkpointCount: attributes.get(checkpointCountKey) ?? null,
      headCheckpointId: attributes.get(headCheckpointKey) ?? null,
      lastCheckpointAt: at ? at.toISOString() : null,
      failureCode: attributes.get(failureCodeKey) ?? null,
      taskQueue,
      lastPollAt,
    };
    const polled = lastPollAt ? `its last poll was at ${lastPollAt}` : 'no worker polls it';
    const known = [
      `workflow ${lastKnown.workflowStatus}`,
      `phase ${lastKnown.phase ?? 'unknown'}`,
      ...(lastKnown.host ? [`host ${lastKnown.host}`] : []),
      `${lastKnown.checkpointCount ?? 0} checkpoint(s)`,
      ...(lastKnown.headCheckpointId ? [`head ${lastKnown.headCheckpointId}`] : []),
      ...(lastKnown.failureCode ? [`failure ${lastKnown.failureCode}`] : []),
    ].join(', ');
    return new WorkerUnavailableError(
      `no worker is serving session ${this.sessionId}: none answered within ${bound} ms on task queue ${taskQueue} ` +
        `(${polled}); last known from Temporal: ${known}`,
      this.sessionId,
      lastKnown,
    );
  }

  /** When a worker last polled the task queue for workflow tasks, as the server remembers it (null: none it knows). */
  private async lastPoll(taskQueue: string): Promise<string | null> {
    const { client } = this.workflow;
    const response = await this.call(() =>
      client.workflowService.describeTaskQueue({
        namespace: client.options.namespace,
        taskQueue: { name: taskQueue },
        taskQueueType: temporal.api.enums.v1.TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
      }),
    );
    const times = (response.pollers ?? []).flatMap((p) =>
      p.lastAccessTime ? [requiredTsToDate(p.lastAccessTime, 'lastAccessTime').getTime()] : [],
    );
    return times.length ? new Date(Math.max(...times)).toISOString() : null;
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
        if (isClosedWorkflowError(err) || err instanceof WorkflowNotFoundError) throw await this.ended(err);
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

/** The id an import gives its session when none is asked for: the exported one's, marked, and made unique. */
function importedId(source: string): string {
  return `${source.slice(0, 100)}-imported-${randomUUID().slice(0, 8)}`;
}

/** How long `status()` waits for a worker to answer before it says none does. */
const DEFAULT_STATUS_TIMEOUT_MS = 15_000;

/** How often a control refused as Busy is sent again (about half a minute in all). */
const BUSY_ATTEMPTS = 80;

/** A workflow id in use is the session id in use: session ids are never reused. */
function alreadyExists(err: unknown, sessionId: string): unknown {
  return err instanceof WorkflowExecutionAlreadyStartedError
    ? new SessionAlreadyExistsError(`session ${sessionId} already exists`, sessionId, { cause: err })
    : err;
}

/** Whether the control's input has an idempotency key field. */
function takesKey(spec: ControlSpec): boolean {
  return spec.input instanceof z.ZodObject && 'idempotencyKey' in spec.input.shape;
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

/** The failure a failed run ended with: the whole failure its details carry, else its type and message. */
function failedRunOf(err: unknown, at: string): SessionFailure | undefined {
  for (let cause: unknown = err; isError(cause); cause = cause.cause) {
    if (cause instanceof ApplicationFailure && cause.type) {
      return failureOf(cause.details?.[0]) ?? { type: cause.type, message: cause.message, at };
    }
  }
  return undefined;
}

function isClosedWorkflowError(err: unknown): boolean {
  return isError(err) && /workflow execution already completed/i.test(err.message);
}
