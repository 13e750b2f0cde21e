/**
 * What the sessions under test do, and how their state is read back: a counter workspace whose history can be
 * checked for gaps and rollbacks, a few MiB of incompressible files written into it, and memory sessions whose bytes
 * must come back exactly.
 */
import { createHash, randomBytes } from 'node:crypto';
import * as fsp from 'node:fs/promises';
import * as path from 'node:path';
import { extract } from 'tar-stream';
import type { CheckpointRef, LivenessOptions, StartSessionInput } from '../../src/domain/schemas';
import type { SnapshotStore } from '../../src/snapshots';
import { publish } from '../../src/fs-io';

const MiB = 1024 * 1024;
/** "A few MiB" of files for capture and restore to move, in files of 2 MiB. */
export const BLOB_FILES = 3;
const BLOB_BYTES = 2 * MiB;
/** Base64 of random bytes: a memory session's state is a string, at most 256 KiB. */
const MEMORY_STATE_BYTES = 96 * 1024;

/**
 * Each tick the counter is written atomically (`n.tmp`, then `mv`) and appended to `log` with a timestamp, so that
 * two runs that reached the same value still differ in their history: a restore of an older state shows in the log.
 * At start, a value written to `n` but not yet logged (frozen between the two) is logged first: the log stays
 * 1, 2, 3, … with no gap and no repeat across any number of restores.
 */
const COUNTER_SCRIPT = [
  'n=$(cat n 2>/dev/null || echo 0)',
  'last=$(tail -n 1 log 2>/dev/null | cut -d" " -f1)',
  '[ "$n" = 0 ] || [ "$last" = "$n" ] || echo "$n $(date +%s%N)" >> log',
  'while :; do n=$((n+1)); echo $n > n.tmp && mv n.tmp n; echo "$n $(date +%s%N)" >> log; sleep 0.1; done',
].join('; ');

/** Liveness of the sessions the crash scenarios kill under: a dead worker is noticed within seconds. */
export const FAST_LIVENESS: LivenessOptions = { heartbeatTimeoutMs: 3_000, hostTimeoutMs: 5_000 };

/**
 * A counter workspace. The marker is the command's `$0`: it shows in `/proc/<pid>/cmdline` of every copy of this
 * session's command, whichever instance runs it.
 */
export function counterSpec(sessionId: string, marker: string, liveness?: LivenessOptions): StartSessionInput {
  return {
    sessionId,
    runtime: { kind: 'workspace', command: ['sh', '-c', COUNTER_SCRIPT, marker], stopGraceMs: 1_000 },
    ...(liveness ? { liveness } : {}),
  };
}

export function memorySpec(sessionId: string, liveness?: LivenessOptions): StartSessionInput {
  return {
    sessionId,
    runtime: { kind: 'memory', initialState: randomBytes((MEMORY_STATE_BYTES * 3) / 4).toString('base64') },
    ...(liveness ? { liveness } : {}),
  };
}

/** The digest of each blob file, by name: one version of the files a session was given. */
export type BlobVersion = ReadonlyMap<string, string>;

/**
 * Writes fresh incompressible blob files of `bytesEach` into a running instance's directory (fsynced, each replaced
 * whole).
 */
export async function writeBlobs(location: string, bytesEach = BLOB_BYTES): Promise<BlobVersion> {
  const version = new Map<string, string>();
  for (let i = 0; i < BLOB_FILES; i++) {
    const name = `blob-${i}`;
    const bytes = randomBytes(bytesEach);
    await publish(path.join(location, name), bytes);
    version.set(name, sha256(bytes));
  }
  return version;
}

/** The files of a workspace state: contents of the counter's files, digests of the blobs. */
export interface WorkspaceFiles {
  n: number | undefined;
  log: string;
  blobs: Map<string, string>;
}

/** The counter's files and blob digests in a live instance's directory. */
export async function liveFiles(location: string): Promise<WorkspaceFiles> {
  const read = (name: string) => fsp.readFile(path.join(location, name)).catch(() => undefined);
  const blobs = new Map<string, string>();
  for (let i = 0; i < BLOB_FILES; i++) {
    const bytes = await read(`blob-${i}`);
    if (bytes) blobs.set(`blob-${i}`, sha256(bytes));
  }
  return { n: counterValue((await read('n'))?.toString()), log: (await read('log'))?.toString() ?? '', blobs };
}

/** The same files as a checkpoint of a workspace holds them, read from the store (every chunk authenticated). */
export async function checkpointFiles(store: SnapshotStore, ref: CheckpointRef): Promise<WorkspaceFiles> {
  const { stream } = await store.open(ref.sessionId, ref.checkpointId);
  const files = new Map<string, Buffer>();
  const tar = extract();
  const fed = new Promise<void>((resolve, reject) => {
    stream.once('error', reject);
    tar.once('error', reject);
    stream.pipe(tar);
    tar.once('finish', resolve);
  });
  fed.catch(() => undefined);
  for await (const entry of tar) {
    const pieces: Buffer[] = [];
    for await (const piece of entry) pieces.push(piece as Buffer);
    files.set(entry.header.name.replace(/^\.\//, ''), Buffer.concat(pieces));
  }
  await fed;
  const blobs = new Map<string, string>();
  for (const [name, bytes] of files) if (/^blob-\d+$/.test(name)) blobs.set(name, sha256(bytes));
  return { n: counterValue(files.get('n')?.toString()), log: files.get('log')?.toString() ?? '', blobs };
}

/** A memory session's bytes as a checkpoint holds them. */
export async function checkpointBytes(store: SnapshotStore, ref: CheckpointRef): Promise<Buffer> {
  const { stream } = await store.open(ref.sessionId, ref.checkpointId);
  const pieces: Buffer[] = [];
  for await (const piece of stream) pieces.push(piece as Buffer);
  return Buffer.concat(pieces);
}

/** Why a counter log is not 1, 2, 3, … with timestamps that never go back, or undefined when it is. */
export function logProblem(log: string): string | undefined {
  const lines = log.split('\n').filter((l) => l !== '');
  let previousTime = 0n;
  for (const [i, line] of lines.entries()) {
    const [value, time] = line.split(' ');
    if (Number(value) !== i + 1) return `line ${i + 1} of the counter log is ${JSON.stringify(line)}, not ${i + 1}`;
    const at = /^\d+$/.test(time ?? '') ? BigInt(time!) : -1n;
    if (at < previousTime) return `line ${i + 1} of the counter log goes back in time: ${JSON.stringify(line)}`;
    previousTime = at;
  }
  return undefined;
}

export function sameBlobs(a: ReadonlyMap<string, string>, b: ReadonlyMap<string, string>): boolean {
  return a.size === b.size && [...a].every(([name, digest]) => b.get(name) === digest);
}

function counterValue(text: string | undefined): number | undefined {
  return text === undefined || text.trim() === '' ? undefined : Number(text.trim());
}

function sha256(bytes: Buffer): string {
  return createHash('sha256').update(bytes).digest('hex');
}
