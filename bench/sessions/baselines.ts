/**
 * What the machine does with the same bytes on the same file system, without the engine: write + fsync, read (warm
 * and cold), SHA-256, and a plain `tar` both ways. The engine's rows are read against these.
 */
import { spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { performance } from 'node:perf_hooks';
import { MiB } from './format';
import { fsyncPath } from './workload';

function run(program: string, args: string[]): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(program, args, { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.once('error', reject);
    child.once('exit', (code, signal) =>
      code === 0 ? resolve() : reject(new Error(`${program} ${args.join(' ')}: ${code ?? signal} ${stderr.trim()}`)),
    );
  });
}

export interface Baselines {
  bytes: number;
  writeMs: number[];
  readWarmMs: number[];
  readColdMs: number[] | null;
  sha256Ms: number[];
  tarCreateMs: number[];
  tarBytes: number;
  tarExtractMs: number[];
}

export async function measureBaselines(
  dir: string,
  seedDir: string,
  bytes: number,
  rounds: number,
): Promise<Baselines> {
  fs.mkdirSync(dir, { recursive: true });
  const pool = randomBytes(8 * MiB);
  const chunkAt = (offset: number, length: number): Buffer => {
    const start = offset % pool.length;
    return pool.subarray(start, Math.min(start + length, pool.length));
  };
  const file = path.join(dir, 'sequential.bin');

  // (a) sequential write of the same byte count, 1 MiB writes, fsync before the file counts as written.
  const writeMs: number[] = [];
  for (let r = 0; r < rounds; r++) {
    fs.rmSync(file, { force: true });
    const t0 = performance.now();
    const fd = fs.openSync(file, 'w');
    for (let done = 0; done < bytes;) done += fs.writeSync(fd, chunkAt(done, Math.min(MiB, bytes - done)));
    fs.fsyncSync(fd);
    fs.closeSync(fd);
    writeMs.push(performance.now() - t0);
  }

  // (b) sequential read of it: warm (page cache, like the engine's restore of a just-written checkpoint) and
  // cold (O_DIRECT through dd: the device, bypassing the cache without dropping anyone else's cache).
  const readWarmMs: number[] = [];
  const buffer = Buffer.allocUnsafe(MiB);
  for (let r = 0; r < rounds; r++) {
    const t0 = performance.now();
    const fd = fs.openSync(file, 'r');
    while (fs.readSync(fd, buffer, 0, buffer.length, null) > 0);
    fs.closeSync(fd);
    readWarmMs.push(performance.now() - t0);
  }
  let readColdMs: number[] | null = [];
  for (let r = 0; r < rounds && readColdMs; r++) {
    const t0 = performance.now();
    try {
      await run('dd', [`if=${file}`, 'of=/dev/null', 'bs=4M', 'iflag=direct', 'status=none']);
      readColdMs.push(performance.now() - t0);
    } catch {
      readColdMs = null; // no O_DIRECT on this file system
    }
  }
  fs.rmSync(file, { force: true });

  // (c) SHA-256 in memory, 1 MiB updates.
  const sha256Ms: number[] = [];
  for (let r = 0; r < rounds; r++) {
    const t0 = performance.now();
    const hash = createHash('sha256');
    for (let done = 0; done < bytes;) {
      const chunk = chunkAt(done, Math.min(MiB, bytes - done));
      hash.update(chunk);
      done += chunk.length;
    }
    hash.digest();
    sha256Ms.push(performance.now() - t0);
  }

  // (d) a plain `tar` of the same workspace to a file, fsynced: what a straightforward copy costs; and its
  // extraction into a fresh directory (no fsync, like the engine's restore).
  const tarFile = path.join(dir, 'workspace.tar');
  const tarCreateMs: number[] = [];
  const tarExtractMs: number[] = [];
  let tarBytes = 0;
  for (let r = 0; r < rounds; r++) {
    fs.rmSync(tarFile, { force: true });
    const t0 = performance.now();
    await run('tar', ['-cf', tarFile, '-C', seedDir, '.']);
    fsyncPath(tarFile);
    tarCreateMs.push(performance.now() - t0);
    tarBytes = fs.statSync(tarFile).size;
  }
  for (let r = 0; r < rounds; r++) {
    const target = path.join(dir, `extract-${r}`);
    fs.mkdirSync(target);
    const t0 = performance.now();
    await run('tar', ['-xf', tarFile, '-C', target]);
    tarExtractMs.push(performance.now() - t0);
    fs.rmSync(target, { recursive: true, force: true });
  }
  fs.rmSync(tarFile, { force: true });
  return { bytes, writeMs, readWarmMs, readColdMs, sha256Ms, tarCreateMs, tarBytes, tarExtractMs };
}
