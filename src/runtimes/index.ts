import type { RuntimeKind } from '../domain/schemas';
import type { SessionRuntime } from './session-runtime';

export * from './session-runtime';
export * from './workspace';
export * from './memory-runtime';
export * from './conversation';
export { createRuntimes, runtimesOf } from './registry';

/** The runtimes a worker offers, by kind. */
export type RuntimeRegistry = Partial<Record<RuntimeKind, SessionRuntime>>;
