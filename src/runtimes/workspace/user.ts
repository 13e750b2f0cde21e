import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { RuntimeFailedError } from '../session-runtime';

/** Who workspace commands run as: a user name looked up on the host, or ids. */
export type WorkspaceUser = string | { uid: number; gid: number };

/** The workspace user's passwd entry, as far as it is known: its identity variables replace the worker's. */
export interface UserIdentity {
  readonly uid: number;
  readonly gid: number;
  readonly name?: string;
  readonly home?: string;
  readonly shell?: string;
}

/**
 * The ids (and, for a name, home and shell) of `user`. Names go through `getent passwd`, so users from LDAP and the
 * like resolve as `id` would. Refused: root, an unknown name, and a worker that cannot switch to the user (only root
 * can run a process as someone else).
 */
export async function resolveWorkspaceUser(user: WorkspaceUser): Promise<UserIdentity> {
  const identity = typeof user === 'string' ? await lookUpUser(user) : user;
  const describe = typeof user === 'string' ? `user ${user}` : `uid ${user.uid}`;
  if (!Number.isSafeInteger(identity.uid) || !Number.isSafeInteger(identity.gid) || identity.uid < 0) {
    throw new RuntimeFailedError(`workspace ${describe}: uid and gid must be non-negative integers`);
  }
  if (identity.uid === 0) throw new RuntimeFailedError(`workspace ${describe} is root: expected an unprivileged user`);
  const workerUid = process.getuid?.();
  if (workerUid !== 0 && workerUid !== identity.uid) {
    throw new RuntimeFailedError(`workspace ${describe}: running commands as another user needs a worker run as root`);
  }
  return identity;
}

async function lookUpUser(name: string): Promise<UserIdentity> {
  let line: string;
  try {
    ({ stdout: line } = await promisify(execFile)('getent', ['passwd', name], { encoding: 'utf8' }));
  } catch (error) {
    // getent exits with 2 when the name is unknown.
    throw new RuntimeFailedError(`workspace user ${name} is not known on this host (getent passwd ${name})`, {
      cause: error,
    });
  }
  // name:password:uid:gid:gecos:home:shell
  const [, , uid, gid, , home, shell] = line.trim().split(':');
  return { uid: Number(uid), gid: Number(gid), name, home: home || undefined, shell: shell || undefined };
}
