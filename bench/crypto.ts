/**
 * Throughput of the snapshot engine's object crypto on one core: sealObject / openObject (AES-256-GCM envelope)
 * on 64 KiB and 1 MiB objects, against bare AES-256-GCM, plaintext mode (SHA-256 envelope), SHA-256 of the same
 * bytes and a memcpy into a preallocated buffer. Everything is synchronous, so it is one core by construction.
 *
 *   npx tsx bench/crypto.ts
 *   npx tsx bench/crypto.ts --seconds 0.5 --rounds 15
 *
 * MB/s is 10^6 bytes of plaintext per second; the median of the rounds is shown with the min–max. Asserts nothing.
 */
import { createCipheriv, createHash, randomBytes } from 'node:crypto';
import * as os from 'node:os';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import {
  openObject,
  sealObject,
  sealPlaintextObject,
  type ExpectedBinding,
  type ObjectHeader,
} from '../src/snapshots/engine/crypto';

const KiB = 1024;
const SIZES = [64 * KiB, 1024 * KiB];

const { values } = parseArgs({
  options: { seconds: { type: 'string', default: '0.2' }, rounds: { type: 'string', default: '9' } },
});
const SECONDS_PER_ROUND = Number(values.seconds);
const ROUNDS = Number(values.rounds);

interface Case {
  name: string;
  /** Prepares the inputs once and returns the operation to time. */
  setup: (plaintext: Buffer) => () => unknown;
}

const key = randomBytes(32);
const header: ObjectHeader = {
  kind: 'chunk',
  formatVersion: 1,
  codec: 0,
  dataKeyId: 'dk-bench',
  tenant: 'bench-tenant',
  lineage: 'bench-lineage',
  objectId: 'sha256-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef',
};
const expected: ExpectedBinding = { ...header, encrypted: true };
const keyFor = () => key;

const CASES: Case[] = [
  { name: 'sealObject (AES-256-GCM)', setup: (plaintext) => () => sealObject(plaintext, key, header) },
  {
    name: 'openObject (AES-256-GCM)',
    setup: (plaintext) => {
      const sealed = sealObject(plaintext, key, header);
      return () => openObject(sealed, keyFor, expected);
    },
  },
  {
    name: 'bare AES-256-GCM encrypt',
    setup: (plaintext) => () => {
      const cipher = createCipheriv('aes-256-gcm', key, randomBytes(12));
      cipher.update(plaintext);
      cipher.final();
      return cipher.getAuthTag();
    },
  },
  { name: 'sealPlaintextObject (SHA-256)', setup: (plaintext) => () => sealPlaintextObject(plaintext, header) },
  {
    name: 'openObject plaintext (SHA-256)',
    setup: (plaintext) => {
      const sealed = sealPlaintextObject(plaintext, header);
      return () => openObject(sealed, keyFor, { ...expected, encrypted: false });
    },
  },
  { name: 'SHA-256', setup: (plaintext) => () => createHash('sha256').update(plaintext).digest() },
  {
    name: 'memcpy (Buffer.copy)',
    setup: (plaintext) => {
      const target = Buffer.allocUnsafe(plaintext.length);
      return () => plaintext.copy(target);
    },
  },
];

interface Rate {
  /** MB per second of this process's CPU time (user + system): what one core does, less disturbed by neighbours. */
  cpu: number;
  /** MB per second of wall-clock time. */
  wall: number;
}

/** Plaintext MB/s of `operation` over one round of about SECONDS_PER_ROUND. */
function round(operation: () => unknown, bytes: number): Rate {
  let iterations = 0;
  const cpuStart = process.cpuUsage();
  const start = performance.now();
  let elapsed = 0;
  do {
    for (let i = 0; i < 8; i++) operation();
    iterations += 8;
    elapsed = performance.now() - start;
  } while (elapsed < SECONDS_PER_ROUND * 1000);
  const cpu = process.cpuUsage(cpuStart);
  const megabytes = (iterations * bytes) / 1e6;
  return { cpu: megabytes / ((cpu.user + cpu.system) / 1e6), wall: megabytes / (elapsed / 1000) };
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = sorted.length >> 1;
  return sorted.length % 2 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2;
}

function main(): void {
  const cpuModel = os.cpus()[0]?.model ?? 'unknown CPU';
  console.log('# Object crypto throughput (one core)\n');
  console.log(
    `node ${process.version}, OpenSSL ${process.versions.openssl}, ${cpuModel} x ${os.cpus().length}, load ` +
      `average ${os.loadavg()[0]!.toFixed(2)} at start. ${ROUNDS} interleaved rounds of ${SECONDS_PER_ROUND} s per ` +
      'operation; MB = 10^6 bytes of plaintext.\n',
  );

  for (const size of SIZES) {
    const plaintext = randomBytes(size);
    const operations = CASES.map((testCase) => testCase.setup(plaintext));
    for (const operation of operations) round(operation, size); // warm-up: JIT, OpenSSL contexts, allocator
    // Rounds are interleaved across operations, so a noisy neighbour slows all of them alike.
    const rates = operations.map((): Rate[] => []);
    for (let r = 0; r < ROUNDS; r++) operations.forEach((operation, i) => rates[i]!.push(round(operation, size)));

    const cpu = rates.map((list) => list.map((rate) => rate.cpu));
    const medians = cpu.map(median);
    const sha = medians[CASES.findIndex((c) => c.name === 'SHA-256')]!;
    const memcpy = medians[CASES.findIndex((c) => c.name.startsWith('memcpy'))]!;
    console.log(`## ${size / KiB} KiB objects\n`);
    console.log('| operation | MB/s per CPU-s (median) | min–max | MB/s wall | µs / object | vs SHA-256 | vs memcpy |');
    console.log('| --- | ---: | ---: | ---: | ---: | ---: | ---: |');
    CASES.forEach((testCase, i) => {
      const m = medians[i]!;
      const cells = [
        testCase.name,
        m.toFixed(0),
        `${Math.min(...cpu[i]!).toFixed(0)}–${Math.max(...cpu[i]!).toFixed(0)}`,
        median(rates[i]!.map((rate) => rate.wall)).toFixed(0),
        (size / m).toFixed(1),
        `${(m / sha).toFixed(2)}×`,
        `${(m / memcpy).toFixed(3)}×`,
      ];
      console.log(`| ${cells.join(' | ')} |`);
    });
    console.log('');
  }
}

main();
