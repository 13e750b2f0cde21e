import type { RuntimeKind } from '../domain/schemas';
import { raceAbort } from './race-abort';
import type { ExitInfo, RuntimeInstanceInfo, StartRequest } from './session-runtime';
import { adoptLive, RuntimeBusyError, RuntimeFailedError, RuntimeNotFoundError } from './session-runtime';

/** What every instance held in this worker's memory has: no process, it ends only when stopped. */
export interface InProcessInstance {
  readonly sessionId: string;
  readonly instanceId: string;
  readonly startedAt: string;
  exit?: ExitInfo;
  readonly exited: Promise<ExitInfo>;
}

/**
 * The instances of a runtime that lives in the worker's memory (memory, conversation), by id, and the lifecycle they
 * share: a start or restore adopts a live id of its session (SessionRuntime), stop ends one once, dispose forgets it.
 */
export class InProcessInstances<I extends InProcessInstance> {
  private readonly instances = new Map<string, I>();
  /** Ids whose restore is reading its state: not live yet, and not to be made twice. */
  private readonly creating = new Set<string>();
  private readonly ends = new WeakMap<I, (exit: ExitInfo) => void>();

  constructor(
    private readonly kind: RuntimeKind,
    private readonly version: string,
  ) {}

  get(instanceId: string): I {
    const instance = this.instances.get(instanceId);
    if (!instance) throw new RuntimeNotFoundError(instanceId);
    return instance;
  }

  /** The instance, which must not have stopped (writes go only to running instances). */
  running(instanceId: string): I {
    const instance = this.get(instanceId);
    if (instance.exit) throw new RuntimeFailedError(`runtime instance ${instanceId} has stopped`);
    return instance;
  }

  /**
   * The live instance a retried start or restore asks for again: its info when it is the same session's (adopted),
   * undefined when the id is new. Refuses an id of another session, and one still being made (busy: retry).
   */
  adopt(request: StartRequest): RuntimeInstanceInfo | undefined {
    const { instanceId } = request;
    if (this.creating.has(instanceId)) {
      throw new RuntimeBusyError(`runtime instance ${instanceId} is still being restored on this worker; try again`);
    }
    return adoptLive(request, this.instances.get(instanceId), (live) => this.info(live));
  }

  /** Runs `make` (a restore reading its state) with the id marked as being made, so that a second one is busy. */
  async making<T>(instanceId: string, make: () => Promise<T>): Promise<T> {
    this.creating.add(instanceId);
    try {
      return await make();
    } finally {
      this.creating.delete(instanceId);
    }
  }

  /** A new running instance with the runtime's own `fields`. */
  add(request: StartRequest, fields: Omit<I, keyof InProcessInstance>): I {
    if (this.instances.has(request.instanceId)) {
      throw new RuntimeFailedError(`runtime instance ${request.instanceId} already exists on this worker`);
    }
    let end!: (exit: ExitInfo) => void;
    const exited = new Promise<ExitInfo>((resolve) => (end = resolve));
    const instance = {
      ...fields,
      sessionId: request.sessionId,
      instanceId: request.instanceId,
      startedAt: new Date().toISOString(),
      exited,
    } as I;
    this.ends.set(instance, (exit) => {
      instance.exit = exit;
      end(exit);
    });
    this.instances.set(request.instanceId, instance);
    return instance;
  }

  async stop(instanceId: string): Promise<ExitInfo> {
    const instance = this.get(instanceId);
    if (!instance.exit) this.ends.get(instance)!({ exitCode: 0, signal: null, requested: true });
    return instance.exited;
  }

  async waitForExit(instanceId: string, signal?: AbortSignal): Promise<ExitInfo> {
    return raceAbort(this.get(instanceId).exited, signal);
  }

  describe(instanceId: string): RuntimeInstanceInfo | undefined {
    const instance = this.instances.get(instanceId);
    return instance && this.info(instance);
  }

  /** Forgets the instance (stopping it first). Unknown ids are a no-op. */
  async dispose(instanceId: string): Promise<void> {
    if (!this.instances.has(instanceId)) return;
    await this.stop(instanceId);
    this.instances.delete(instanceId);
  }

  info(instance: I): RuntimeInstanceInfo {
    return {
      instanceId: instance.instanceId,
      sessionId: instance.sessionId,
      kind: this.kind,
      version: this.version,
      location: 'memory',
      startedAt: instance.startedAt,
      running: !instance.exit,
    };
  }
}
