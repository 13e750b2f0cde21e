import type { Config } from '../config';
import { RemoteRuntime } from '../providers/remote-runtime';
import { ConversationRuntime } from './conversation';
import { MemoryRuntime } from './memory-runtime';
import type { RuntimeRegistry } from './index';
import { WorkspaceRuntime } from './workspace';

/**
 * The runtimes a worker offers, built from its configuration: every kind whose configuration is complete (`remote`
 * needs its sandbox hosts; the others need nothing beyond defaults). The worker drives them only through the SessionRuntime interface and its
 * lifecycle hooks (`recoverHost`, `stopAll`, `killAll`, `fenceTarget`), never by class.
 */
export function createRuntimes(
  config: Pick<
    Config,
    | 'workspaceDir'
    | 'stopGraceMs'
    | 'startSettleMs'
    | 'failedRetentionMs'
    | 'workspaceEnvAllow'
    | 'workspaceUser'
    | 'sandboxHosts'
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
    ...(config.sandboxHosts
      ? {
          remote: new RemoteRuntime({
            url: config.sandboxHosts.urls,
            token: config.sandboxHosts.token,
            lostAfterMs: config.sandboxHosts.lostAfterMs,
          }),
        }
      : {}),
  };
}

/** Each runtime of the registry, once. */
export function runtimesOf(registry: RuntimeRegistry) {
  return Object.values(registry).filter((r) => r !== undefined);
}
