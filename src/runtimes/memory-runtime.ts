import { Readable } from 'node:stream';
import type { MemoryRuntimeSpec } from '../domain/schemas';
import type { ExitInfo, RestoreRequest, RuntimeInstanceInfo, SessionRuntime, StartRequest } from './session-runtime';
import { RuntimeFailedError, RuntimeNotFoundError } from './session-runtime';

interface MemoryInstance {
  readonly sessionId: string;
  readonly instanceId: string;
  readonly startedAt: string;
  state: Buffer;
  exit?: ExitInfo;
  readonly exited: Promise<ExitInfo>;
  readonly markExited: (exit: ExitInfo) => void;
}

const VERSION = '1';

/**
 * State held in this worker's memory: a byte buffer per instance, no processes. For tests and demos; the state
 * is lost with the worker unless a checkpoint captured it.
 */
export class MemoryRuntime implements SessionRuntime<MemoryRuntimeSpec> {
  readonly kind = 'memory';
  readonly version = VERSION;

  private readonly instances = new Map<string, MemoryInstance>();

  canRestore(version: string): boolean {
    return version === VERSION;
  }

  start(request: StartRequest<MemoryRuntimeSpec>): Promise<RuntimeInstanceInfo> {
    return settled(() => this.info(this.create(request, Buffer.from(request.spec.initialState ?? '', 'utf8'))));
  }

  async restore(request: RestoreRequest<MemoryRuntimeSpec>): Promise<RuntimeInstanceInfo> {
    try {
      this.assertNew(request.instanceId);
    } catch (error) {
      request.state.destroy(); // it will not be read: release its source
      throw error;
    }
    const chunks: Buffer[] = [];
    // A failing stream rejects here with its own error object, and nothing has been kept.
    for await (const chunk of request.state) chunks.push(Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk as string));
    return this.info(this.create(request, Buffer.concat(chunks)));
  }

  capture(instanceId: string): Promise<Readable> {
    return settled(() => {
      // A copy: later writes must not change a capture in flight.
      const state = Buffer.from(this.get(instanceId).state);
      return Readable.from(state.length > 0 ? [state] : [], { objectMode: false });
    });
  }

  async stop(instanceId: string): Promise<ExitInfo> {
    const instance = this.get(instanceId);
    if (!instance.exit) instance.markExited({ exitCode: 0, signal: null, requested: true });
    return instance.exited;
  }

  async waitForExit(instanceId: string, signal?: AbortSignal): Promise<ExitInfo> {
    const { exited } = this.get(instanceId);
    if (!signal) return exited;
    return new Promise((resolve, reject) => {
      const onAbort = (): void =>
        reject(new DOMException('waiting for the runtime instance was aborted', 'AbortError'));
      if (signal.aborted) return onAbort();
      signal.addEventListener('abort', onAbort, { once: true });
      void exited.then(resolve).finally(() => signal.removeEventListener('abort', onAbort));
    });
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

  /** The instance's current state (a copy). */
  read(instanceId: string): Buffer {
    return Buffer.from(this.get(instanceId).state);
  }

  /** Replaces the state of a running instance, as its program would; strings are stored as UTF-8. */
  write(instanceId: string, data: Buffer | string): void {
    const instance = this.get(instanceId);
    if (instance.exit) throw new RuntimeFailedError(`runtime instance ${instanceId} has stopped`);
    instance.state = Buffer.from(data);
  }

  private get(instanceId: string): MemoryInstance {
    const instance = this.instances.get(instanceId);
    if (!instance) throw new RuntimeNotFoundError(instanceId);
    return instance;
  }

  private assertNew(instanceId: string): void {
    if (this.instances.has(instanceId)) {
      throw new RuntimeFailedError(`runtime instance ${instanceId} already exists on this worker`);
    }
  }

  private create(request: StartRequest<MemoryRuntimeSpec>, state: Buffer): MemoryInstance {
    this.assertNew(request.instanceId);
    let markExited!: (exit: ExitInfo) => void;
    const exited = new Promise<ExitInfo>((resolve) => (markExited = resolve));
    const instance: MemoryInstance = {
      sessionId: request.sessionId,
      instanceId: request.instanceId,
      startedAt: new Date().toISOString(),
      state,
      exited,
      markExited: (exit) => {
        instance.exit = exit;
        markExited(exit);
      },
    };
    this.instances.set(request.instanceId, instance);
    return instance;
  }

  private info(instance: MemoryInstance): RuntimeInstanceInfo {
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

/** The result of `fn` as a promise, a throw becoming a rejection (what an `async` method with no `await` does). */
function settled<T>(fn: () => T): Promise<T> {
  return new Promise((resolve) => resolve(fn()));
}
