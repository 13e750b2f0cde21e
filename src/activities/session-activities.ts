import type { RestoreInput, StartRuntimeInput } from './activity-inputs';
import { createContext, type ActivityDeps } from './activity-context';
import { conversationActivities } from './conversation-activities';
import { hostActivities } from './host-activities';
import { runtimeActivities } from './runtime-activities';
import { storeActivities } from './store-activities';

export { DEFAULT_MAX_SESSIONS, type ActivityDeps } from './activity-context';

/**
 * Builds the activities with their dependencies, one group per concern: the runtime instance (runtime-activities),
 * the snapshot store (store-activities), the worker host (host-activities) and conversations
 * (conversation-activities). Activities do all the I/O of a session: they capture a runtime's state into the snapshot
 * store, restore it, and start or stop the runtime. Permanent failures are raised as non-retryable
 * ApplicationFailures with a type from ERROR_CODES; anything else is thrown as is and retried by the workflow's retry
 * policy.
 */
export function createActivities(deps: ActivityDeps) {
  const ctx = createContext(deps);
  const runtime = runtimeActivities(ctx);
  return {
    ...storeActivities(ctx),
    ...hostActivities(ctx),
    ...runtime,
    ...conversationActivities(ctx),
    // A drain must also reach the sessions whose instance is still being made here when it begins.
    startRuntime: (input: StartRuntimeInput) => ctx.host.making(() => runtime.startRuntime(input)),
    restoreCheckpoint: (input: RestoreInput) => ctx.host.making(() => runtime.restoreCheckpoint(input)),
  };
}

export type SessionActivities = ReturnType<typeof createActivities>;
