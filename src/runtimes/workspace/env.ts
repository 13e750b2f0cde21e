import { randomBytes } from 'node:crypto';
import { envAllowProblem, isWorkerVariable } from '../../config';
import { RuntimeFailedError } from '../session-runtime';
import type { UserIdentity } from './user';

/**
 * The worker's variables a workspace command inherits by default, each for a reason: `PATH` finds programs as the
 * worker does; `HOME`, `USER`, `LOGNAME` and `SHELL` say who the command runs as (taken from the workspace user's
 * own entry when one is configured); `LANG`, `LC_*` and `TZ` keep text encoding, formats and local time the host's;
 * `TERM` lets tools format their output; `TMPDIR` is where the host wants temporary files. Everything else stays
 * out: proxies (`HTTP_PROXY` may carry a password), agent sockets (`SSH_AUTH_SOCK` signs with the worker's keys),
 * cloud credentials, `LD_PRELOAD` and `NODE_OPTIONS` (they change what runs), and always `DS_*` and `TEMPORAL_*`.
 */
export const DEFAULT_WORKSPACE_ENV_ALLOW: readonly string[] = [
  'PATH',
  'HOME',
  'USER',
  'LOGNAME',
  'SHELL',
  'LANG',
  'LC_*',
  'TZ',
  'TERM',
  'TMPDIR',
];

/** Who the command is: variables that describe the worker's user, not the workspace user's. */
const IDENTITY_VARIABLES = ['HOME', 'USER', 'LOGNAME', 'SHELL'] as const;

/** Throws RuntimeFailedError unless every entry of `allow` may be an allow-list entry (see `envAllowProblem`). */
export function checkEnvAllow(allow: readonly string[]): void {
  for (const pattern of allow) {
    const problem = envAllowProblem(pattern);
    if (problem) throw new RuntimeFailedError(`workspace environment allow-list: ${problem}`);
  }
}

/**
 * Throws RuntimeFailedError if the spec's `env` sets a worker variable: it would pose as worker configuration to
 * whatever the command runs, or hide from the operator which settings a session had.
 */
export function checkSpecEnv(env: Readonly<Record<string, string>> | undefined): void {
  const refused = Object.keys(env ?? {}).filter(isWorkerVariable);
  if (refused.length > 0) {
    throw new RuntimeFailedError(
      `spec.env may not set ${refused.join(', ')}: DS_* and TEMPORAL_* variables are the worker's own`,
    );
  }
}

/**
 * The environment of a workspace command: the variables of `parent` that `allow` names, with the identity variables
 * of `user` in place of the worker's when it runs as another user, then `specEnv` on top. No worker variable
 * passes, whatever `allow` or `specEnv` say (both are checked before; this is the last fence).
 */
export function workspaceEnvironment(
  parent: NodeJS.ProcessEnv,
  allow: readonly string[],
  specEnv: Readonly<Record<string, string>> | undefined,
  user: UserIdentity | undefined,
  identity: Readonly<Record<string, string>> = {},
): Record<string, string> {
  const allowed = (name: string): boolean =>
    allow.some((pattern) => (pattern.endsWith('*') ? name.startsWith(pattern.slice(0, -1)) : name === pattern));
  const env: Record<string, string> = {};
  for (const [name, value] of Object.entries(parent)) {
    if (value !== undefined && allowed(name)) env[name] = value;
  }
  if (user) {
    const own = { HOME: user.home, USER: user.name, LOGNAME: user.name, SHELL: user.shell };
    for (const name of IDENTITY_VARIABLES) {
      delete env[name];
      const value = own[name];
      if (value !== undefined && allowed(name)) env[name] = value;
    }
  }
  Object.assign(env, specEnv);
  for (const name of Object.keys(env)) if (isWorkerVariable(name)) delete env[name];
  // The instance's own identity comes last: the only DS_* variables a command sees (instanceIdentity).
  return Object.assign(env, identity);
}

/**
 * The variables that tell a workspace command who it is: `DS_SESSION_ID` (and `DS_TENANT` outside the default
 * tenant), `DS_INSTANCE_ID`, `DS_SEED` (32 random bytes in hex, new for every start and restore: a command that seeds
 * its random numbers from it never repeats another instance's), and for the first instance of a fork or branch
 * `DS_FORKED_FROM_SESSION` and `DS_FORKED_FROM_CHECKPOINT`. docs/design.md §3.1.
 */
export function instanceIdentity(
  sessionKey: string,
  instanceId: string,
  forkedFrom: { sessionId: string; checkpointId: string } | undefined,
): Record<string, string> {
  const at = sessionKey.indexOf('@');
  return {
    DS_SESSION_ID: at < 0 ? sessionKey : sessionKey.slice(0, at),
    ...(at < 0 ? {} : { DS_TENANT: sessionKey.slice(at + 1) }),
    DS_INSTANCE_ID: instanceId,
    DS_SEED: randomBytes(32).toString('hex'),
    ...(forkedFrom
      ? { DS_FORKED_FROM_SESSION: forkedFrom.sessionId, DS_FORKED_FROM_CHECKPOINT: forkedFrom.checkpointId }
      : {}),
  };
}
