import * as fsp from 'node:fs/promises';
import * as path from 'node:path';
import { isErrnoError } from '../../errors';
import { fenceRecord, readInstanceRecord, type FenceOutcome, type FoundRecord } from './instance-records';
import { groupsWorkingUnder, killGroup, waitUntilGroupGone } from './process-table';
import {
  anyExists,
  FAILED_SUFFIX,
  isSafeId,
  removeIfEmpty,
  removeTree,
  removeWorkspace,
  treeBytes,
} from './workspace-dir';

/** How long fencing waits for a killed group to be gone before it reports the group as surviving. */
const FENCE_WAIT_MS = 10_000;

/** What {@link WorkspaceRuntime.recoverHost} did. */
export interface HostRecovery {
  /** Process groups a previous incarnation left running (or frozen) that were killed. */
  killed: number;
  /** Instance directories no live instance owned, removed. */
  removedDirs: number;
  /** The size of the regular files removed with them and of their logs. */
  bytes: number;
  /** Directories of failed commands kept, their retention not over yet. */
  keptFailed: number;
}

/** Marks an instance directory as that of a failed command, kept until `keptUntil` (ISO-8601). */
export async function markFailed(dir: string, marker: { keptUntil: string; exit?: unknown }): Promise<void> {
  await fsp.writeFile(`${dir}${FAILED_SUFFIX}`, `${JSON.stringify(marker)}\n`, { mode: 0o600 });
}

/** When the retention of a failed command's directory ends (ms since the epoch); 0 when the marker is unreadable. */
async function keptUntilOf(marker: string): Promise<number> {
  try {
    const { keptUntil } = JSON.parse(await fsp.readFile(marker, 'utf8')) as { keptUntil?: unknown };
    const at = typeof keptUntil === 'string' ? Date.parse(keptUntil) : NaN;
    return Number.isFinite(at) ? at : 0;
  } catch {
    return 0;
  }
}

/**
 * What earlier attempts and earlier incarnations of the worker left under a root and its state directory: process
 * groups still running, instance records, and directories and logs that no live instance owns. The runtime says
 * which directories it owns (`owned`); everything else of the layout it makes is fair game.
 */
export class Leftovers {
  constructor(
    private readonly rootDir: string,
    private readonly stateDir: string,
    private readonly log: (message: string) => void,
  ) {}

  /** Discards what an earlier attempt with this id left: its processes, if a record names them, its directory, log. */
  async discard(instanceId: string, dir: string): Promise<void> {
    const found = await readInstanceRecord(this.stateDir, instanceId);
    if (found) await this.fence(found);
    if (!(await anyExists(dir, `${dir}.log`))) return;
    this.log(`workspace runtime: discarding what an earlier attempt of instance ${instanceId} left in ${dir}`);
    await removeWorkspace(dir, `${dir}.log`);
  }

  /** `dispose` of an id not live here: what is on disk under it, in whichever session. */
  async discardEverywhere(instanceId: string): Promise<void> {
    const found = await readInstanceRecord(this.stateDir, instanceId);
    if (found) await this.fence(found);
    for (const sessionDir of await this.sessionDirs()) {
      const dir = path.join(sessionDir, instanceId);
      if (!(await anyExists(dir, `${dir}.log`))) continue;
      await removeWorkspace(dir, `${dir}.log`);
      await removeIfEmpty(sessionDir);
    }
  }

  /**
   * Kills what a record of another incarnation names, if still there, and drops the record, unless the group
   * outlived SIGKILL: then it stays for the next recovery. A record that cannot be read names nothing to act on.
   */
  async fence(found: FoundRecord): Promise<FenceOutcome | undefined> {
    if ('problem' in found) {
      this.log(`workspace runtime: removing unreadable instance record ${found.file} (${found.problem})`);
      await fsp.rm(found.file, { force: true });
      return undefined;
    }
    const { record } = found;
    const outcome = await fenceRecord(record, FENCE_WAIT_MS);
    const group = `process group ${record.pgid} of instance ${record.instanceId} (session ${record.sessionId})`;
    if (outcome === 'survived') {
      this.log(`workspace runtime: ${group} is still there ${FENCE_WAIT_MS} ms after SIGKILL; its record stays`);
      return outcome;
    }
    if (outcome === 'killed') this.log(`workspace runtime: killed ${group}, left running by an earlier worker`);
    if (outcome === 'unverifiable') {
      this.log(`workspace runtime: cannot tell whether ${group} still runs without /proc; left alone`);
    }
    await fsp.rm(found.file, { force: true });
    return outcome;
  }

  /**
   * Kills the process groups working in an instance directory that no live instance owns: those a worker started and
   * died before it could record (between the spawn and the record's rename). They are found by their working
   * directory, which the command was started in.
   */
  async fenceUnrecorded(owned: ReadonlySet<string>): Promise<number> {
    let killed = 0;
    for (const { pgid, cwd } of await groupsWorkingUnder(this.rootDir)) {
      const [session, instance] = path.relative(this.rootDir, cwd).split(path.sep);
      if (!session || !instance || !isSafeId(instance)) continue;
      if (owned.has(path.join(this.rootDir, session, instance))) continue;
      killGroup(pgid);
      const gone = await waitUntilGroupGone(pgid, FENCE_WAIT_MS);
      this.log(
        `workspace runtime: ${gone ? 'killed' : 'could not kill'} process group ${pgid} working in ${cwd}, ` +
          'started by an earlier worker that died before it recorded it',
      );
      if (gone) killed++;
    }
    return killed;
  }

  /**
   * Removes every instance directory and log under the root that no instance of this runtime owns (live, or being
   * created), the temp files of clock readings, and session directories left empty. Only what has the layout the
   * runtime makes is touched: `<session>/<instance>` directories and `<session>/<instance>.log` files. What a failed
   * command left (marked `<session>/<instance>.failed`) stays until its retention ends, then goes with its marker.
   */
  async removeUnowned(
    owned: ReadonlySet<string>,
    now = Date.now(),
  ): Promise<{ removedDirs: number; bytes: number; keptFailed: number }> {
    let removedDirs = 0;
    let bytes = 0;
    let keptFailed = 0;
    for (const sessionDir of await this.sessionDirs()) {
      const kept = new Set<string>();
      for (const entry of await fsp.readdir(sessionDir, { withFileTypes: true })) {
        if (!entry.isFile() || !entry.name.endsWith(FAILED_SUFFIX)) continue;
        const marker = path.join(sessionDir, entry.name);
        const instanceDir = marker.slice(0, -FAILED_SUFFIX.length);
        if (owned.has(instanceDir)) continue;
        if ((await keptUntilOf(marker)) > now) {
          kept.add(instanceDir);
          keptFailed++;
        } else {
          this.log(`workspace runtime: the retention of failed ${instanceDir} is over: removing it`);
          await fsp.rm(marker, { force: true });
        }
      }
      for (const entry of await fsp.readdir(sessionDir, { withFileTypes: true })) {
        const file = path.join(sessionDir, entry.name);
        // A capture's clock reading, left by a worker that died while it took one.
        if (entry.isFile() && entry.name.startsWith('.clock-')) await fsp.rm(file, { force: true });
        const isLog = entry.isFile() && entry.name.endsWith('.log');
        const instanceDir = isLog ? file.slice(0, -'.log'.length) : file;
        if (!(isLog || entry.isDirectory()) || !isSafeId(path.basename(instanceDir)) || owned.has(instanceDir))
          continue;
        if (kept.has(instanceDir)) continue;
        if (isLog) {
          bytes += (await fsp.lstat(file)).size;
          await fsp.rm(file, { force: true });
        } else {
          bytes += await treeBytes(file);
          await removeTree(file);
          removedDirs++;
        }
      }
      await removeIfEmpty(sessionDir);
    }
    return { removedDirs, bytes, keptFailed };
  }

  /** The session directories under the root (what a start would have made: a safe name, a real directory). */
  private async sessionDirs(): Promise<string[]> {
    const entries = await fsp.readdir(this.rootDir, { withFileTypes: true }).catch((error: unknown) => {
      if (isErrnoError(error, 'ENOENT')) return [];
      throw error;
    });
    return entries
      .filter((entry) => entry.isDirectory() && isSafeId(entry.name))
      .map((entry) => path.join(this.rootDir, entry.name));
  }
}
