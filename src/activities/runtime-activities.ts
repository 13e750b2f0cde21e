/** The activities that drive a session's runtime instance where it lives: start, capture, restore, stop, watch. */
import { setTimeout as delay } from 'node:timers/promises';
import { ApplicationFailure, Context, log } from '@temporalio/activity';
import { type RuntimeInstanceRef, sessionKey } from '../api/messages';
import { ERROR_CODES } from '../domain/error-codes';
import type { RuntimeExitDetails } from '../domain/records';
import { checkpointRefOf, type CheckpointRef } from '../domain/schemas';
import { messageOf } from '../errors';
import { outcomeOf } from '../metrics';
import { type ExitInfo, RuntimeExitedError, RuntimeNotFoundError } from '../runtimes';
import { withFence } from '../runtimes/fence';
import { SnapshotIncompatibleError } from '../snapshots';
import type {
  CapturedCheckpoint,
  CaptureInput,
  InstanceInput,
  RestoreInput,
  StartRuntimeInput,
  TakeOverInput,
  WatchResult,
} from './activity-inputs';
import {
  type ActivityContext,
  checkRecorded,
  storeOf,
  timelineOf,
  records,
  readManifestIfExists,
  MAX_HEARTBEAT_MS,
  heartbeatEvery,
  throttled,
  toFailure,
  toRef,
} from './activity-context';

export function runtimeActivities(ctx: ActivityContext) {
  const { deps, host, metrics, measured, hosted, runtimeFor } = ctx;
  const lastActivityOf = async (input: InstanceInput): Promise<string | null> => {
    try {
      return (await runtimeFor(input.instance.kind).lastActivity?.(input.instance.instanceId)) ?? null;
    } catch (err) {
      throw toFailure(err);
    }
  };
  /** Stops the instance (already gone counts as stopped) and, with `dispose`, frees what it left on this host. */
  const stopInstance = async (input: InstanceInput): Promise<ExitInfo> => {
    const runtime = runtimeFor(input.instance.kind);
    host.stopRequested(input.instance.instanceId);
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
  };
  /**
   * The capture's second step when the control stops the runtime after it (pause, stop, rewind, drain): only once the
   * checkpoint is published. A stop that fails is reported, not thrown: the checkpoint is durable, and the workflow
   * stops the runtime with its own activity (and what that does when the host cannot).
   */
  const stopAfterCapture = async (input: CaptureInput, ref: CheckpointRef): Promise<CapturedCheckpoint> => {
    if (!input.stop) return ref;
    try {
      await stopInstance({ instance: input.instance, dispose: true });
      return { ...ref, stopped: true };
    } catch (err) {
      log.warn('runtime not stopped after its checkpoint; the session stops it', {
        instanceId: input.instance.instanceId,
        error: messageOf(err),
      });
      return { ...ref, stopped: false };
    }
  };
  return fenced({
    /**
     * Takes over a live instance placed `anywhere` whose worker was lost or drains: this worker drives it from now on,
     * with the session's new generation, and the instance's host refuses the worker before. Makes nothing: an instance
     * its host no longer knows is RuntimeLost (the session is then restored from its newest checkpoint).
     */
    async takeOverRuntime(input: TakeOverInput): Promise<RuntimeInstanceRef> {
      const runtime = runtimeFor(input.instance.kind);
      const key = sessionKey(input.sessionId, input.tenant);
      if (!runtime.takeOver) {
        throw ApplicationFailure.nonRetryable(
          `the ${runtime.kind} runtime lives on its worker's host: its instances cannot be taken over`,
          ERROR_CODES.RuntimeLost,
        );
      }
      let info;
      try {
        info = await runtime.takeOver({ instanceId: input.instance.instanceId, sessionId: key });
      } catch (err) {
        if (err instanceof RuntimeNotFoundError) {
          throw ApplicationFailure.nonRetryable(`${err.message}: its host lost it`, ERROR_CODES.RuntimeLost);
        }
        throw toFailure(err);
      }
      if (!info.running) {
        // Ended while no worker drove it: what it left goes, and the session comes back from its newest checkpoint.
        await runtime.dispose(info.instanceId).catch((err: unknown) => {
          log.warn('an ended runtime instance was not disposed', { instanceId: info.instanceId, error: String(err) });
        });
        throw ApplicationFailure.nonRetryable(
          `runtime instance ${info.instanceId} ended while no worker drove it`,
          ERROR_CODES.RuntimeLost,
        );
      }
      return hosted(toRef(info, deps.hostTaskQueue, input.fence), key);
    },

    async startRuntime(input: StartRuntimeInput): Promise<RuntimeInstanceRef> {
      const runtime = runtimeFor(input.spec.kind);
      // A retried start whose first attempt got through must not start a second process: the runtime adopts it (and
      // one asked while the first attempt is still making it is busy); asking first spares the settle window.
      const existing = await runtime.describe(input.instanceId);
      const key = sessionKey(input.sessionId, input.tenant);
      if (existing) return hosted(toRef(existing, deps.hostTaskQueue, input.fence), key);
      const ctx = Context.current();
      // The start waits out the command's settle window: a short heartbeat timeout must not take that for a lost host.
      const beat = setInterval(() => ctx.heartbeat({ phase: 'start' }), heartbeatEvery(ctx));
      try {
        const info = await runtime.start({ sessionId: key, instanceId: input.instanceId, spec: input.spec });
        return hosted(toRef(info, deps.hostTaskQueue, input.fence), key);
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

    async captureCheckpoint(input: CaptureInput): Promise<CapturedCheckpoint> {
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
        if (published) return await stopAfterCapture(input, checkpointRefOf(published));
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
        let ref: CheckpointRef;
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
          ref = checkpointRefOf(manifest);
        } catch (err) {
          metrics.checkpoint({ ...labels, outcome: outcomeOf(err) }, measured('capture', started, err));
          throw toFailure(err);
        }
        return await stopAfterCapture(input, ref);
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
      if (existing) return hosted(toRef(existing, deps.hostTaskQueue, input.fence), key);
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
        const info = await runtime.restore({
          ...input,
          sessionId: key,
          state: stream,
          ...(manifest.forkedFrom ? { forkedFrom: manifest.forkedFrom } : {}),
        });
        log.info('checkpoint restored', { checkpointId: input.checkpointId, instanceId: info.instanceId });
        metrics.restore({ ...labels, outcome: 'ok' }, ctx.info.attempt, measured('restore', started), manifest.size);
        return hosted(toRef(info, deps.hostTaskQueue, input.fence), key);
      } catch (err) {
        metrics.restore({ ...labels, outcome: outcomeOf(err) }, ctx.info.attempt, measured('restore', started, err));
        throw toFailure(err);
      } finally {
        clearInterval(beat);
      }
    },

    async stopRuntime(input: InstanceInput): Promise<ExitInfo> {
      const ctx = Context.current();
      // A long grace period must not look like a dead host: heartbeat while the process winds down.
      const beat = setInterval(() => ctx.heartbeat({ phase: 'stop' }), heartbeatEvery(ctx));
      try {
        return await stopInstance(input);
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
  });
}

/**
 * Every runtime call of these activities carries the session's generation as its fence (withFence): the input's own
 * (a start, restore or takeover) or its instance's.
 */
function fenced<T extends Record<string, (input: never) => Promise<unknown>>>(activities: T): T {
  const fenceOf = (input: unknown): number | undefined => {
    const { fence, instance } = (input ?? {}) as { fence?: number; instance?: { fence?: number } };
    return fence ?? instance?.fence;
  };
  return Object.fromEntries(
    Object.entries(activities).map(([name, activity]) => [
      name,
      (input: never) => withFence(fenceOf(input), () => activity(input)),
    ]),
  ) as T;
}
