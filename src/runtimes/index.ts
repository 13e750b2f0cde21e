import type { RuntimeKind } from '../domain/schemas';
import type { SessionRuntime } from './session-runtime';

export * from './session-runtime';
export * from './workspace-runtime';
export { WorkspaceRootLockedError } from './workspace/state-lock';
export { DEFAULT_WORKSPACE_ENV_ALLOW } from './workspace/env';
export type { WorkspaceUser } from './workspace/user';
export * from './memory-runtime';

/** The runtimes a worker offers, by kind. */
export type RuntimeRegistry = Partial<Record<RuntimeKind, SessionRuntime>>;
