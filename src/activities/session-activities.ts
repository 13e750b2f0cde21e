import { setTimeout as delay } from 'node:timers/promises';
import { ApplicationFailure, Context, log } from '@temporalio/activity';
import { ApplicationFailureCategory } from '@temporalio/common';
import { sessionKey, type RuntimeInstanceRef, type TimelineEntry } from '../api/messages';
import { DEFAULT_TENANT, isDefaultTenant } from '../domain/names';
import { ERROR_CODES, isErrorCode } from '../domain/error-codes';
import { DurableSessionsError } from '../errors';
import { outcomeOf, SessionMetrics, storeErrorKind } from '../metrics';
import type { AppendResult } from '../domain/conversation';
import { satisfies, type PlacementRequest } from '../domain/placement';
import type { RuntimeExitDetails } from '../domain/records';
import {
  MAX_APPEND_BYTES,
  type CheckpointRef,
  type RuntimeKind,
  type VerificationResult,
  type VerificationStatus,
} from '../domain/schemas';
import type { ExitInfo, RuntimeInstanceInfo, RuntimeRegistry, SessionRuntime } from '../runtimes';
import type {
  AppendTimelineInput,
  FindCheckpointInput,
  ForkSessionsInput,
  AppendMessagesInput,
  CaptureInput,
  HostLeaseInput,
  HostLeaseResult,
  InstanceInput,
  ReadMessagesInput,
  ReadTimelineInput,
  ReadMessagesResult,
  RestoreInput,
  StartRuntimeInput,
  Tenancy,
  VerifyCheckpointInput,
  VerifyStoredInput,
  WatchResult,
} from './activity-inputs';
import type { HostFence } from './host-fence';
import { HostRefusedError, HostState } from './host-state';
import type { FleetMember } from './placement';
import { ConversationRuntime, RuntimeExitedError, RuntimeNotFoundError } from '../runtimes';
import {
  type ChunkedSnapshotStore,
  type CheckpointManifest,
  SnapshotError,
  SnapshotIncompatibleError,
  type SnapshotMaintenance,
  SnapshotNotFoundError,
  type SnapshotStore,
  SnapshotTamperedError,
  type TimelineLog,
  type TimelinePage,
  type TimelineRecord,
  verificationStatusOf,
} from '../snapshots';

export interface ActivityDeps {
  store: SnapshotStore;
  /** Where session timelines go: the store's own log when omitted (both stores keep one). */
  timeline?: TimelineLog;
  runtimes: RuntimeRegistry;
  /** This worker's own task queue: activities that touch a runtime instance run where it lives. */
  hostTaskQueue: string;
  /** The sessions this host runs, and whether it is draining (a fresh one when not given). */
  host?: HostState;
  /** Freezes this host's session processes when it cannot renew its lease (docs/design.md §6); none without it. */
  fence?: HostFence;
  /** Placement skips a host that runs this many sessions (default 1000): a full host is never taken for a dead one. */
  maxSessions?: number;
  /** Where sessions go: the fleet directory this host reports to. Without it, whichever worker asks takes them. */
  placement?: Pick<FleetMember, 'place'>;
  /** This host's worker labels, which a placement may require. */
  workerLabels?: string[];
  /** How often a long-running watch reports liveness. */
  watchHeartbeatMs?: number;
  /** Where captures, restores and store errors are counted (a no-op meter when omitted). */
  metrics?: SessionMetrics;
  /** How long one watch round lasts before it returns `{ exited: false }` and the workflow watches again. */
  watchRoundMs?: number;
  /** How long the host's lease runs before it returns the exits its sessions asked for (default 10 minutes). */
  leaseRoundMs?: number;
  /**
   * How long the monitor waits between a quiet lease round and the next (default 0: it leases again at once). While
   * it waits, Temporal holds no activity for the host, so a time-skipping server can move time; an exit or the loss
   * of the host is noticed up to this much later.
   */
  leaseRestMs?: number;
}

/**
 * The manifest must be the checkpoint the session recorded when it was taken. History cannot be rewritten by whoever
 * can write the store, so a manifest that disagrees (planted, replaced or downgraded) is refused as tampered.
 */
function checkRecorded(manifest: CheckpointManifest, input: VerifyCheckpointInput): void {
  const expected = input.expected;
  if (
    expected &&
    (manifest.formatVersion !== expected.formatVersion ||
      manifest.digest !== expected.digest ||
      (manifest.encryption ?? 'none') !== (expected.encryption ?? 'none'))
  ) {
    throw new SnapshotTamperedError(
      `checkpoint ${input.checkpointId} is not the one the session recorded (format ${manifest.formatVersion}, ` +
        `${manifest.encryption ?? 'none'}, ${manifest.digest}; recorded format ${expected.formatVersion}, ` +
        `${expected.encryption ?? 'none'}, ${expected.digest})`,
      'tampered',
      { sessionId: input.sessionId, checkpointId: input.checkpointId },
    );
  }
}

/**
 * Builds the activities with their dependencies. Activities do all the I/O of a session: they capture a
 * runtime's state into the snapshot store, restore it, and start or stop the runtime. Permanent failures are
 * raised as non-retryable ApplicationFailures with a type from ERROR_CODES; anything else is thrown as is and
 * retried by the workflow's retry policy.
 */
export function createActivities(deps: ActivityDeps) {
  const host = deps.host ?? new HostState();
  const metrics = deps.metrics ?? new SessionMetrics();
  /** The seconds since `started`, and the error counted against the store when the store raised it. */
  const measured = (operation: 'capture' | 'restore', started: bigint, err?: unknown) => {
    const kind = err === undefined ? undefined : storeErrorKind(err);
    if (kind) metrics.storeError(operation, kind);
    return Number(process.hrtime.bigint() - started) / 1e9;
  };
  const hosted = (ref: RuntimeInstanceRef, sessionId: string): RuntimeInstanceRef => {
    // The host, not an activity per session, learns how the instance ends: its monitor reports it.
    const exited = runtimeFor(ref.kind).waitForExit(ref.instanceId);
    host.hosting(ref.instanceId, sessionId, exited);
    return ref;
  };
  const runtimeFor = (kind: RuntimeKind): SessionRuntime => {
    const runtime = deps.runtimes[kind];
    if (!runtime) {
      throw ApplicationFailure.nonRetryable(`this worker has no "${kind}" runtime`, ERROR_CODES.RuntimeFailed);
    }
    return runtime;
  };

  const lastActivityOf = async (input: InstanceInput): Promise<string | null> => {
    try {
      return (await runtimeFor(input.instance.kind).lastActivity?.(input.instance.instanceId)) ?? null;
    } catch (err) {
      throw toFailure(err);
    }
  };

  const conversationOf = (ref: RuntimeInstanceRef): ConversationRuntime => {
    const runtime = runtimeFor(ref.kind);
    if (!(runtime instanceof ConversationRuntime)) {
      throw ApplicationFailure.nonRetryable(
        `runtime instance ${ref.instanceId} is a ${ref.kind} instance, not a conversation`,
        ERROR_CODES.RuntimeFailed,
      );
    }
    return runtime;
  };

  const activities = {
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
     * Runs on the shared queue and asks the fleet directory for the least-loaded live host that satisfies the
     * session's placement. Without a directory (none reported yet), the worker that picked this up takes the session.
     */
    async placeSession(request: PlacementRequest = {}): Promise<{ hostTaskQueue: string }> {
      const queue = deps.hostTaskQueue;
      if (host.draining) {
        // A worker on its way out asks nothing of the directory (its shutdown would cancel the question): it hands the
        // placement back to another worker, with one line in the log and no warning with a stack for every attempt.
        const refusal = `worker host ${queue} is draining: it takes no new sessions`;
        if (host.firstRefusal()) log.info(`${refusal}: placements go to other workers`);
        throw ApplicationFailure.create({
          type: 'HostRefused',
          message: refusal,
          category: ApplicationFailureCategory.BENIGN,
        });
      }
      const decision = await deps.placement?.place(request, Context.current().cancellationSignal);
      if (decision?.ok) return { hostTaskQueue: decision.hostTaskQueue };
      if (decision?.reason === 'unsatisfiable') {
        throw ApplicationFailure.create({
          type: ERROR_CODES.NoEligibleHost,
          message: decision.message,
          nonRetryable: true,
        });
      }
      if (decision?.reason === 'busy') {
        throw ApplicationFailure.create({
          type: 'HostRefused',
          message: decision.message,
          category: ApplicationFailureCategory.BENIGN,
        });
      }
      const self = { hostTaskQueue: queue, workerId: queue.slice(queue.lastIndexOf('@') + 1) };
      if (!satisfies({ ...self, labels: deps.workerLabels ?? [] }, request.constraints)) {
        throw toFailure(new HostRefusedError(`worker host ${queue} does not satisfy the placement`, queue));
      }
      const limit = deps.maxSessions ?? DEFAULT_MAX_SESSIONS;
      if (host.sessions().length >= limit) {
        throw toFailure(
          new HostRefusedError(`worker host ${queue} runs ${limit} sessions, its limit: placing elsewhere`, queue),
        );
      }
      return { hostTaskQueue: deps.hostTaskQueue };
    },

    async startRuntime(input: StartRuntimeInput): Promise<RuntimeInstanceRef> {
      const runtime = runtimeFor(input.spec.kind);
      // A retried start whose first attempt got through must not start a second process: the runtime adopts it (and
      // one asked while the first attempt is still making it is busy); asking first spares the settle window.
      const existing = await runtime.describe(input.instanceId);
      const key = sessionKey(input.sessionId, input.tenant);
      if (existing) return hosted(toRef(existing, deps.hostTaskQueue), key);
      const ctx = Context.current();
      // The start waits out the command's settle window: a short heartbeat timeout must not take that for a lost host.
      const beat = setInterval(() => ctx.heartbeat({ phase: 'start' }), heartbeatEvery(ctx));
      try {
        return hosted(toRef(await runtime.start({ ...input, sessionId: key }), deps.hostTaskQueue), key);
      } catch (err) {
        if (err instanceof RuntimeExitedError) {
          // How the command ended goes with the failure, to the session's status and the caller of the start.
          throw ApplicationFailure.create({
            type: ERROR_CODES.RuntimeFailed,
            message: err.message,
            nonRetryable: true,
            details: [{ ...err.details, host: deps.hostTaskQueue }],
          });
        }
        throw toFailure(err);
      } finally {
        clearInterval(beat);
      }
    },

    async captureCheckpoint(input: CaptureInput): Promise<CheckpointRef> {
      const runtime = runtimeFor(input.instance.kind);
      const ctx = Context.current();
      // Heartbeats from progress come per batch; a capture that reads nothing for a while (walking a large tree that
      // did not change, say) must not look like a lost worker, nor must a store that answers slowly (retried through
      // 503s or a cut path) before the first byte: the timer beats from the first store call on.
      let bytesDone = 0;
      const beat = setInterval(() => ctx.heartbeat({ phase: 'capture', bytesDone }), heartbeatEvery(ctx));
      try {
        // Idempotent: a retry after the manifest was published returns the checkpoint that exists.
        const store = storeOf(deps, input);
        const published = await readManifestIfExists(store, input.sessionId, input.checkpointId);
        if (published) return toCheckpointRef(published);
        // Timeline entries the session has recorded since its last append: they go first, so they are never later
        // than the checkpoint that follows them.
        if (input.timeline?.length) {
          try {
            await timelineOf(deps, input).appendTimeline(input.sessionId, records(input.timeline));
          } catch (err) {
            throw toFailure(err);
          }
        }
        const started = process.hrtime.bigint();
        const labels = { runtime: runtime.kind, trigger: input.trigger };
        const report = throttled((done) => ctx.heartbeat({ phase: 'capture', bytesDone: done }));
        try {
          // A runtime that can tell what is unchanged since its last stored checkpoint lets the store skip reading it.
          const state = runtime.captureState
            ? await runtime.captureState(input.instance.instanceId)
            : await runtime.capture(input.instance.instanceId);
          // The store releases the state whatever happens (SnapshotStore.write).
          const manifest = await store.write(
            {
              checkpointId: input.checkpointId,
              sessionId: input.sessionId,
              sequence: input.sequence,
              parentId: input.parentId,
              runtime: { kind: runtime.kind, version: runtime.version },
              trigger: input.trigger,
              label: input.label,
            },
            state,
            {
              onProgress: (done) => {
                // Every report counts for the timer's heartbeats, also those the throttle leaves out.
                bytesDone = done;
                report(done);
              },
              signal: ctx.cancellationSignal,
            },
          );
          if ('stored' in state) state.stored(manifest.checkpointId);
          log.info('checkpoint written', { checkpointId: manifest.checkpointId, size: manifest.size });
          metrics.checkpoint({ ...labels, outcome: 'ok' }, measured('capture', started), manifest.size);
          return toCheckpointRef(manifest);
        } catch (err) {
          metrics.checkpoint({ ...labels, outcome: outcomeOf(err) }, measured('capture', started, err));
          throw toFailure(err);
        }
      } finally {
        clearInterval(beat);
      }
    },

    /**
     * Loads a checkpoint, checks its format and runtime versions, and restores it into a fresh instance that
     * starts only once every byte has verified. Nothing of the old instance is touched.
     */
    async restoreCheckpoint(input: RestoreInput): Promise<RuntimeInstanceRef> {
      const runtime = runtimeFor(input.spec.kind);
      // Adopted without opening the store when the first attempt got through (the runtime adopts it too).
      const existing = await runtime.describe(input.instanceId);
      const key = sessionKey(input.sessionId, input.tenant);
      if (existing) return hosted(toRef(existing, deps.hostTaskQueue), key);
      const ctx = Context.current();
      const started = process.hrtime.bigint();
      const labels = { runtime: runtime.kind };
      // Progress beats per batch read; extraction and the start of the command beat on the timer.
      let bytesDone = 0;
      const beat = setInterval(() => ctx.heartbeat({ phase: 'restore', bytesDone }), heartbeatEvery(ctx));
      try {
        const store = storeOf(deps, input);
        const manifest = await store.readManifest(input.sessionId, input.checkpointId);
        checkRecorded(manifest, input);
        if (manifest.runtime.kind !== runtime.kind || !runtime.canRestore(manifest.runtime.version)) {
          throw new SnapshotIncompatibleError(
            `checkpoint ${input.checkpointId} was captured by runtime ${manifest.runtime.kind} ${manifest.runtime.version}; ` +
              `this worker runs ${runtime.kind} ${runtime.version}`,
            input.sessionId,
            input.checkpointId,
          );
        }
        const { stream } = await store.open(input.sessionId, input.checkpointId, {
          onProgress: throttled((done) => {
            bytesDone = done;
            ctx.heartbeat({ phase: 'restore', bytesDone: done, bytesTotal: manifest.size });
          }),
          signal: ctx.cancellationSignal,
        });
        const info = await runtime.restore({ ...input, sessionId: key, state: stream });
        log.info('checkpoint restored', { checkpointId: input.checkpointId, instanceId: info.instanceId });
        metrics.restore({ ...labels, outcome: 'ok' }, ctx.info.attempt, measured('restore', started), manifest.size);
        return hosted(toRef(info, deps.hostTaskQueue), key);
      } catch (err) {
        metrics.restore({ ...labels, outcome: outcomeOf(err) }, ctx.info.attempt, measured('restore', started, err));
        throw toFailure(err);
      } finally {
        clearInterval(beat);
      }
    },

    async stopRuntime(input: InstanceInput): Promise<ExitInfo> {
      const runtime = runtimeFor(input.instance.kind);
      const ctx = Context.current();
      // A long grace period must not look like a dead host: heartbeat while the process winds down.
      const beat = setInterval(() => ctx.heartbeat({ phase: 'stop' }), heartbeatEvery(ctx));
      host.stopRequested(input.instance.instanceId);
      try {
        const exit = await runtime.stop(input.instance.instanceId, { graceMs: input.graceMs }).catch((err: unknown) => {
          // Already gone (e.g. the worker restarted): it is stopped, which is what was asked.
          if (err instanceof RuntimeNotFoundError) return { exitCode: null, signal: null, requested: true };
          throw err;
        });
        if (input.dispose) {
          await runtime.dispose(input.instance.instanceId);
          host.released(input.instance.instanceId);
        }
        return exit;
      } catch (err) {
        throw toFailure(err);
      } finally {
        clearInterval(beat);
      }
    },

    /**
     * How the instance's command ended, when it ended by itself with a failure: its exit, last lines of output, and
     * where its directory and log are kept. Null when the runtime cannot tell (it ran fine, or is not a command).
     */
    async describeExit(input: InstanceInput): Promise<RuntimeExitDetails | null> {
      const details = await runtimeFor(input.instance.kind).failureOf?.(input.instance.instanceId);
      return details ? { ...details, host: deps.hostTaskQueue } : null;
    },

    /** Whether the instance still runs on this host (a question the workflow asks before declaring it lost). */
    async describeInstance(input: InstanceInput): Promise<{ running: boolean }> {
      return { running: (await runtimeFor(input.instance.kind).describe(input.instance.instanceId))?.running ?? false };
    },

    /** Frees what a stopped instance left on its host (its working directory). */
    async disposeRuntime(input: InstanceInput): Promise<void> {
      await runtimeFor(input.instance.kind).dispose(input.instance.instanceId);
      host.released(input.instance.instanceId);
    },

    /**
     * The host's one liveness lease, held by its monitor workflow: it heartbeats for the whole host while it waits for
     * an instance to end, and returns what the monitor must pass on — exits nobody asked for, and `instances` (the
     * ones the monitor watches) that this incarnation of the host does not know, because a worker before it died.
     * Exits the sessions asked for are returned as `released`, in batches, as the round ends.
     */
    async holdHostLease(input: HostLeaseInput): Promise<HostLeaseResult> {
      const ctx = Context.current();
      const heartbeatMs = Math.min(deps.watchHeartbeatMs ?? MAX_HEARTBEAT_MS, heartbeatEvery(ctx));
      const roundEnds = Date.now() + (deps.leaseRoundMs ?? 10 * 60_000);
      const missing = input.instances.filter((id) => !host.knows(id));
      const heartbeatTimeoutMs = ctx.info.heartbeatTimeoutMs ?? MAX_HEARTBEAT_MS;
      const lease = {
        taskToken: ctx.info.taskToken,
        instances: new Set(input.instances),
        heartbeatTimeoutMs,
        hostTimeoutMs: input.hostTimeoutMs ?? heartbeatTimeoutMs,
      };
      deps.fence?.leaseStarted(lease);
      let returned = false;
      try {
        const result = await leaseRounds();
        returned = true;
        return result;
      } finally {
        deps.fence?.leaseEnded(lease, returned);
      }

      async function leaseRounds(): Promise<HostLeaseResult> {
        for (;;) {
          const exits = host.exitsAfter(input.after);
          const news = exits.filter((e) => !e.bySession);
          if (
            missing.length > 0 ||
            news.length > 0 ||
            exits.length >= MAX_RELEASED_PER_ROUND ||
            Date.now() >= roundEnds
          ) {
            const quiet = missing.length === 0 && news.length === 0;
            return {
              cursor: host.cursor,
              exits: news.map(({ instanceId, exit }) => ({ instanceId, exit })),
              released: exits.filter((e) => e.bySession).map((e) => e.instanceId),
              missing,
              ...(quiet && deps.leaseRestMs ? { restMs: deps.leaseRestMs } : {}),
            };
          }
          ctx.heartbeat();
          void deps.fence?.beat(lease);
          const wake = AbortSignal.any([ctx.cancellationSignal, AbortSignal.timeout(heartbeatMs)]);
          await host.nextExit(wake);
          // An exit seldom comes alone (a shutdown, a crashed process group): let its companions join the report.
          if (!wake.aborted) await delay(50);
          if (ctx.cancellationSignal.aborted) throw ctx.cancellationSignal.reason;
        }
      }
    },

    /** Answered at once by a live host: its incarnation (a new one means a worker restarted here). */
    async describeHost(): Promise<{ incarnation: string; sessions: number }> {
      return { incarnation: host.incarnation, sessions: host.sessions().length };
    },

    /**
     * Waits, heartbeating, until the instance exits or the round ends. A worker that dies stops heartbeating,
     * so the workflow learns of a lost host from the heartbeat timeout.
     */
    async watchRuntime(input: InstanceInput): Promise<WatchResult> {
      const runtime = runtimeFor(input.instance.kind);
      const ctx = Context.current();
      const heartbeatMs = Math.min(deps.watchHeartbeatMs ?? MAX_HEARTBEAT_MS, heartbeatEvery(ctx));
      const roundEnds = Date.now() + (deps.watchRoundMs ?? 60 * 60_000);
      const stopWaiting = new AbortController();
      const exited = runtime.waitForExit(input.instance.instanceId, stopWaiting.signal).then(
        (exit) => ({ exited: true as const, exit }),
        (err: unknown) => ({ error: err }),
      );
      try {
        for (;;) {
          ctx.heartbeat();
          const outcome = await Promise.race([exited, delay(heartbeatMs, null, { signal: ctx.cancellationSignal })]);
          if (outcome && 'error' in outcome) {
            if (outcome.error instanceof RuntimeNotFoundError) {
              throw ApplicationFailure.nonRetryable(outcome.error.message, ERROR_CODES.RuntimeLost);
            }
            throw outcome.error;
          }
          if (outcome) return outcome;
          if (Date.now() >= roundEnds) return { exited: false };
        }
      } finally {
        stopWaiting.abort();
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

    /**
     * Appends messages to a conversation instance where it lives, keeping the pair rules (a refusal is InvalidInput);
     * the spans it closes let the workflow judge later cuts without the messages.
     */
    async appendMessages(input: AppendMessagesInput): Promise<AppendResult & { previousRole?: string }> {
      try {
        const runtime = conversationOf(input.instance);
        const result = runtime.append(input.instance.instanceId, input.messages, { at: input.at });
        // The role before the appended messages tells the workflow whether they start a new assistant turn.
        const before =
          result.firstIndex > 0
            ? runtime.messages(input.instance.instanceId, { from: result.firstIndex - 1, limit: 1 })
            : [];
        return { ...result, ...(before[0] ? { previousRole: before[0].role } : {}) };
      } catch (err) {
        throw toFailure(err);
      }
    },

    /** Reads messages back from a conversation instance, at most MAX_APPEND_BYTES of them as JSON (at least one). */
    async readMessages(input: ReadMessagesInput): Promise<ReadMessagesResult> {
      try {
        const runtime = conversationOf(input.instance);
        const limit = Math.min(input.limit ?? MAX_READ_MESSAGES, MAX_READ_MESSAGES);
        const messages = runtime.messages(input.instance.instanceId, { from: input.from, limit });
        let bytes = 0;
        const fit = messages.findIndex((m) => (bytes += Buffer.byteLength(JSON.stringify(m))) > MAX_APPEND_BYTES);
        return {
          messages: fit < 0 ? messages : messages.slice(0, Math.max(1, fit)),
          messageCount: runtime.messageCount(input.instance.instanceId),
        };
      } catch (err) {
        throw toFailure(
          err instanceof RangeError ? ApplicationFailure.nonRetryable(err.message, ERROR_CODES.InvalidInput) : err,
        );
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
            return toCheckpointRef(manifest);
          }),
        );
      } catch (err) {
        throw toFailure(err);
      }
    },

    /**
     * When the instance last showed activity (a file changed or output written in a workspace, a write in memory),
     * as far as its runtime can tell; null when it cannot.
     */
    async lastActivity(input: InstanceInput): Promise<string | null> {
      return lastActivityOf(input);
    },

    /**
     * How long ago the instance last showed activity, by this host's clock; null when its runtime cannot tell. An age,
     * not a timestamp: the workflow places it on its own clock, whatever this host's clock says.
     */
    async idleFor(input: InstanceInput): Promise<number | null> {
      const at = await lastActivityOf(input);
      return at === null ? null : Math.max(0, Date.now() - Date.parse(at));
    },
  };
  // A drain must also reach the sessions whose instance is still being made here when it begins.
  return {
    ...activities,
    startRuntime: (input: StartRuntimeInput) => host.making(() => activities.startRuntime(input)),
    restoreCheckpoint: (input: RestoreInput) => host.making(() => activities.restoreCheckpoint(input)),
  };
}

export type SessionActivities = ReturnType<typeof createActivities>;

/** The store's fork (the chunked store has it; format 1 has no chunks to share). */
type ForkingStore = Pick<ChunkedSnapshotStore, 'fork'>;

/**
 * The store of the input's tenant: the worker's own for `default`, else the one the store keeps for that tenant
 * (its own directory, the tenant bound into every object).
 */
function storeOf(deps: ActivityDeps, { tenant }: Tenancy): SnapshotStore {
  if (isDefaultTenant(tenant)) return deps.store;
  if (!deps.store.forTenant) {
    // A configuration error no retry fixes.
    throw ApplicationFailure.nonRetryable(
      `this worker's snapshot store keeps only the "${DEFAULT_TENANT}" tenant, not "${tenant}"`,
      ERROR_CODES.InvalidInput,
    );
  }
  return deps.store.forTenant(tenant);
}

function timelineOf(deps: ActivityDeps, tenancy: Tenancy): TimelineLog {
  if (deps.timeline && isDefaultTenant(tenancy.tenant)) return deps.timeline;
  const log = storeOf(deps, tenancy) as SnapshotStore & Partial<TimelineLog>;
  if (typeof log.appendTimeline !== 'function' || typeof log.readTimeline !== 'function') {
    // A configuration error no retry fixes: the worker was given a store without a timeline and no timeline.
    throw ApplicationFailure.nonRetryable(
      'this worker has no timeline log: give it a store that keeps one',
      ERROR_CODES.RuntimeFailed,
    );
  }
  return log as TimelineLog;
}

/** Entries as the store's log takes them: each with its index (the workflow gives every entry one). */
function records(entries: readonly TimelineEntry[]): TimelineRecord[] {
  return entries.map((e) => {
    if (e.index === undefined) throw new TypeError(`a timeline entry (${e.kind}) has no index`);
    return e as TimelineRecord;
  });
}

/** Pages through the store's timeline for a checkpoint entry that matches (an index is one page read). */
async function findInTimeline(log: TimelineLog, input: FindCheckpointInput): Promise<CheckpointRef | null> {
  const matches = (e: TimelineEntry): e is Extract<TimelineEntry, { kind: 'checkpoint' }> =>
    e.kind === 'checkpoint' &&
    (input.index !== undefined
      ? e.index === input.index
      : input.checkpointId !== undefined
        ? e.checkpoint.checkpointId === input.checkpointId
        : e.messageIndex === input.messageIndex);
  let from: number | null = input.index ?? 1;
  let found: CheckpointRef | null = null;
  while (from !== null) {
    const page: { entries: unknown[]; next: number | null } = await log.readTimeline(input.sessionId, {
      from,
      limit: input.index !== undefined ? 1 : 1000,
    });
    for (const raw of page.entries) {
      const e = raw as TimelineEntry;
      // The newest match wins for a message index (a rewound conversation passes the same count again).
      if (matches(e)) found = e.checkpoint;
      if (found && input.messageIndex === undefined) return found;
    }
    from = input.index !== undefined ? null : page.next;
  }
  return found;
}

async function readManifestIfExists(store: SnapshotStore, sessionId: string, checkpointId: string) {
  try {
    return await store.readManifest(sessionId, checkpointId);
  } catch (err) {
    if (err instanceof SnapshotNotFoundError) return undefined;
    throw toFailure(err);
  }
}

const MAX_HEARTBEAT_MS = 5_000;

/** Messages one readMessages answers at most. */
const MAX_READ_MESSAGES = 1_000;

/** Exits sessions asked for, at most, before the lease returns them early (the monitor's list is kept short). */
const MAX_RELEASED_PER_ROUND = 200;

export const DEFAULT_MAX_SESSIONS = 1_000;

/**
 * How often a long activity beats: a third of its heartbeat timeout (the session's `liveness.heartbeatTimeoutMs`), at
 * most every 5 s, so no timeout the spec allows can expire between two beats of a live worker.
 */
function heartbeatEvery(ctx: Context): number {
  const timeoutMs = ctx.info.heartbeatTimeoutMs ?? 30_000;
  return Math.max(100, Math.min(MAX_HEARTBEAT_MS, Math.floor(timeoutMs / 3)));
}

/**
 * Progress arrives per chunk (thousands per GiB); a heartbeat is encoded and handed to the SDK's core each time, so
 * report at most every 500 ms. The SDK throttles what it sends to the server on top of this.
 */
function throttled(report: (bytesDone: number) => void, intervalMs = 500): (bytesDone: number) => void {
  let last = 0;
  return (bytesDone) => {
    const now = Date.now();
    if (now - last < intervalMs) return;
    last = now;
    report(bytesDone);
  };
}

/**
 * A typed error says what a retry can do: a retryable one stays retryable under its own code, one with a wire code
 * becomes a non-retryable failure of that type. Anything untyped (an I/O error the store or runtime did not type) is
 * thrown as is, and the retry policy retries it.
 */
function toFailure(err: unknown): unknown {
  if (err instanceof ApplicationFailure || !(err instanceof DurableSessionsError)) return err;
  if (err.retryable) return ApplicationFailure.retryable(err.message, err.code);
  if (isErrorCode(err.code)) {
    return ApplicationFailure.create({ message: err.message, type: err.code, nonRetryable: true, cause: err });
  }
  return err;
}

function toRef(info: RuntimeInstanceInfo, hostTaskQueue: string): RuntimeInstanceRef {
  return {
    instanceId: info.instanceId,
    kind: info.kind,
    hostTaskQueue,
    location: info.location,
    ...(info.output !== undefined ? { output: info.output } : {}),
    pid: info.pid,
    startedAt: info.startedAt,
  };
}

function toCheckpointRef(m: CheckpointManifest): CheckpointRef {
  return {
    checkpointId: m.checkpointId,
    sessionId: m.sessionId,
    sequence: m.sequence,
    parentId: m.parentId,
    trigger: m.trigger,
    label: m.label,
    runtimeKind: m.runtime.kind,
    runtimeVersion: m.runtime.version,
    formatVersion: m.formatVersion,
    size: m.size,
    digest: m.digest,
    createdAt: m.createdAt,
    ...(m.encryption ? { encryption: m.encryption } : {}),
  };
}
