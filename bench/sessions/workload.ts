/** The workspace every round measures: a few small text files and `--size-mb` MiB of random data, seeded once. */
import { createHash, randomBytes } from 'node:crypto';
import { createReadStream } from 'node:fs';
import * as fs from 'node:fs';
import * as fsp from 'node:fs/promises';
import * as path from 'node:path';
import type { WorkspaceRuntimeSpec } from '../../src/domain/schemas';
import { MiB } from './format';
import type { Options } from './options';

export const COMMAND = ['sh', '-c', 'while true; do sleep 1; done'];
/** Seeded through the spec (at most 256 KiB); the big incompressible files are written after start. */
export const SMALL_FILES: Record<string, string> = {
  'README.md': '# bench workspace\n\nA session seeded by bench/sessions/run.ts.\n',
  'src/main.sh': '#!/bin/sh\nwhile true; do sleep 1; done\n',
  'notes/todo.txt': Array.from({ length: 500 }, (_, i) => `- item ${i}: keep this across pause and resume`).join('\n'),
};
export const WORKSPACE_SPEC: WorkspaceRuntimeSpec = {
  kind: 'workspace',
  command: COMMAND,
  files: SMALL_FILES,
  stopGraceMs: 2_000,
};

/** The big files, written once: each round copies them into its live workspace. */
export interface Seed {
  dir: string;
  blobCount: number;
}

/** File sizes of the big part of the workspace: `fileMiB` each, the remainder on the last one. */
export function blobSizes(options: Options): number[] {
  const total = Math.round(options.sizeMiB * MiB);
  const count = Math.max(1, Math.round(options.sizeMiB / options.fileMiB));
  const each = Math.floor(total / count);
  return Array.from({ length: count }, (_, i) => (i === count - 1 ? total - each * (count - 1) : each));
}

export function blobName(i: number): string {
  return `data/blob-${String(i).padStart(3, '0')}.bin`;
}

/** Writes the workspace's content once (random, incompressible), to be copied into each session's directory. */
export function writeSeed(dir: string, sizes: number[]): Seed {
  for (const [name, content] of Object.entries(SMALL_FILES)) {
    fs.mkdirSync(path.dirname(path.join(dir, name)), { recursive: true });
    fs.writeFileSync(path.join(dir, name), content);
  }
  fs.mkdirSync(path.join(dir, 'data'), { recursive: true });
  sizes.forEach((size, i) => {
    const fd = fs.openSync(path.join(dir, blobName(i)), 'w');
    try {
      for (let done = 0; done < size;) {
        const chunk = randomBytes(Math.min(MiB, size - done));
        fs.writeSync(fd, chunk);
        done += chunk.length;
      }
      fs.fsyncSync(fd);
    } finally {
      fs.closeSync(fd);
    }
  });
  return { dir, blobCount: sizes.length };
}

/** Copies the big files into a live workspace and makes them durable, so no later fsync pays for them. */
export function seedWorkspace(seed: Seed, workspaceDir: string): void {
  fs.mkdirSync(path.join(workspaceDir, 'data'), { recursive: true });
  for (let i = 0; i < seed.blobCount; i++) {
    const target = path.join(workspaceDir, blobName(i));
    fs.copyFileSync(path.join(seed.dir, blobName(i)), target);
    fsyncPath(target);
  }
  fsyncPath(path.join(workspaceDir, 'data'));
  fsyncPath(workspaceDir);
}

export function fsyncPath(p: string): void {
  const fd = fs.openSync(p, 'r');
  try {
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
}

export interface TreeDigest {
  files: number;
  bytes: number;
  sha256: string;
}

/** One digest over the sorted tree: every directory, every file's path, size and content hash. */
export async function treeDigest(root: string): Promise<TreeDigest> {
  const tree = createHash('sha256');
  let files = 0;
  let bytes = 0;
  const walk = async (rel: string): Promise<void> => {
    for (const name of (await fsp.readdir(path.join(root, rel))).sort()) {
      const relPath = rel === '' ? name : `${rel}/${name}`;
      const stats = await fsp.lstat(path.join(root, relPath));
      if (stats.isDirectory()) {
        tree.update(`d ${relPath}\n`);
        await walk(relPath);
      } else if (stats.isFile()) {
        const hash = createHash('sha256');
        for await (const chunk of createReadStream(path.join(root, relPath), { highWaterMark: MiB })) {
          hash.update(chunk as Buffer);
        }
        tree.update(`f ${relPath} ${stats.size} ${hash.digest('hex')}\n`);
        files++;
        bytes += stats.size;
      } else {
        tree.update(`o ${relPath}\n`);
      }
    }
  };
  await walk('');
  return { files, bytes, sha256: tree.digest('hex') };
}

/** State letter of /proc/<pid>/stat (R, S, T, Z, …), or undefined if there is no such process. */
export function processState(pid: number): string | undefined {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[0];
  } catch {
    return undefined;
  }
}
