/**
 * What payload encryption costs. Two worker sets on one dev server, one with the payload codec (as `npm start` and
 * compose run) and one without, each with a small memory session; their checkpoint and pause + resume round trips
 * are taken in turn, so both see the same machine at the same moment. Beside them, one payload's encode and decode
 * through the codec against the JSON converter alone, at the sizes sessions send.
 *
 *   npx tsx bench/payloads.ts            # 200 rounds
 *   npx tsx bench/payloads.ts --quick    # 50 rounds
 *
 * Nothing here asserts a time: it prints what it measured.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import * as fs from 'node:fs';
import * as fsp from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import { parseArgs } from 'node:util';
import { Client, Connection } from '@temporalio/client';
import { defaultPayloadConverter } from '@temporalio/common';
import { bundleWorkflowCode, DefaultLogger, NativeConnection, Runtime } from '@temporalio/worker';
import { SessionClient, type SessionHandle } from '../src/client';
import { freePort, startDevServer } from '../src/dev-server';
import { FAILURE_CONVERTER_PATH, PayloadEncryptionCodec, sessionDataConverter } from '../src/payloads';
import { SESSION_WORKFLOWS } from '../src/workflow-bundle';
import { MemoryRuntime } from '../src/runtimes';
import { Keyring } from '../src/snapshots';
import { createWorkers } from '../src/worker';
import { smallState } from './controls/latency';
import { summarize, timed } from './controls/stats';
import { runWithCleanup, type Cleanup } from './sessions/cleanup';
import { productionStore } from './sessions/system';

const { values } = parseArgs({ options: { quick: { type: 'boolean', default: false } }, strict: true });
const ROUNDS = values.quick ? 50 : 200;
const WARMUP = 10;
const quietBundler = { trace() {}, debug() {}, info() {}, warn: console.warn, error: console.error, log() {} };

interface Variant {
  name: string;
  session: SessionHandle;
  checkpoint: number[];
  pauseResume: number[];
}

/** Workers and a client of one kind (with or without the codec) on their own task queue, and a session on them. */
async function startVariant(
  name: string,
  address: string,
  root: string,
  codec: PayloadEncryptionCodec | undefined,
  cleanup: Cleanup,
): Promise<Variant> {
  const dataConverter = codec ? sessionDataConverter(codec) : undefined;
  // As a worker bundles it: with encryption, failures' messages go through the codec.
  const { code } = await bundleWorkflowCode({
    ...SESSION_WORKFLOWS,
    ...(codec ? { failureConverterPath: FAILURE_CONVERTER_PATH } : {}),
    logger: quietBundler,
  });
  const nativeConnection = await NativeConnection.connect({ address });
  cleanup.add(`${name} worker connection`, () => nativeConnection.close());
  const connection = await Connection.connect({ address });
  cleanup.add(`${name} client connection`, () => connection.close());
  const client = new Client({ connection, ...(dataConverter ? { dataConverter } : {}) });
  const taskQueue = `payloads-${name}-${randomUUID().slice(0, 8)}`;
  const hostTaskQueue = `${taskQueue}@host-1`;
  const store = productionStore(path.join(root, name));
  const workers = await createWorkers({
    connection: nativeConnection,
    client,
    namespace: 'default',
    taskQueue,
    hostTaskQueue,
    deps: { store, timeline: store, runtimes: { memory: new MemoryRuntime() }, hostTaskQueue },
    workflowBundle: { code },
    ...(dataConverter ? { dataConverter } : {}),
  });
  const running = workers.run();
  cleanup.add(`${name} workers`, async () => {
    workers.shutdown();
    await running.catch(() => undefined);
  });
  const sessions = new SessionClient({ client, taskQueue, timeline: store });
  const session = await sessions.start({
    sessionId: `payloads-${name}-${randomUUID().slice(0, 8)}`,
    runtime: { kind: 'memory', initialState: smallState() },
  });
  cleanup.add(`${name} session`, () => session.stop({ checkpoint: false }));
  return { name, session, checkpoint: [], pauseResume: [] };
}

/** One round of each control on a variant; recorded once the warm-up is over. */
async function round(v: Variant, record: boolean): Promise<void> {
  const checkpoint = await timed(() => v.session.checkpoint());
  const pauseResume = await timed(async () => {
    await v.session.pause();
    await v.session.resume();
  });
  if (!record) return;
  v.checkpoint.push(checkpoint.ms);
  v.pauseResume.push(pauseResume.ms);
}

/** Mean microseconds per call of `fn` over at least `ms` of repetitions (after a warm-up). */
async function perCall(fn: () => unknown, ms: number): Promise<number> {
  for (let i = 0; i < 50; i++) await fn();
  let n = 0;
  const start = process.hrtime.bigint();
  let elapsed = 0;
  while (elapsed < ms * 1e6) {
    for (let i = 0; i < 20; i++) await fn();
    n += 20;
    elapsed = Number(process.hrtime.bigint() - start);
  }
  return elapsed / n / 1e3;
}

async function payloadRows(codec: PayloadEncryptionCodec): Promise<string[]> {
  const rows: string[] = [];
  for (const [name, bytes] of [
    ['400 B (a CheckpointRef)', 400],
    ['4 KiB (a spec)', 4 * 1024],
    ['256 KiB (the largest spec)', 256 * 1024],
  ] as const) {
    const value = {
      sessionId: 'bench',
      runtime: { kind: 'workspace', command: ['sh'], files: { seed: 'x'.repeat(bytes) } },
    };
    const ms = values.quick ? 300 : 2_000;
    const json = await perCall(() => defaultPayloadConverter.fromPayload(defaultPayloadConverter.toPayload(value)), ms);
    const sealed = await perCall(async () => {
      const [p] = await codec.encode([defaultPayloadConverter.toPayload(value)]);
      return defaultPayloadConverter.fromPayload((await codec.decode([p!]))[0]!);
    }, ms);
    rows.push(`| ${name} | ${json.toFixed(1)} | ${sealed.toFixed(1)} | ${(sealed - json).toFixed(1)} |`);
  }
  return rows;
}

async function main(cleanup: Cleanup): Promise<void> {
  Runtime.install({ logger: new DefaultLogger('WARN'), shutdownSignals: [] });
  const root = fs.mkdtempSync(path.join(fs.existsSync('/dev/shm') ? '/dev/shm' : os.tmpdir(), 'ds-payloads-'));
  cleanup.add('temp dir', () => fsp.rm(root, { recursive: true, force: true }));
  const server = await startDevServer({
    port: await freePort(),
    uiPort: null,
    logFile: path.join(root, 'temporal.log'),
  });
  cleanup.add('dev server', () => server.stop());
  const codec = new PayloadEncryptionCodec(new Keyring([{ id: 'bench-1', key: randomBytes(32) }]));
  const plain = await startVariant('plain', server.address, root, undefined, cleanup);
  const encrypted = await startVariant('encrypted', server.address, root, codec, cleanup);
  console.log(`payloads: ${ROUNDS} rounds of checkpoint and pause + resume, taken in turn…`);
  for (let i = 0; i < WARMUP + ROUNDS; i++) {
    for (const v of [plain, encrypted]) await round(v, i >= WARMUP);
  }

  const lines = ['## Payload encryption', '', `Control round trips, p50 of ${ROUNDS} (ms):`, ''];
  lines.push('| control | without the codec | with the codec | ratio |', '| --- | ---: | ---: | ---: |');
  for (const [label, key] of [
    ['checkpoint', 'checkpoint'],
    ['pause + resume', 'pauseResume'],
  ] as const) {
    const [a, b] = [summarize(plain[key]).p50, summarize(encrypted[key]).p50];
    lines.push(`| ${label} | ${a.toFixed(1)} | ${b.toFixed(1)} | ${(b / a).toFixed(3)}× |`);
  }
  lines.push('', 'One payload, encode + decode (µs):', '');
  lines.push('| payload | JSON converter only | with the codec | the codec adds |', '| --- | ---: | ---: | ---: |');
  lines.push(...(await payloadRows(codec)));
  console.log(`\n${lines.join('\n')}`);
}

runWithCleanup('payloads', main);
