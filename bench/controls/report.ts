/** The controls bench's Markdown report. */
import { SERVER_DYNAMIC_CONFIG } from '../../src/dev-server';
import { table } from '../markdown';
import type { EventsPer } from './history';
import type { LargeFork } from './large-fork';
import type { LatencyResults } from './latency';
import { longSessionReport, type LongSession } from './long-session';
import type { ControlsOptions } from './options';
import type { Latency } from './stats';

export interface ControlsResults {
  options: ControlsOptions;
  machine: string;
  storeDir: string;
  latency: LatencyResults;
  history: EventsPer[];
  large: LargeFork[];
  long: LongSession;
  totalMs: number;
}

const ms = (n: number): string => (n >= 1000 ? `${(n / 1000).toFixed(2)} s` : `${n.toFixed(1)} ms`);
const ratio = (n: number): string => `${n.toFixed(2)}×`;
const int = (n: number): string => Math.round(n).toLocaleString('en-US');

function latencyRows(l: LatencyResults): string[][] {
  const bare = l.bare.p50;
  const floor = l.bareActivity.p50;
  const row = (name: string, x: Latency, target?: number): string[] => [
    name,
    String(x.runs),
    ms(x.p50),
    ms(x.p99),
    ratio(x.p50 / bare),
    ratio(x.p50 / floor),
    target === undefined ? '—' : `p50 ≤ ${target}× floor`,
    target === undefined ? '—' : x.p50 / floor <= target ? 'PASS' : '**MISS**',
  ];
  // Pause then resume, timed as one: each pause's p50 plus each resume's is near enough for a p50.
  const pauseResume: Latency = {
    runs: l.pause.runs,
    p50: l.pause.p50 + l.resume.p50,
    p99: l.pause.p99 + l.resume.p99,
    min: l.pause.min + l.resume.min,
    max: l.pause.max + l.resume.max,
  };
  return [
    row('bare no-op update (baseline)', l.bare),
    row('bare update running one no-op activity (the floor)', l.bareActivity),
    row('checkpoint', l.checkpoint, 1.5),
    row('pause (of pause → resume)', l.pause),
    row('resume (of pause → resume)', l.resume),
    row('pause + resume (sum of the p50s)', pauseResume, 3),
    row('rewind to the newest checkpoint, running', l.rewind, 3),
    row('fork({ from, paused: true })', l.forkPaused, 2),
    row('fork({ from }) until the fork runs', l.forkRunning),
  ];
}

export function report(r: ControlsResults): string {
  const { options: o, latency, long } = r;
  // The server's queue poll rate bounds every step of a control: the report names what it ran with.
  const serverConfig = () =>
    Object.entries(SERVER_DYNAMIC_CONFIG)
      .map(([key, value]) => `${key}=${value}`)
      .join(', ');
  const [small, big] = [...r.large].sort((a, b) => a.mib - b.mib);
  const lines = [
    `# Controls benchmark`,
    '',
    `${new Date().toISOString().slice(0, 10)}, ${r.machine}. ${o.quick ? '`--quick`' : 'Defaults'}: ${o.runs} runs ` +
      `per control, large state ${o.largeMiB} MiB, ${int(o.checkpoints)} long-session checkpoints, one dev server ` +
      `with suggestContinueAsNew=${o.suggestAt} and ${serverConfig()}. Store (chunked, AES-256-GCM): ${r.storeDir}. ` +
      `Whole run ${ms(r.totalMs)}.`,
    '',
    `## Round trips (small memory session, ${latency.sessionRuns} workflow run(s) by the end)`,
    '',
    'Ratios are against the p50 of the bare update and of the floor (a bare update that runs one no-op activity, ' +
      `${ratio(latency.bareActivity.p50 / latency.bare.p50)} the bare update), measured in the same run on the same ` +
      'server; targets are against the floor.',
    '',
    table(
      ['control', 'runs', 'p50', 'p99', 'p50 ÷ bare p50', 'p50 ÷ floor p50', 'target', 'result'],
      latencyRows(latency),
    ),
    '',
    '## History events per control',
    '',
    table(
      ['control', 'times', 'events', 'events each', 'same run', 'activities each (mean scheduled → completed)'],
      r.history.map((h) => [
        h.control,
        String(h.times),
        String(h.events),
        (h.events / h.times).toFixed(1),
        h.sameRun ? 'yes' : 'no (continue-as-new: ignore)',
        h.activities.map((a) => `${a.name} ×${a.perControl.toFixed(1)} (${ms(a.meanMs)})`).join(', ') || '—',
      ]),
    ),
    '',
    'Event kinds added, per control:',
    '',
    ...r.history.map(
      (h) => `- ${h.control}: ${h.kinds.map(([k, n]) => `${k} ${(n / h.times).toFixed(1)}`).join(', ')}`,
    ),
    '',
    '## Fork into 10 (paused), from one checkpoint of the whole state',
    '',
    table(
      ['state', 'checkpoint of the state', 'fork into 10', 'forks made', 'target'],
      r.large.map((l) => [
        `${int(l.mib)} MiB`,
        ms(l.checkpointMs),
        ms(l.forkMs),
        String(l.forks),
        '≤ 1 s, independent of size',
      ]),
    ),
    '',
    small && big
      ? `Fork time ${int(big.mib)} MiB ÷ ${int(small.mib)} MiB: ${ratio(big.forkMs / small.forkMs)} ` +
        `(${big.forkMs <= 1000 && small.forkMs <= 1000 ? 'PASS' : '**MISS**'} for ≤ 1 s at both sizes).`
      : '',
    '',
    ...longSessionReport(long),
  ];
  return lines.join('\n');
}
