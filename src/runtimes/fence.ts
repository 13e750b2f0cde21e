import { AsyncLocalStorage } from 'node:async_hooks';

/**
 * The fencing token of the runtime call under way: the session's generation, which grows each time another worker
 * takes the session over. An activity runs its runtime calls inside {@link withFence}; a runtime whose instances
 * outlive their worker (a sandbox host's) sends it with every call that changes an instance, so that a worker the
 * session has moved past is refused.
 */
const calls = new AsyncLocalStorage<number>();

export function withFence<T>(fence: number | undefined, fn: () => T): T {
  return fence === undefined ? fn() : calls.run(fence, fn);
}

/** The fence of the call under way, or undefined outside of one. */
export function currentFence(): number | undefined {
  return calls.getStore();
}
