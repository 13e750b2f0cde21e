/**
 * Bounded memory of export and import: writes an incompressible state of the given size into one store, then in a
 * fresh process each (so that each peak RSS is its own) exports it to an archive file sealed with a passphrase, and
 * imports the file into a second store under another master key; last, reads it back there and compares SHA-256s.
 * Prints each step's whole-process peak RSS and time as JSON (target: under 256 MiB at 2 GiB). By hand:
 *
 *   npx tsx bench/archive.ts <size-mb> <scratch-dir>
 */
import { execFileSync } from 'node:child_process';
import { createCipheriv, createHash, randomBytes } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import * as fs from 'node:fs/promises';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';
import { ChunkedSnapshotStore, exportArchive, importArchive, Keyring } from '../src/snapshots';

const MiB = 1024 * 1024;
const SEAL = { passphrase: 'bench' };

function storeAt(dir: string, name: string): ChunkedSnapshotStore {
  const key = Buffer.from(process.env[`BENCH_KEY_${name.toUpperCase()}`]!, 'hex');
  return new ChunkedSnapshotStore({ rootDir: path.join(dir, name), keyring: new Keyring([{ id: name, key }]) });
}

async function peakDuring(fn: () => Promise<unknown>): Promise<{ peakRssMiB: number; seconds: number }> {
  let peak = process.memoryUsage().rss;
  const timer = setInterval(() => (peak = Math.max(peak, process.memoryUsage().rss)), 10);
  const start = performance.now();
  try {
    await fn();
    const peakRssMiB = Math.round(Math.max(peak, process.memoryUsage().rss) / MiB);
    return { peakRssMiB, seconds: Math.round(performance.now() - start) / 1000 };
  } finally {
    clearInterval(timer);
  }
}

/** One step in this process: `export` or `import`, its measurement on stdout. */
async function step(name: string, dir: string): Promise<void> {
  const archive = path.join(dir, 'bench.dsa');
  const measured =
    name === 'export'
      ? await peakDuring(() =>
          pipeline(
            exportArchive(storeAt(dir, 'here'), { sessionId: 'bench', checkpointIds: ['cp-1'], seal: SEAL, spec: {} }),
            createWriteStream(archive),
          ),
        )
      : await peakDuring(() =>
          importArchive(storeAt(dir, 'there'), {
            sessionId: () => 'bench-imported',
            owner: 'bench',
            open: () => createReadStream(archive, { highWaterMark: MiB }),
            key: SEAL,
          }),
        );
  console.log(JSON.stringify(measured));
}

async function main(): Promise<void> {
  if (process.argv[2] === '--step') return step(process.argv[3]!, process.argv[4]!);
  const sizeMiB = Number(process.argv[2] ?? 256);
  const dir = await fs.mkdtemp(path.join(process.argv[3] ?? '/tmp', 'archive-bench-'));
  process.env.BENCH_KEY_HERE = randomBytes(32).toString('hex');
  process.env.BENCH_KEY_THERE = randomBytes(32).toString('hex');
  try {
    const cipher = createCipheriv('aes-256-ctr', randomBytes(32), randomBytes(16));
    const zeros = Buffer.alloc(MiB);
    const digest = createHash('sha256');
    async function* state(): AsyncGenerator<Buffer> {
      for (let done = 0; done < sizeMiB; done++) {
        const piece = cipher.update(zeros);
        digest.update(piece);
        yield piece;
      }
    }
    const checkpoint = { sessionId: 'bench', checkpointId: 'cp-1', sequence: 1, parentId: null };
    await storeAt(dir, 'here').write(
      { ...checkpoint, runtime: { kind: 'memory', version: '1' }, trigger: 'manual' },
      (await import('node:stream')).Readable.from(state()),
    );
    const want = digest.digest('hex');
    const run = (name: string) =>
      JSON.parse(
        execFileSync(process.execPath, [...process.execArgv, __filename, '--step', name, dir], { encoding: 'utf8' }),
      ) as unknown;
    const exported = run('export');
    const imported = run('import');
    const { stream } = await storeAt(dir, 'there').open('bench-imported', 'cp-1');
    const back = createHash('sha256');
    for await (const piece of stream) back.update(piece as Buffer);
    const archiveMiB = Math.round((await fs.stat(path.join(dir, 'bench.dsa'))).size / MiB);
    console.log(
      JSON.stringify({
        sizeMiB,
        archiveMiB,
        export: exported,
        import: imported,
        sameBytes: back.digest('hex') === want,
      }),
    );
  } finally {
    await fs.rm(dir, { recursive: true, force: true });
  }
}

void main().then(
  () => process.exit(0),
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);
