import { randomUUID } from 'node:crypto';
import * as fsp from 'node:fs/promises';
import * as path from 'node:path';
import { z } from 'zod';
import { strictObject } from '../../domain/strict';
import { isErrnoError } from '../../errors';
import { bootId, hasProcfs, killGroup, scanGroups, waitUntilGroupGone } from './process-table';

/**
 * What the runtime keeps on disk of a running instance, so that a later incarnation of the worker can find and kill
 * what this one leaves behind when it dies without stopping it. `startTime` and `bootId` tell the process from a
 * later one that was given the same pid.
 */
export const InstanceRecord = strictObject({
  instanceId: z.string(),
  sessionId: z.string(),
  dir: z.string(),
  pid: z.number().int().positive(),
  /** The command leads its own group: the same number as `pid`. */
  pgid: z.number().int().positive(),
  /** Field 22 of `/proc/<pid>/stat`; null where there is no /proc. */
  startTime: z.number().int().nonnegative().nullable(),
  bootId: z.string().nullable(),
});
export type InstanceRecord = z.infer<typeof InstanceRecord>;

const SUFFIX = '.json';

const recordPath = (stateDir: string, instanceId: string): string => path.join(stateDir, `${instanceId}${SUFFIX}`);

/** Writes the record whole or not at all (a rename): a worker killed mid-write leaves the previous state, not half. */
export async function writeInstanceRecord(stateDir: string, record: InstanceRecord): Promise<void> {
  const file = recordPath(stateDir, record.instanceId);
  const temp = path.join(stateDir, `.${record.instanceId}${SUFFIX}.${randomUUID()}`);
  await fsp.mkdir(stateDir, { recursive: true, mode: 0o700 });
  try {
    await fsp.writeFile(temp, JSON.stringify(record), { mode: 0o600, flag: 'wx' });
    await fsp.rename(temp, file);
  } catch (error) {
    await fsp.rm(temp, { force: true });
    throw error;
  }
}

export async function removeInstanceRecord(stateDir: string, instanceId: string): Promise<void> {
  await fsp.rm(recordPath(stateDir, instanceId), { force: true });
}

/** A record file as found: its record, or why it cannot be read. */
export type FoundRecord = { file: string; record: InstanceRecord } | { file: string; problem: string };

/** The instance record for `instanceId`, if there is one. */
export async function readInstanceRecord(stateDir: string, instanceId: string): Promise<FoundRecord | undefined> {
  const file = recordPath(stateDir, instanceId);
  const text = await fsp.readFile(file, 'utf8').catch(orUndefinedIfMissing);
  return text === undefined ? undefined : parseRecord(file, text);
}

/** Every instance record in `stateDir`, and removes the temp files of writes that never finished. */
export async function listInstanceRecords(stateDir: string): Promise<FoundRecord[]> {
  const names = (await fsp.readdir(stateDir).catch(orUndefinedIfMissing)) ?? [];
  const found: FoundRecord[] = [];
  for (const name of names) {
    const file = path.join(stateDir, name);
    if (name.startsWith('.') && name.includes(SUFFIX)) await fsp.rm(file, { force: true });
    else if (name.endsWith(SUFFIX)) {
      const text = await fsp.readFile(file, 'utf8').catch(orUndefinedIfMissing);
      if (text !== undefined) found.push(parseRecord(file, text));
    }
  }
  return found;
}

function orUndefinedIfMissing(error: unknown): undefined {
  if (isErrnoError(error, 'ENOENT')) return undefined;
  throw error;
}

function parseRecord(file: string, text: string): FoundRecord {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (error) {
    return { file, problem: `not JSON: ${(error as Error).message}` };
  }
  const parsed = InstanceRecord.safeParse(json);
  return parsed.success ? { file, record: parsed.data } : { file, problem: z.prettifyError(parsed.error) };
}

/**
 * What fencing a record found: `killed` (its group was ours and is gone now), `gone` (nothing of it left),
 * `not-ours` (the pid or group id now belongs to another process), `survived` (still there after SIGKILL, e.g. stuck
 * in the kernel), `unverifiable` (no /proc to tell it from a later process with its pid: left alone).
 */
export type FenceOutcome = 'killed' | 'gone' | 'not-ours' | 'survived' | 'unverifiable';

/**
 * Kills what is left of the instance a record names, if it is still the same process group, and waits until it is
 * gone. Frozen members too: a worker that died mid-capture left them stopped. When the leader has exited but members
 * remain (the worker died before it killed them), they are taken for the instance's only if every one is in the
 * leader's session (setsid made it) and started after the leader: a later group under the same number would
 * have to have been made by a later process with that pid.
 */
export async function fenceRecord(record: InstanceRecord, timeoutMs: number): Promise<FenceOutcome> {
  if (!hasProcfs || record.startTime === null) return 'unverifiable';
  // Another boot: everything of it died with the machine.
  if (record.bootId !== bootId()) return 'gone';
  const { pid, pgid, startTime } = record;
  const members = (await scanGroups([pgid])).get(pgid) ?? [];
  if (members.every(({ state }) => 'ZX'.includes(state))) return 'gone';
  const leader = members.find((member) => member.pid === pid);
  const ours = leader
    ? leader.startTime === startTime
    : members.every((member) => member.session === pgid && member.startTime >= startTime);
  if (!ours) return 'not-ours';
  killGroup(pgid);
  return (await waitUntilGroupGone(pgid, timeoutMs)) ? 'killed' : 'survived';
}
