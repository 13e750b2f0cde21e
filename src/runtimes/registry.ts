import type { Config } from '../config';
import { ConversationRuntime } from './conversation';
import { MemoryRuntime } from './memory-runtime';
import type { RuntimeRegistry } from './index';
import { WorkspaceRuntime } from './workspace';

/**
 * The runtimes a worker offers, built from its configuration: every kind whose configuration is complete (all of
 * today's kinds need none beyond defaults). The worker drives them only through the SessionRuntime interface and its
 * lifecycle hooks (`recoverHost`, `stopAll`, `killAll`, `fenceTarget`), never by class.
 */
export function createRuntimes(
  config: Pick<
    Config,
    'workspaceDir' | 'stopGraceMs' | 'startSettleMs' | 'failedRetentionMs' | 'workspaceEnvAllow' | 'workspaceUser'
  >,
): RuntimeRegistry {
  return {
    workspace: new WorkspaceRuntime({
      rootDir: config.workspaceDir,
      defaultStopGraceMs: config.stopGraceMs,
      startSettleMs: config.startSettleMs,
      failedRetentionMs: config.failedRetentionMs,
      envAllow: config.workspaceEnvAllow,
      user: config.workspaceUser,
    }),
    memory: new MemoryRuntime(),
    conversation: new ConversationRuntime(),
  };
}

/** Each runtime of the registry, once. */
export function runtimesOf(registry: RuntimeRegistry) {
  return Object.values(registry).filter((r) => r !== undefined);
}
