/**
 * Gateway benchmark: what the HTTP gateway adds to a control, and how many status reads a second it serves, each
 * against the same thing done without it in the same run on the same server (SessionClient; a bare Temporal query).
 *
 *   npx tsx bench/gateway/run.ts            # 200 checkpoints each way, 5 s of reads each way
 *   npx tsx bench/gateway/run.ts --quick    # 50 checkpoints, 3 s of reads
 *
 * Nothing here asserts a time: it prints (and writes to .bench/gateway.md) what it measured, PASS/MISS beside targets.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { statusQuery } from '../../src/api';
import { smallState } from '../controls/latency';
import { summarize, timed, type Latency } from '../controls/stats';
import { startBenchGateway } from './bench-gateway';
import { table } from '../markdown';
import { runWithCleanup, type Cleanup } from '../sessions/cleanup';

const RESULTS_FILE = path.resolve(__dirname, '..', '..', '.bench', 'gateway.md');
const READERS = 8;

/** Calls `fn` (with the reader's number) from READERS loops for `ms`: completed calls per second. */
async function rate(ms: number, fn: (reader: number) => Promise<unknown>): Promise<number> {
  const end = Date.now() + ms;
  let done = 0;
  await Promise.all(
    Array.from({ length: READERS }, async (_, reader) => {
      while (Date.now() < end) {
        await fn(reader);
        done++;
      }
    }),
  );
  return done / (ms / 1000);
}

async function main(cleanup: Cleanup): Promise<void> {
  const quick = process.argv.includes('--quick');
  const runs = quick ? 50 : 200;
  const readMs = quick ? 3_000 : 5_000;
  const { sys, key, gateway } = await startBenchGateway(cleanup, 'ds-gateway-');

  const sessionId = `gw-${sys.runId}`;
  const session = await sys.sessions.start({ sessionId, runtime: { kind: 'memory', initialState: smallState() } });
  const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
  const http = async (method: string, route: string) => {
    const res = await fetch(`${gateway.url}${route}`, { method, headers, body: method === 'POST' ? '{}' : undefined });
    if (!res.ok) throw new Error(`${method} ${route}: ${res.status} ${await res.text()}`);
    return res.json();
  };
  const series = async (fn: () => Promise<unknown>, into: number[]): Promise<void> => {
    for (let i = 0; i < 10; i++) await fn();
    for (let i = 0; i < runs; i++) into.push((await timed(fn)).ms);
  };
  // Interleaved halves, so that a slow stretch of the machine falls on both sides.
  const direct: number[] = [];
  const viaGateway: number[] = [];
  for (let round = 0; round < 2; round++) {
    await series(() => session.checkpoint(), direct);
    await series(() => http('POST', `/v1/sessions/${sessionId}/checkpoint`), viaGateway);
  }
  const d: Latency = summarize(direct);
  const g: Latency = summarize(viaGateway);
  const bareReads = await rate(readMs, () => session.workflow.query(statusQuery));
  const gatewayReads = await rate(readMs, () => http('GET', `/v1/sessions/${sessionId}`));
  // One session per reader: nothing to share, so this is each read's own cost through the gateway.
  const own = await Promise.all(
    Array.from({ length: READERS }, (_, i) =>
      sys.sessions.start({ sessionId: `${sessionId}-r${i}`, runtime: { kind: 'memory', initialState: smallState() } }),
    ),
  );
  const bareOwn = await rate(readMs, (i) => own[i]!.workflow.query(statusQuery));
  const gatewayOwn = await rate(readMs, (i) => http('GET', `/v1/sessions/${own[i]!.sessionId}`));
  await Promise.all([session, ...own].map((s) => s.stop({ checkpoint: false })));

  const ms = (n: number) => `${n.toFixed(1)} ms`;
  const overhead = g.p50 - d.p50;
  const ratio = gatewayReads / bareReads;
  const ownRatio = gatewayOwn / bareOwn;
  const markdown = [
    '# Gateway benchmark',
    '',
    `${new Date().toISOString().slice(0, 10)}, ${os.cpus()[0]?.model ?? 'CPU'} × ${os.cpus().length}. ` +
      `${quick ? '`--quick`' : 'Defaults'}: ${2 * runs} checkpoints each way (interleaved), ${READERS} readers for ` +
      `${readMs / 1000} s each way.`,
    '',
    table(
      ['measure', 'through the gateway', 'baseline (same run)', 'difference', 'target', 'result'],
      [
        [
          'checkpoint p50 (p99)',
          `${ms(g.p50)} (${ms(g.p99)})`,
          `SessionClient: ${ms(d.p50)} (${ms(d.p99)})`,
          `${overhead >= 0 ? '+' : ''}${ms(overhead)}`,
          '≤ +5 ms',
          overhead <= 5 ? 'PASS' : '**MISS**',
        ],
        [
          `status reads per second, ${READERS} readers of one session`,
          gatewayReads.toFixed(0),
          `Temporal query: ${bareReads.toFixed(0)}`,
          `${ratio.toFixed(2)}×`,
          '≥ 0.8×',
          ratio >= 0.8 ? 'PASS' : '**MISS**',
        ],
        [
          `status reads per second, ${READERS} readers of a session each`,
          gatewayOwn.toFixed(0),
          `Temporal query: ${bareOwn.toFixed(0)}`,
          `${ownRatio.toFixed(2)}×`,
          '≥ 0.8×',
          ownRatio >= 0.8 ? 'PASS' : '**MISS**',
        ],
      ],
    ),
    '',
  ].join('\n');
  console.log(`\n${markdown}`);
  fs.mkdirSync(path.dirname(RESULTS_FILE), { recursive: true });
  fs.writeFileSync(RESULTS_FILE, markdown);
}

runWithCleanup('gateway bench', main);
