/**
 * What is left on the host: the processes of sessions (by the marker in their command line, or a working directory
 * under the workspace root) and the bytes under the workspace root and in the snapshot store that nothing live owns.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { parseProcessStat } from '../../src/runtimes/workspace/process-table';

export interface SessionProcess {
  pid: number;
  /** R, S, D, T (stopped), … */
  state: string;
  /** The process group: one copy of a session's command, whatever it started. */
  pgrp: number;
  /** Clock ticks after boot: tells a process of a dead worker's time from one started since. */
  startTime: number;
  /** The working directory, without the " (deleted)" of one that was removed. */
  cwd: string | undefined;
  /** The working directory was removed: no live instance works there, even if a new one has the same path. */
  cwdDeleted: boolean;
  cmdline: string;
}

/** Processes whose command line holds `markerPrefix` or whose working directory lies under `workspaceDir`. */
export function sessionProcesses(markerPrefix: string, workspaceDir: string): SessionProcess[] {
  const found: SessionProcess[] = [];
  for (const name of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(name) || Number(name) === process.pid) continue;
    try {
      const cmdline = fs.readFileSync(`/proc/${name}/cmdline`, 'utf8').replace(/\0/g, ' ').trim();
      const link = readLink(`/proc/${name}/cwd`);
      const cwd = link?.replace(/ \(deleted\)$/, '');
      const inRoot = cwd !== undefined && (cwd + '/').startsWith(workspaceDir + '/');
      if (!cmdline.includes(markerPrefix) && !inRoot) continue;
      const stat = parseProcessStat(Number(name), fs.readFileSync(`/proc/${name}/stat`, 'utf8'));
      // Zombies and the dying are gone in all but name: their parent reaps them.
      if (!stat || 'ZX'.includes(stat.state)) continue;
      const { pid, state, pgrp, startTime } = stat;
      found.push({ pid, state, pgrp, startTime, cwd, cwdDeleted: link !== cwd, cmdline });
    } catch {
      // It exited while we looked.
    }
  }
  return found;
}

function readLink(file: string): string | undefined {
  try {
    return fs.readlinkSync(file);
  } catch {
    return undefined;
  }
}

/** Whether `pid` is alive and works in `dir` (the process a status names as a session's runtime). */
export function runsIn(pid: number | undefined, dir: string): boolean {
  return pid !== undefined && readLink(`/proc/${pid}/cwd`) === dir;
}

/** A file no live instance owns, or a temp file in the snapshot store. */
export interface LeakedFile {
  path: string;
  bytes: number;
}

/**
 * Files under the workspace root that no live instance owns — an instance's directory and its `.log` are owned while
 * the instance lives; in `.run`, the lock and the records of live instances — and `.tmp` files in the snapshot store.
 */
export function leakedFiles(
  workspaceDir: string,
  snapshotDir: string,
  live: readonly { instanceId: string; location: string }[],
): LeakedFile[] {
  const owned = new Set<string>([path.join(workspaceDir, '.run', 'lock')]);
  const ownedDirs = live.map((i) => i.location + '/');
  for (const instance of live) {
    owned.add(`${instance.location}.log`);
    owned.add(path.join(workspaceDir, '.run', `${instance.instanceId}.json`));
  }
  const leaked: LeakedFile[] = [];
  for (const file of walk(workspaceDir)) {
    if (owned.has(file.path) || ownedDirs.some((dir) => file.path.startsWith(dir))) continue;
    leaked.push(file);
  }
  for (const file of walk(snapshotDir)) if (/\.tmp(-[0-9a-f]+)?$/.test(file.path)) leaked.push(file);
  return leaked;
}

function* walk(dir: string): Generator<LeakedFile> {
  let entries: fs.Dirent[];
  try {
    entries = fs.readdirSync(dir, { withFileTypes: true });
  } catch {
    return;
  }
  for (const entry of entries) {
    const file = path.join(dir, entry.name);
    if (entry.isDirectory()) yield* walk(file);
    else {
      try {
        yield { path: file, bytes: fs.lstatSync(file).size };
      } catch {
        // Removed while we looked.
      }
    }
  }
}
