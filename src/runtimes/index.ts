import type { RuntimeKind, RuntimeSpec } from '../domain/schemas';
import type { SessionRuntime } from './session-runtime';

export * from './session-runtime';
export * from './workspace-runtime';
export * from './memory-runtime';

/** The runtimes a worker offers, by kind; each is typed with its own spec. */
export type RuntimeRegistry = { [K in RuntimeKind]?: SessionRuntime<Extract<RuntimeSpec, { kind: K }>> };
