export { WorkspaceRuntime, type WorkspaceRuntimeOptions } from './runtime';
export type { HostRecovery } from './leftovers';
export { ArchiveRejectedError } from './restore';
export { WorkspaceRootLockedError } from './state-lock';
export { DEFAULT_WORKSPACE_ENV_ALLOW } from './env';
export type { WorkspaceUser } from './user';
