/** The scale benchmark's Markdown report: targets as ratios against baselines of the same run, then the detail. */
import { table } from '../markdown';
import type { BareResult } from './bare-scenario';
import type { FleetHealth } from './fleet-health';
import { percentile, type Calls } from './load';
import { SETTLE_LIMIT_MS, type ScaleOptions } from './scenario';
import type { SessionResult } from './session-scenario';
import type { ContextCost } from './workflow-context';

const MiB = 1024 * 1024;
/** The sessions one worker must hold idle within `rssAtTarget`. */
export const TARGET_SESSIONS = 10_000;

export interface Targets {
  lifecycleRatio: number;
  /** Worker RSS with TARGET_SESSIONS idle running sessions. */
  rssAtTarget: number;
  mibPerSessionAboveBare: number;
  idleCpuShare: number;
  openFiles: number;
}

export const TARGETS: Targets = {
  lifecycleRatio: 1.5,
  rssAtTarget: 2 * 1024 * MiB,
  mibPerSessionAboveBare: 0.5,
  idleCpuShare: 0.05,
  openFiles: 512,
};

const seconds = (ms: number) => `${(ms / 1_000).toFixed(1)} s`;
const pct = (share: number) => `${(share * 100).toFixed(1)} %`;
/** How long the server took to settle before an idle window, or that it never did. */
const settled = (seconds: number) =>
  seconds * 1_000 >= SETTLE_LIMIT_MS ? `${seconds.toFixed(0)} s, not settled` : `${seconds.toFixed(0)} s to settle`;
const mib = (bytes: number) => `${(bytes / MiB).toFixed(3)} MiB`;
const ms = (v: number) => (Number.isNaN(v) ? '—' : v < 10 ? `${v.toFixed(1)} ms` : `${v.toFixed(0)} ms`);
const ratio = (a: number, b: number) => (b > 0 ? `${(a / b).toFixed(2)}×` : '—');
const sum = (rates: [string, number][]) => rates.reduce((a, [, r]) => a + r, 0);
const verdict = (ok: boolean) => (ok ? 'PASS' : '**MISS**');
const gib = (bytes: number) => `${(bytes / 1024 ** 3).toFixed(2)} GiB`;

/**
 * The worker's RSS with TARGET_SESSIONS idle: measured when the run started that many. Otherwise projected for a
 * cache of `cache`: the first half's slope (every session cached while the run's cache holds N/2) for the cached ones,
 * the second half's (the cache full, each new session evicting one) for the rest.
 */
function rssAtTarget(
  r: { memory: BareResult['memory'] },
  n: number,
  cache: number,
): { bytes: number; projected: boolean; cached: number; evicted: number } {
  const half = Math.floor(n / 2);
  const cached = (r.memory.half.rss - r.memory.empty.rss) / half;
  const evicted = perSessionSecondHalf(r, n);
  if (n >= TARGET_SESSIONS) return { bytes: r.memory.loaded.rss, projected: false, cached, evicted };
  const held = Math.min(cache, TARGET_SESSIONS);
  const bytes = r.memory.empty.rss + held * cached + (TARGET_SESSIONS - held) * evicted;
  return { bytes, projected: true, cached, evicted };
}

function latency(calls: Calls, names?: string[]): string {
  const all = calls.all(names);
  return all.length ? `${ms(percentile(all, 50))} / ${ms(percentile(all, 99))}` : '—';
}

/** RSS or heap growth per running workflow: from the worker with nothing running to the same worker with N idle. */
function perSession(r: { memory: BareResult['memory'] }, n: number, key: 'rss' | 'heapUsed'): number {
  return (r.memory.loaded[key] - r.memory.empty[key]) / n;
}

/** The same, over the second half of the starts only: the marginal cost, the worker's one-off costs paid. */
function perSessionSecondHalf(r: { memory: BareResult['memory'] }, n: number): number {
  return (r.memory.loaded.rss - r.memory.half.rss) / (n - Math.floor(n / 2));
}

const perPhase = ({ memory: m }: { memory: BareResult['memory'] }, key: 'loopDelayMaxMs' | 'workflowCallMaxMs') =>
  [m.empty, m.half, m.loaded, m.after].map((s) => phaseMs(key, s[key])).join(' · ');
// The workflow threads post only calls of 50 ms or more: 0 is none of them, not a call of no time.
const phaseMs = (key: 'loopDelayMaxMs' | 'workflowCallMaxMs', v: number) =>
  key === 'workflowCallMaxMs' && v === 0 ? '< 50 ms' : ms(v);
const serverLag = ({ serverLag: l }: { serverLag: BareResult['serverLag'] }) =>
  [l.quantileMs, l.maxMs].map((v) => (Number.isFinite(v) ? ms(v) : 'over the last bound')).join(' · ');
const topRequests = (requests: [string, number][], unit = '/s', count = 4) =>
  requests
    .slice(0, count)
    .map(([op, rate]) => `${op} ${rate.toFixed(1)}${unit}`)
    .join(', ') || 'none';

/** One thread's cost per workflow it creates: the session bundle as built, the same without shared modules, bare. */
export interface ContextCosts {
  count: number;
  sessions: ContextCost;
  unshared: ContextCost;
  bare: ContextCost;
}

export function report(
  options: ScaleOptions,
  sessions: SessionResult,
  bare: BareResult,
  machine: string,
  contexts: ContextCosts,
  fleet: FleetHealth | string,
): string {
  const n = options.sessions;
  const c = options.concurrency;
  const total = sessions.startMs + sessions.controlsMs;
  const bareTotal = bare.startMs + bare.controlsMs;
  const errors = sessions.calls.errors.length;
  const lifecycleOk = errors === 0 && total / bareTotal <= TARGETS.lifecycleRatio;

  const rss = perSession(sessions, n, 'rss');
  const bareRss = perSession(bare, n, 'rss');
  const above = rss - bareRss;
  const heap = perSession(sessions, n, 'heapUsed');
  const bareHeap = perSession(bare, n, 'heapUsed');

  const idle = sessions.idle.workerCpu + sessions.idle.serverCpu;
  const bareIdle = bare.idle.workerCpu + bare.idle.serverCpu;
  const ws = sessions.workspace;
  const peakFiles = Math.max(ws.openFiles.starting, ws.openFiles.checkpoints);
  const checkpointsInFlight = Math.min(c, ws.sessions);
  const workers = options.workers === 1 ? 'worker' : `${options.workers} workers`;
  /** Each worker's RSS at the three samples, `a · b · c` per worker. */
  const eachWorker = (r: { memory: BareResult['memory'] }) =>
    r.memory.empty.perWorker
      .map((empty, i) =>
        [empty, r.memory.loaded.perWorker[i]!, r.memory.after.perWorker[i]!].map((m) => mib(m.rss)).join(' · '),
      )
      .join('; ');

  const atTarget = rssAtTarget(sessions, n, options.projectedCache);
  // The bare worker keeps the SDK's default cache (thousands): all of its workflows stay cached.
  const bareAtTarget = rssAtTarget(bare, n, TARGET_SESSIONS);
  const cache = options.maxCachedWorkflows;
  const evictedNote = cache >= n ? ` (the cache holds ${cache} ≥ ${n}: none evicted)` : '';
  const p50 = (calls: Calls) => percentile(calls.all(), 50);
  const targets = table(
    ['measure', 'sessions', 'baseline (same run, same server)', 'ratio', 'target', 'result'],
    [
      [
        `${n} memory sessions on ${options.workers === 1 ? 'one worker' : workers}, ${options.store} store: ` +
          `start, checkpoint, pause, resume, stop (${c} in flight), wall time`,
        `${seconds(total)}, ${errors} errors`,
        `bare workflow, same updates, one no-op activity each (${workers}): ${seconds(bareTotal)}, ` +
          `${bare.calls.errors.length} errors`,
        ratio(total, bareTotal),
        `≤ ${TARGETS.lifecycleRatio}×, 0 errors`,
        verdict(lifecycleOk),
      ],
      [
        '… against the cheapest workflow',
        seconds(total),
        `bare start + signal + complete: ${seconds(bare.signalMs)}`,
        ratio(total, bare.signalMs),
        '—',
        '—',
      ],
      [
        `${workers} RSS per idle running session (${n} running − none)`,
        mib(rss),
        `bare worker, per idle bare workflow: ${mib(bareRss)}`,
        `${mib(above)} above`,
        `≤ ${TARGETS.mibPerSessionAboveBare} MiB above`,
        verdict(above <= TARGETS.mibPerSessionAboveBare * MiB),
      ],
      [
        `${workers} RSS with ${TARGET_SESSIONS.toLocaleString('en')} idle running sessions` +
          (atTarget.projected
            ? ` (projected for a cache of ${options.projectedCache}: RSS with none + ${mib(atTarget.cached)} per ` +
              `cached session, first half of the starts + ${mib(atTarget.evicted)} per evicted one, second half)`
            : `, workflow cache ${cache}`),
        gib(atTarget.bytes),
        `bare worker, every workflow cached: ${gib(bareAtTarget.bytes)}`,
        ratio(atTarget.bytes, bareAtTarget.bytes),
        `≤ ${gib(TARGETS.rssAtTarget)}`,
        verdict(atTarget.bytes <= TARGETS.rssAtTarget),
      ],
      [
        `a checkpoint of an idle session, one at a time: ${sessions.probes.probed} evicted (oldest) vs ` +
          `${sessions.probes.probed} cached (newest) p50 / p99${evictedNote}`,
        `evicted ${latency(sessions.probes.evicted)} · cached ${latency(sessions.probes.cached)}`,
        `bare, oldest · newest: ${latency(bare.probes.evicted)} · ${latency(bare.probes.cached)}`,
        `${ratio(p50(sessions.probes.evicted), p50(sessions.probes.cached))} (p50s)`,
        '—',
        '—',
      ],
      [
        '… V8 heap used per idle running session',
        mib(heap),
        `bare: ${mib(bareHeap)}`,
        `${mib(heap - bareHeap)} above`,
        '—',
        '—',
      ],
      [
        `CPU of worker + server, ${n} sessions idle for ${sessions.idle.seconds.toFixed(0)} s, after ` +
          `${settled(sessions.idle.settleSeconds)} (bare ${settled(bare.idle.settleSeconds)}) (% of one core)`,
        `${pct(sessions.idle.workerCpu)} + ${pct(sessions.idle.serverCpu)} = ${pct(idle)}`,
        `bare, ${n} idle: ${pct(bare.idle.workerCpu)} + ${pct(bare.idle.serverCpu)} = ${pct(bareIdle)}`,
        ratio(idle, bareIdle),
        `≤ ${pct(TARGETS.idleCpuShare)}`,
        verdict(idle <= TARGETS.idleCpuShare),
      ],
      [
        `peak open files of the ${options.workers === 1 ? 'worker' : 'busiest worker'}, ${ws.sessions} workspace ` +
          `sessions, ${checkpointsInFlight} checkpoints in flight`,
        `${peakFiles} (starting ${ws.openFiles.starting}, checkpoints ${ws.openFiles.checkpoints})`,
        `same worker, nothing running: ${ws.openFiles.empty}; bare worker: ${bare.openFiles.peak}`,
        ratio(peakFiles, ws.openFiles.empty),
        `< ${TARGETS.openFiles}`,
        verdict(ws.calls.errors.length === 0 && peakFiles < TARGETS.openFiles),
      ],
    ],
  );

  const controls = ['checkpoint', 'pause', 'resume', 'stop'];
  const kib = (bytes: number) => `${(bytes / 1024).toFixed(0)} KiB`;
  const context = (c: ContextCost) => `${kib(c.heapPerWorkflow)}, ${ms(c.createMs)}, ${kib(c.heldAfterDispose)} in all`;
  const detail = table(
    ['', 'sessions', 'bare (same updates)', 'bare (start + signal + complete)'],
    [
      [
        `a workflow's own context: heap held while cached, time to create, heap still held once all were disposed ` +
          `of (${contexts.count} in one thread, no server; sessions without shared modules: ` +
          `${context(contexts.unshared)})`,
        context(contexts.sessions),
        context(contexts.bare),
        '—',
      ],
      [
        'workflows/s through the whole lifecycle',
        (n / (total / 1_000)).toFixed(1),
        (n / (bareTotal / 1_000)).toFixed(1),
        (n / (bare.signalMs / 1_000)).toFixed(1),
      ],
      [
        'starts: wall time · per second',
        `${seconds(sessions.startMs)} · ${(n / (sessions.startMs / 1_000)).toFixed(1)}`,
        `${seconds(bare.startMs)} · ${(n / (bare.startMs / 1_000)).toFixed(1)}`,
        '—',
      ],
      [
        'start latency p50 / p99',
        latency(sessions.calls, ['start']),
        latency(bare.calls, ['start']),
        latency(bare.signalCalls, ['start']),
      ],
      ...controls.map((name) => [
        `${name} latency p50 / p99`,
        latency(sessions.calls, [name]),
        latency(bare.calls, [name]),
        '—',
      ]),
      [
        'every control, p50 / p99',
        latency(sessions.calls, controls),
        latency(bare.calls, controls),
        latency(bare.signalCalls, ['signal', 'result']),
      ],
      [
        'worker RSS: nothing running · N idle · all stopped',
        `${mib(sessions.memory.empty.rss)} · ${mib(sessions.memory.loaded.rss)} · ${mib(sessions.memory.after.rss)}`,
        `${mib(bare.memory.empty.rss)} · ${mib(bare.memory.loaded.rss)} · ${mib(bare.memory.after.rss)}`,
        '—',
      ],
      ...(options.workers > 1
        ? [['RSS of each worker: nothing running · N idle · all stopped', eachWorker(sessions), eachWorker(bare), '—']]
        : []),
      [
        "worker's longest event-loop delay: warm-up · first half of the starts · second half · idle and controls",
        perPhase(sessions, 'loopDelayMaxMs'),
        perPhase(bare, 'loopDelayMaxMs'),
        '—',
      ],
      [
        // The SDK cuts a call at its isolateExecutionTimeout; cut while its microtasks run, it ends the process.
        'longest call into a workflow (any workflow thread), the same phases',
        perPhase(sessions, 'workflowCallMaxMs'),
        perPhase(bare, 'workflowCallMaxMs'),
        '—',
      ],
      [
        'worker RSS per session, second half of the starts only',
        mib(perSessionSecondHalf(sessions, n)),
        mib(perSessionSecondHalf(bare, n)),
        '—',
      ],
      [
        'server requests per workflow, start to stop (frontend, busiest)',
        topRequests(sessions.requestsPerWorkflow, '', 6),
        topRequests(bare.requestsPerWorkflow, '', 6),
        '—',
      ],
      [
        "server's history task lag, starts to last control: p99 · highest (bucket bounds)",
        serverLag(sessions),
        serverLag(bare),
        '—',
      ],
      [
        'server requests per workflow, all operations',
        sum(sessions.requestsPerWorkflow).toFixed(1),
        sum(bare.requestsPerWorkflow).toFixed(1),
        '—',
      ],
      [
        'server requests/s while idle (frontend, busiest)',
        topRequests(sessions.idle.requests),
        topRequests(bare.idle.requests),
        '—',
      ],
      [
        'the fleet directory · the host monitors: runs, workflow tasks timed out (of them not picked up from the ' +
          'sticky queue), failed; leases timed out, the largest lease asked for; questions to the hosts, ' +
          'not picked up (and their controls); sessions told',
        typeof fleet === 'string'
          ? `not read: ${fleet}`
          : `directory ${fleet.runs.directory} run(s), ${fleet.taskTimeouts.directory} timed out ` +
            `(${fleet.stickyTimeouts.directory} sticky), ${fleet.taskFailures.directory} failed · monitors ` +
            `${fleet.runs.monitors} run(s), ${fleet.taskTimeouts.monitors} timed out ` +
            `(${fleet.stickyTimeouts.monitors} sticky), ${fleet.taskFailures.monitors} failed; ` +
            `${fleet.leaseTimeouts} leases timed out${kinds(fleet.leaseTimeoutKinds)}, ` +
            `largest ${kib(fleet.largestLeaseBytes)}; ${fleet.questions.asked} questions, ` +
            `${fleet.questions.unpicked} not picked up (${fleet.questions.controlsUnpicked} controls not either); ` +
            `${fleet.told.told} sessions told in ${fleet.told.batches} batches, ${fleet.told.gone} already ended`,
        '—',
        '—',
      ],
      [
        'peak open files of the worker while the N ran',
        String(sessions.openFiles.peak),
        String(bare.openFiles.peak),
        '—',
      ],
      [
        `${ws.sessions} workspace sessions: start p50 / p99 · checkpoint p50 / p99 · checkpoints wall`,
        `${latency(ws.calls, ['start'])} · ${latency(ws.calls, ['checkpoint'])} · ${seconds(ws.checkpointsMs)}`,
        '—',
        '—',
      ],
    ],
  );

  const failures = [
    ...sessions.probes.cached.errors,
    ...sessions.probes.evicted.errors,
    ...sessions.calls.errors,
    ...ws.calls.errors,
    ...bare.calls.errors,
    ...bare.signalCalls.errors,
  ];
  return [
    '# durable-sessions scale benchmark',
    '',
    `${new Date().toISOString()} · ${n} sessions, ${ws.sessions} workspace sessions, ${c} in flight, ` +
      `idle window ${options.idleSeconds} s, ${options.warmup} warm-up lifecycles per scenario, ${workers} ` +
      `caching ${options.maxCachedWorkflows} workflows, ` +
      `${options.store === 's3' ? 'S3 store (versitygw)' : 'local store'}`,
    '',
    targets,
    '',
    detail,
    '',
    failures.length
      ? `Errors (first 5 of ${failures.length}):\n\n${failures
          .slice(0, 5)
          .map((e) => `- ${e}`)
          .join('\n')}\n`
      : 'No errors.',
    '',
    `Machine: ${machine}`,
    '',
  ].join('\n');
}

/** ` (HEARTBEAT 2, …)`, or nothing when there were none. */
function kinds(counts: Record<string, number>): string {
  const parts = Object.entries(counts).map(([kind, n]) => `${kind} ${n}`);
  return parts.length ? ` (${parts.join(', ')})` : '';
}
