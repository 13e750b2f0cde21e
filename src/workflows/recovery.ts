import {
  CancellationScope,
  condition,
  getExternalWorkflowHandle,
  isCancellation,
  log,
  patched,
  workflowInfo,
} from '@temporalio/workflow';
import type { WatchResult } from '../activities';
import { attachRuntimeSignal, hostWorkflowId, type RuntimeInstanceRef } from '../api/messages';
import { ERROR_CODES } from '../domain/error-codes';
import { RuntimeExitDetails, RuntimeReport } from '../domain/records';
import { RUNTIME_PLACEMENT } from '../domain/schemas';
import { exitMessage } from '../domain/session-state';
import { askHost, onHost, onPlacedHost, stopAndDispose, summarized, watcherOn } from './activity-proxies';
import type { ControlQueue } from './control-queue';
import { exitDetailsOf, failureMessage, typeOf } from './failures';
import { issueSummary } from './inputs';
import {
  ASK_HOST_PATCH,
  CONTRACTS_PATCH,
  FAILURE_DETAILS_PATCH,
  HOST_MONITOR_PATCH,
  MONITOR_DECIDES_PATCH,
  RESTART_FROM_SPEC_PATCH,
  retiredPatch,
} from './patches';
import { DEFAULT_MONITOR_HEARTBEAT_TIMEOUT_MS, DEFAULT_MONITOR_HOST_TIMEOUT_MS } from './host-workflow';
import { restoreFailed, restoreWithFallback, resumed, startFromSpec } from './restore';
import { now, type Session } from './session';

/** What a control whose host went silent waits beyond the monitor's own bound for its word. */
const MONITOR_SLACK_MS = 10_000;

/** How the pending operations in the Web UI's details name what recovery queued. */
const RECOVER = 'recovery (runtime lost)';
const EXITED = 'runtime exited';

/**
 * Learns that the session's runtime ended or its host was lost, and brings the session back from its newest
 * checkpoint on another host. What it learns is queued like any control, so it never interleaves with one.
 */
export class Recovery {
  /** The watcher activity under way (sessions from before the host monitor). */
  private watchScope: CancellationScope | null = null;
  /**
   * Instances whose host's monitor reported them lost: their host restarted without them, or went silent, and then it
   * froze them itself before the monitor could give it up (design §6).
   */
  private readonly goneWithHost = new Set<string>();

  constructor(
    private readonly session: Session,
    private readonly queue: ControlQueue,
  ) {}

  /** Learns of exits nobody asked for and of lost hosts, in bounded rounds of a long-polling activity. */
  watch(runtime: RuntimeInstanceRef): void {
    if (retiredPatch(HOST_MONITOR_PATCH)) {
      this.attach(runtime);
      return;
    }
    const { state } = this.session;
    const scope = new CancellationScope();
    this.watchScope = scope;
    const watcher = watcherOn(runtime.hostTaskQueue, state.spec.liveness);
    const round = (): Promise<WatchResult> =>
      scope
        .run(() => summarized(`watch runtime ${runtime.instanceId}`, watcher.watchRuntime, { instance: runtime }))
        .then((r) => (r.exited ? r : round()));
    round().then(
      (result) => {
        if (!result.exited) return;
        const { exitCode, signal, requested } = result.exit;
        // Our own stops cancel the watch first; a stop nobody here asked for is the host shutting down.
        if (requested)
          void this.queue.serial(() => this.onRuntimeLost(runtime, 'the runtime was stopped by its host'), RECOVER);
        else void this.queue.serial(() => this.onRuntimeExited(runtime, exitCode, signal), EXITED);
      },
      (err: unknown) => {
        if (isCancellation(err) || scope.consideredCancelled) return;
        // A host that says it does not know the instance (a restarted worker) has lost it; any other failure only
        // says the watcher lost contact, which a Temporal outage does to a healthy host too.
        const hostSaidLost = typeOf(err) === ERROR_CODES.RuntimeLost;
        void this.queue.serial(async () => {
          if (!hostSaidLost && (await this.stillRunsOnHost(runtime))) {
            log.warn('lost contact with the runtime, but its host still runs it: watching again', {
              instanceId: runtime.instanceId,
              reason: failureMessage(err),
            });
            if (state.runtime?.instanceId === runtime.instanceId && state.phase === 'running') this.watch(runtime);
            return;
          }
          await this.onRuntimeLost(runtime, failureMessage(err));
        }, RECOVER);
      },
    );
  }

  cancelWatch(): void {
    this.watchScope?.cancel();
    this.watchScope = null;
  }

  /** What the host's monitor reports: the instance ended, or its host is lost. Reports of other instances are late. */
  onRuntimeReport(raw: unknown): void {
    const parsed = RuntimeReport.safeParse(raw);
    if (!parsed.success) {
      this.session.rejectSignal('runtimeReport', `invalid report: ${issueSummary(parsed.error)}`);
      return;
    }
    const report = parsed.data;
    const runtime = this.session.state.runtime;
    if (!runtime || runtime.instanceId !== report.instanceId) return;
    if (report.outcome === 'lost') {
      this.goneWithHost.add(report.instanceId);
      void this.queue.serial(() => this.onRuntimeLost(runtime, report.reason), RECOVER);
    } else if (report.stoppedByHost)
      void this.queue.serial(() => this.onRuntimeLost(runtime, 'the runtime was stopped by its host'), RECOVER);
    else void this.queue.serial(() => this.onRuntimeExited(runtime, report.exitCode, report.signal), EXITED);
  }

  /** Asks the host's monitor to watch the instance; it signals `runtimeReport` when the instance ends or its host is lost. */
  private attach(runtime: RuntimeInstanceRef): void {
    const { heartbeatTimeoutMs, hostTimeoutMs } = this.session.state.spec.liveness ?? {};
    getExternalWorkflowHandle(hostWorkflowId(runtime.hostTaskQueue))
      .signal(attachRuntimeSignal, {
        instanceId: runtime.instanceId,
        sessionWorkflowId: workflowInfo().workflowId,
        ...(heartbeatTimeoutMs !== undefined ? { heartbeatTimeoutMs } : {}),
        ...(hostTimeoutMs !== undefined ? { hostTimeoutMs } : {}),
      })
      .catch((err: unknown) => {
        // Every worker starts its host's monitor before it takes work: a host without one is not a host any more.
        void this.queue.serial(
          () => this.onRuntimeLost(runtime, `its host has no monitor to watch it: ${failureMessage(err)}`),
          RECOVER,
        );
      });
  }

  /**
   * Asks the runtime's host, before anything is declared lost, whether the instance still runs there. A host that is
   * gone does not pick the question up within hostTimeoutMs. Before the patch, a watcher that failed meant a lost host.
   */
  private async stillRunsOnHost(runtime: RuntimeInstanceRef): Promise<boolean> {
    const { state } = this.session;
    if (!retiredPatch(ASK_HOST_PATCH) || state.runtime?.instanceId !== runtime.instanceId) return false;
    return (await this.askRunning(runtime)) === 'running';
  }

  private async onRuntimeExited(
    runtime: RuntimeInstanceRef,
    exitCode: number | null,
    signal: string | null,
  ): Promise<void> {
    const { session } = this;
    const { state } = session;
    if (state.runtime?.instanceId !== runtime.instanceId || state.phase !== 'running') return;
    const details = exitCode !== 0 || signal !== null ? await this.exitDetails(runtime) : undefined;
    if (state.runtime?.instanceId !== runtime.instanceId || state.phase !== 'running') return;
    session.record({ kind: 'runtime-exited', at: now(), exitCode, signal });
    state.runtime = null;
    // Set first, so that what apply() publishes names how the command ended.
    if (details)
      state.failure = {
        type: ERROR_CODES.RuntimeFailed,
        message: exitMessage(exitCode, signal),
        at: now(),
        ...details,
      };
    session.apply({ type: 'runtimeExited', exitCode, signal });
  }

  /** How the command ended, asked of its host: last lines of output, where its directory is kept. None if it cannot say. */
  private async exitDetails(runtime: RuntimeInstanceRef): Promise<RuntimeExitDetails | undefined> {
    if (!patched(FAILURE_DETAILS_PATCH)) return undefined;
    try {
      const host = askHost(runtime.hostTaskQueue, this.session.state.spec.liveness);
      const summary = `ask ${runtime.hostTaskQueue} how the command ended`;
      const found = RuntimeExitDetails.safeParse(await summarized(summary, host.describeExit, { instance: runtime }));
      return found.success && found.data ? found.data : undefined;
    } catch {
      return undefined;
    }
  }

  private async onRuntimeLost(runtime: RuntimeInstanceRef, reason: string): Promise<void> {
    const { state } = this.session;
    if (state.runtime?.instanceId !== runtime.instanceId || state.phase !== 'running') return;
    await this.recoverLost(runtime, reason);
  }

  /**
   * Whether a control's failed activity means the runtime is gone: the host said it does not know the instance, or an
   * untyped failure (a timeout) and the host does not answer that it still runs it. A typed failure of the store or
   * the runtime (StoreFull, say) leaves the runtime running where it was.
   */
  async lostBy(runtime: RuntimeInstanceRef, err: unknown): Promise<boolean> {
    const type = typeOf(err);
    if (type === ERROR_CODES.RuntimeLost) return true;
    if (type !== undefined) return false;
    if (!patched(MONITOR_DECIDES_PATCH)) return !(await this.stillRunsOnHost(runtime));
    return this.lostByMonitor(runtime);
  }

  /**
   * A host that did not answer may be cut off but alive, its instance still running: only its monitor, which waits
   * until the host has frozen its instances, may declare it lost. Whichever comes first: the host's answer, or the
   * monitor's word; a silent host the monitor does not give up within its bound keeps the instance.
   */
  private async lostByMonitor(runtime: RuntimeInstanceRef): Promise<boolean> {
    const { state } = this.session;
    const id = runtime.instanceId;
    const monitorSaidGone = () => this.goneWithHost.has(id);
    const asked = this.askRunning(runtime);
    const first = await Promise.race([asked, condition(monitorSaidGone).then(() => 'gone' as const)]);
    if (first !== 'silent') return first === 'gone';
    const { heartbeatTimeoutMs, hostTimeoutMs } = state.spec.liveness ?? {};
    const bound =
      Math.min(heartbeatTimeoutMs ?? Infinity, DEFAULT_MONITOR_HEARTBEAT_TIMEOUT_MS) +
      2 * Math.min(hostTimeoutMs ?? Infinity, DEFAULT_MONITOR_HOST_TIMEOUT_MS) +
      MONITOR_SLACK_MS;
    return condition(monitorSaidGone, bound);
  }

  /** The host's answer to whether it still runs the instance: `silent` when it does not answer in hostTimeoutMs. */
  private async askRunning(runtime: RuntimeInstanceRef): Promise<'running' | 'gone' | 'silent'> {
    try {
      const host = askHost(runtime.hostTaskQueue, this.session.state.spec.liveness);
      const summary = `ask ${runtime.hostTaskQueue} whether the runtime still runs`;
      return (await summarized(summary, host.describeInstance, { instance: runtime })).running ? 'running' : 'gone';
    } catch {
      return 'silent';
    }
  }

  /**
   * Brings back a session whose runtime is lost, from its newest checkpoint on whichever worker places it, or, with
   * none, from its spec. Runs in the queue's turn of whoever learnt of the loss (the monitor's report, or a pause
   * whose capture found the host gone); the phase is `running`, `checkpointing` or `pausing`.
   */
  async recoverLost(runtime: RuntimeInstanceRef, reason: string): Promise<void> {
    const { session } = this;
    const { state } = session;
    // An instance on a host of its own outlived its worker: another worker drives the same one, nothing restored.
    if (RUNTIME_PLACEMENT[runtime.kind] === 'anywhere' && (await this.takeOver(runtime, reason))) {
      session.apply({ type: 'runtimeLost' });
      resumed(session);
      return;
    }
    session.record({ kind: 'runtime-lost', at: now(), instanceId: runtime.instanceId, reason });
    state.runtime = null;
    // The start is the session's first state: without a checkpoint, it starts again from its spec.
    const fromSpec = !state.head && patched(RESTART_FROM_SPEC_PATCH);
    // Status must never say `running` without a runtime: the phase moves on with the runtime.
    const recovering = retiredPatch(CONTRACTS_PATCH) && (state.head !== null || fromSpec);
    if (recovering) session.apply({ type: 'runtimeLost' });
    // A host that is only slow may still run the old instance: stop it before starting another copy. A host
    // that is really gone fails this fast (hostTimeoutMs). One its monitor gave up has frozen it already.
    const frozenByHost = this.goneWithHost.has(runtime.instanceId) && patched(MONITOR_DECIDES_PATCH);
    // One on a host of its own was just found gone or ended (and disposed) by the takeover, under a new generation.
    const tookOverFailed = RUNTIME_PLACEMENT[runtime.kind] === 'anywhere';
    if (!frozenByHost && !tookOverFailed) {
      try {
        const host = onHost(runtime.hostTaskQueue, state.spec.liveness);
        await stopAndDispose(host, runtime, 'recovery: a slow host may still run it');
      } catch {
        // Gone with its host; if only cut off from Temporal, that host froze the instance itself (design §6).
      }
    }
    this.goneWithHost.delete(runtime.instanceId);
    if (fromSpec) {
      await this.restartFromSpec(reason);
      return;
    }
    if (!state.head) {
      session.fail(ERROR_CODES.RuntimeLost, `the runtime was lost and the session has no checkpoint: ${reason}`);
      return;
    }
    // The host is gone: bring the session back from its newest checkpoint, wherever a worker can run it.
    if (!recovering) session.apply({ type: 'runtimeLost' });
    const outcome = await restoreWithFallback(session, state.head, 'recovery', (r) => this.watch(r));
    if (outcome.ok) resumed(session);
    else restoreFailed(session, outcome, 'recovery');
  }

  /**
   * Has a worker that places the session take over its live instance, with a new generation: the instance's host
   * refuses the worker before from then on, so the two never both drive it. False when the instance is gone with its
   * own host, or has ended: the session is then restored from its newest checkpoint as any lost runtime is.
   */
  async takeOver(runtime: RuntimeInstanceRef, reason: string): Promise<boolean> {
    const { session } = this;
    const { state } = session;
    const fence = session.nextGeneration();
    try {
      const ref = await onPlacedHost(state.spec, `take over ${runtime.instanceId}`, (host) =>
        summarized(`take over runtime ${runtime.instanceId} (generation ${fence})`, host.takeOverRuntime, {
          sessionId: session.id,
          ...session.tenancy,
          instance: runtime,
          fence,
        }),
      );
      state.runtime = ref;
      this.goneWithHost.delete(runtime.instanceId);
      session.record({
        kind: 'taken-over',
        at: now(),
        instanceId: ref.instanceId,
        host: ref.hostTaskQueue,
        generation: fence,
        reason,
      });
      this.watch(ref);
      return true;
    } catch (err) {
      log.warn('the runtime could not be taken over; restoring from the newest checkpoint', {
        instanceId: runtime.instanceId,
        reason: failureMessage(err),
      });
      return false;
    }
  }

  /**
   * Starts the session again as at its start, on whichever worker places it: only the work since the start is lost,
   * as after a checkpoint only the work since it is. A start that fails now fails the session, as a first one does.
   */
  private async restartFromSpec(reason: string): Promise<void> {
    const { session } = this;
    const { state } = session;
    let runtime: RuntimeInstanceRef;
    try {
      runtime = await startFromSpec(session);
    } catch (err) {
      session.fail(
        typeOf(err) ?? ERROR_CODES.RuntimeFailed,
        `the runtime was lost before the first checkpoint, and could not be started again from the spec: ${failureMessage(err)}`,
        exitDetailsOf(err),
      );
      return;
    }
    state.runtime = runtime;
    session.record({ kind: 'restarted-from-spec', at: now(), instanceId: runtime.instanceId, reason });
    this.watch(runtime);
    resumed(session);
  }
}
