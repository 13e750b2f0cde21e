/**
 * Gateway soak: starts, checkpoints and stops many memory sessions through the HTTP gateway (loopback only, in this
 * process beside the workers and the dev server, as `npm start` runs them) and prints the process's RSS and V8 heap
 * before, at the peak and after, the "after" once the sessions have stopped and a full GC ran. It stops by itself.
 *
 *   npx tsx bench/gateway/soak.ts                  # 1,000 sessions, 20 at a time
 *   npx tsx bench/gateway/soak.ts --count 200      # fewer
 *   npx tsx bench/gateway/soak.ts --rounds 2       # the same again after the first "after": a leak grows each round
 *   npx tsx bench/gateway/soak.ts --heap           # also writes heap snapshots before and after (.bench/soak-*.heapsnapshot)
 *
 * Nothing here asserts: it prints (and writes to .bench/gateway-soak.md) what it measured.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import * as v8 from 'node:v8';
import * as vm from 'node:vm';
import { startBenchGateway } from './bench-gateway';
import { table } from '../markdown';
import { runWithCleanup, type Cleanup } from '../sessions/cleanup';

const RESULTS_DIR = path.resolve(__dirname, '..', '..', '.bench');
const MiB = 1024 * 1024;

function arg(name: string, fallback: number): number {
  const i = process.argv.indexOf(name);
  return i >= 0 ? Number(process.argv[i + 1]) : fallback;
}

/** A full collection, as far as this process can ask for one. */
function collect(): void {
  v8.setFlagsFromString('--expose-gc');
  (vm.runInNewContext('gc') as () => void)();
}

interface Sample {
  rss: number;
  heapUsed: number;
  heapTotal: number;
  external: number;
}
const sample = (): Sample => {
  const m = process.memoryUsage();
  return { rss: m.rss, heapUsed: m.heapUsed, heapTotal: m.heapTotal, external: m.external + m.arrayBuffers };
};

async function main(cleanup: Cleanup): Promise<void> {
  const count = arg('--count', 1_000);
  const rounds = arg('--rounds', 1);
  const concurrency = arg('--concurrency', 20);
  const heap = process.argv.includes('--heap');
  const { sys, key, gateway } = await startBenchGateway(cleanup, 'ds-soak-');
  fs.mkdirSync(RESULTS_DIR, { recursive: true });

  const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
  const post = async (route: string, body: unknown) => {
    const res = await fetch(`${gateway.url}${route}`, { method: 'POST', headers, body: JSON.stringify(body) });
    if (!res.ok) throw new Error(`POST ${route}: ${res.status} ${await res.text()}`);
    return res.json();
  };
  // One session first, so that "before" holds what any use of the stack loads (bundles, connections, caches).
  const warm = `soak-${sys.runId}-warm`;
  await post('/v1/sessions', { sessionId: warm, runtime: { kind: 'memory' } });
  await post(`/v1/sessions/${warm}/stop`, { checkpoint: false });
  collect();
  const before = sample();
  if (heap) v8.writeHeapSnapshot(path.join(RESULTS_DIR, 'soak-before.heapsnapshot'));
  let peak = before;
  const sampler = setInterval(() => {
    const now = sample();
    if (now.rss > peak.rss) peak = now;
  }, 200);

  const rows: string[][] = [];
  const mib = (n: number) => `${(n / MiB).toFixed(0)} MiB`;
  const row = (what: string, m: Sample) => [what, mib(m.rss), mib(m.heapUsed), mib(m.heapTotal), mib(m.external)];
  rows.push(row('before', before));
  let seconds = 0;
  for (let round = 1; round <= rounds; round++) {
    const started = Date.now();
    let next = 0;
    let done = 0;
    await Promise.all(
      Array.from({ length: concurrency }, async () => {
        while (next < count) {
          const sessionId = `soak-${sys.runId}-${round}-${next++}`;
          await post('/v1/sessions', { sessionId, runtime: { kind: 'memory', initialState: 'x'.repeat(1024) } });
          await post(`/v1/sessions/${sessionId}/checkpoint`, { label: 'soak' });
          await post(`/v1/sessions/${sessionId}/stop`, { checkpoint: false });
          if (++done % 100 === 0) console.log(`${done}/${count} sessions (${Math.round(sample().rss / MiB)} MiB RSS)`);
        }
      }),
    );
    seconds += (Date.now() - started) / 1000;
    // The workers finish what the stops left (workflow tasks, cache evictions) before "after" is read.
    await new Promise((r) => setTimeout(r, 5_000));
    collect();
    rows.push(row(`peak, round ${round}`, peak));
    rows.push(row(`after round ${round}`, sample()));
    peak = sample();
  }
  clearInterval(sampler);
  if (heap) v8.writeHeapSnapshot(path.join(RESULTS_DIR, 'soak-after.heapsnapshot'));

  const report = [
    `# Gateway soak (${new Date().toISOString().slice(0, 10)}, ${os.cpus().length} cores)`,
    '',
    `${rounds} × ${count} memory sessions started, checkpointed and stopped through the gateway, ${concurrency} at a time, in ${seconds.toFixed(0)} s.`,
    '',
    table(['', 'RSS', 'main heap used', 'main heap committed', 'external + array buffers'], rows),
    '',
  ].join('\n');
  console.log(report);
  fs.writeFileSync(path.join(RESULTS_DIR, 'gateway-soak.md'), report);
}

runWithCleanup('gateway soak', main);
