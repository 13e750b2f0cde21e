/**
 * A long session: many fire-and-forget checkpoints from four senders, across as many continue-as-new hand-overs as
 * the server suggests, then the whole timeline paged through. What must stay bounded however long the session runs is
 * sampled as it goes: the history of each run, the state each run hands to the next, and the worker's memory.
 *
 *   npx tsx bench/controls/long-session.ts --checkpoints 100000    # the long session alone
 */
import { performance } from 'node:perf_hooks';
import { checkpointSignal, sessionWorkflowId } from '../../src/api';
import { SessionError } from '../../src/client';
import { timed } from './stats';
import type { ControlsSystem } from './system';

/** One sample of the quantities that must stay bounded, taken while the signals go in. */
export interface LongSample {
  checkpoints: number;
  seconds: number;
  /** Checkpoints a second since the sample before. */
  rate: number;
  runs: number;
  /** The running run's history length (events). */
  history: number;
  /** Resident set and V8 heap of this process, which runs the workers (MiB). */
  rssMiB: number;
  heapMiB: number;
}

export interface LongSession {
  checkpoints: number;
  ms: number;
  runs: number;
  /** Runs the server lists for the workflow id (should be `runs`). */
  listedRuns: number;
  longestHistory: number;
  /** The state each run was handed (its start input, bytes): first, largest, last. */
  carried: { first: number; max: number; last: number };
  samples: LongSample[];
  /** Timeline pages (1,000 entries each) read, entries in them, checkpoints among them, indices dense. */
  pages: number;
  entries: number;
  checkpointEntries: number;
  dense: boolean;
  pagingMs: number;
  /** The slowest page read: a timeline paged end to end costs the same per page however long it is. */
  slowestPageMs: number;
  /** The sampler's status() calls: how many, the slowest answer, and those not answered in time (asked again). */
  status: { calls: number; slowestMs: number; unanswered: number };
}

const SENDERS = 4;
/** Signals sent and not yet counted, at most. */
const AHEAD = 200;
/** Samples over the run. */
const SAMPLES = 10;

const mib = (bytes: number) => bytes / 1024 ** 2;

export async function measureLongSession(sys: ControlsSystem, checkpoints: number): Promise<LongSession> {
  const sessionId = `long-${sys.runId}`;
  const session = await sys.sessions.start({ sessionId, runtime: { kind: 'memory', initialState: 'x' } });
  const perSender = Math.ceil(checkpoints / SENDERS);
  const samples: LongSample[] = [];
  let counted = 0;
  const started = performance.now();
  let sampling = true;
  const statusCalls = { calls: 0, slowestMs: 0, unanswered: 0 };
  // A status that no worker answered in time is counted and asked again, as a caller would (the error is retryable).
  const askStatus = async () => {
    for (;;) {
      const asked = performance.now();
      statusCalls.calls++;
      try {
        return await session.status();
      } catch (err) {
        if (!(err instanceof SessionError && err.retryable)) throw err;
        statusCalls.unanswered++;
      } finally {
        statusCalls.slowestMs = Math.max(statusCalls.slowestMs, performance.now() - asked);
      }
    }
  };
  const sampler = (async () => {
    let last = { checkpoints: 0, at: started };
    const every = Math.max(1, Math.floor(checkpoints / SAMPLES));
    while (sampling) {
      const status = await askStatus();
      counted = status.checkpointCount;
      if (status.checkpointCount >= last.checkpoints + every || status.checkpointCount >= checkpoints) {
        const at = performance.now();
        const { historyLength } = await session.workflow.describe();
        const memory = process.memoryUsage();
        samples.push({
          checkpoints: status.checkpointCount,
          seconds: (at - started) / 1000,
          rate: (status.checkpointCount - last.checkpoints) / ((at - last.at) / 1000),
          runs: status.runs,
          history: historyLength,
          rssMiB: mib(memory.rss),
          heapMiB: mib(memory.heapUsed),
        });
        last = { checkpoints: status.checkpointCount, at };
        if (status.checkpointCount >= checkpoints) return;
      }
      await new Promise((r) => setTimeout(r, 200));
    }
  })();
  // Senders stay at most AHEAD signals ahead of the session: a backlog without bound would be state without bound
  // (signals waiting for their turn are carried to the next run), which is the sender's doing, not the session's.
  let sentCount = 0;
  const sent = await timed(async () => {
    await Promise.all(
      Array.from({ length: SENDERS }, async (_, s) => {
        for (let n = s * perSender; n < Math.min(checkpoints, (s + 1) * perSender); n++) {
          // The sampler's reads of the count let them go on.
          while (sentCount - counted >= AHEAD) await new Promise((r) => setTimeout(r, 50));
          sentCount++;
          await session.workflow.signal(checkpointSignal, {});
        }
      }),
    );
    while ((await askStatus()).checkpointCount < checkpoints) await new Promise((r) => setTimeout(r, 20));
  });
  sampling = false;
  await sampler;
  const { runs } = await askStatus();
  let listedRuns = 0;
  let longestHistory = 0;
  const carriedBytes: { at: number; bytes: number }[] = [];
  const { workflowService } = sys.client;
  for await (const wf of sys.client.workflow.list({ query: `WorkflowId = '${sessionWorkflowId(sessionId)}'` })) {
    listedRuns++;
    longestHistory = Math.max(longestHistory, wf.historyLength);
    // The first event holds the run's input: the state the run before handed over.
    const { history } = await workflowService.getWorkflowExecutionHistory({
      namespace: 'default',
      execution: { workflowId: wf.workflowId, runId: wf.runId },
      maximumPageSize: 1,
    });
    const input = history?.events?.[0]?.workflowExecutionStartedEventAttributes?.input?.payloads ?? [];
    const bytes = input.reduce((n, p) => n + (p.data?.length ?? 0), 0);
    carriedBytes.push({ at: wf.startTime.getTime(), bytes });
  }
  carriedBytes.sort((a, b) => a.at - b.at);
  // Visibility has the length of closed runs; the running one's is the server's own count.
  longestHistory = Math.max(longestHistory, (await session.workflow.describe()).historyLength);

  let pages = 0;
  let entries = 0;
  let checkpointEntries = 0;
  let dense = true;
  let slowestPageMs = 0;
  const paging = await timed(async () => {
    let from: number | null = 1;
    while (from !== null) {
      const page = await timed(() => session.timelinePage({ from: from!, limit: 1000 }));
      slowestPageMs = Math.max(slowestPageMs, page.ms);
      pages++;
      for (const e of page.value.entries) {
        if (e.index !== ++entries) dense = false;
        if (e.kind === 'checkpoint') checkpointEntries++;
      }
      from = page.value.next;
    }
  });
  await session.stop({ checkpoint: false });
  return {
    checkpoints,
    ms: sent.ms,
    runs,
    listedRuns,
    longestHistory,
    carried: {
      first: carriedBytes[0]?.bytes ?? 0,
      max: Math.max(0, ...carriedBytes.map((c) => c.bytes)),
      last: carriedBytes.at(-1)?.bytes ?? 0,
    },
    samples,
    pages,
    entries,
    checkpointEntries,
    dense,
    pagingMs: paging.ms,
    slowestPageMs,
    status: statusCalls,
  };
}

/** The long session's rows of the report. */
export function longSessionReport(long: LongSession): string[] {
  const int = (n: number) => Math.round(n).toLocaleString('en-US');
  const s = long.samples;
  const first = s[0];
  const last = s.at(-1);
  return [
    `## Long session (${int(long.checkpoints)} requestCheckpoint signals from ${SENDERS} senders)`,
    '',
    '| measure | value |',
    '|---|---|',
    `| total time (first signal → all counted) | ${(long.ms / 1000).toFixed(1)} s |`,
    `| checkpoints/s | ${(long.checkpoints / (long.ms / 1000)).toFixed(1)} (target ≥ 20: ${
      long.checkpoints / (long.ms / 1000) >= 20 ? 'PASS' : '**MISS**'
    }) |`,
    `| runs (status().runs; runs listed by the server) | ${long.runs}; ${long.listedRuns} |`,
    `| longest run history (events) | ${int(long.longestHistory)} |`,
    `| state handed to a run (bytes): first, largest, last | ${int(long.carried.first)}, ${int(long.carried.max)}, ${int(long.carried.last)} |`,
    `| worker RSS (MiB): first sample, largest, last | ${first ? `${first.rssMiB.toFixed(0)}, ${Math.max(...s.map((x) => x.rssMiB)).toFixed(0)}, ${last!.rssMiB.toFixed(0)}` : '—'} |`,
    `| status() while it ran: calls, slowest answer, not answered within the client's wait (asked again) | ${int(long.status.calls)}, ${(long.status.slowestMs / 1000).toFixed(2)} s, ${long.status.unanswered} |`,
    `| timelinePage() through everything (1,000 a page) | ${long.pages} pages, ${int(long.entries)} entries, ${int(
      long.checkpointEntries,
    )} checkpoints, indices ${long.dense ? 'dense' : '**not dense**'}, ${(long.pagingMs / 1000).toFixed(2)} s (slowest page ${long.slowestPageMs.toFixed(0)} ms) |`,
    '',
    'As it went (each row a sample; the rate is since the row before):',
    '',
    '| checkpoints | s | checkpoints/s | runs | running run history | RSS MiB | heap MiB |',
    '|---:|---:|---:|---:|---:|---:|---:|',
    ...s.map(
      (x) =>
        `| ${int(x.checkpoints)} | ${x.seconds.toFixed(0)} | ${x.rate.toFixed(1)} | ${x.runs} | ${int(x.history)} | ${x.rssMiB.toFixed(0)} | ${x.heapMiB.toFixed(0)} |`,
    ),
    '',
  ];
}

if (require.main === module) {
  // Only for the command line: the controls bench imports the measurement alone.
  void (async () => {
    const fs = await import('node:fs');
    const os = await import('node:os');
    const path = await import('node:path');
    const { parseArgs } = await import('node:util');
    const { DefaultLogger, Runtime } = await import('@temporalio/worker');
    const { runWithCleanup } = await import('../sessions/cleanup');
    const { startControlsSystem } = await import('./system');
    const { values } = parseArgs({
      options: {
        checkpoints: { type: 'string', default: '100000' },
        'suggest-at': { type: 'string', default: '4096' },
      },
    });
    const checkpoints = Number(values.checkpoints);
    runWithCleanup('long session', async (cleanup) => {
      Runtime.install({ logger: new DefaultLogger('WARN'), shutdownSignals: [] });
      const base = fs.existsSync('/dev/shm') ? '/dev/shm' : os.tmpdir();
      const root = fs.mkdtempSync(path.join(base, 'ds-long-'));
      cleanup.add('temp dir', () => fs.promises.rm(root, { recursive: true, force: true }));
      const sys = await startControlsSystem(root, Number(values['suggest-at']), cleanup);
      console.log(`long session: ${checkpoints.toLocaleString('en-US')} checkpoints, store under ${root}`);
      const long = await measureLongSession(sys, checkpoints);
      const load = os
        .loadavg()
        .map((l) => l.toFixed(2))
        .join(' ');
      const markdown = [`${new Date().toISOString()}, load average at the end ${load}`, '', ...longSessionReport(long)];
      console.log(markdown.join('\n'));
      const out = path.resolve(__dirname, '..', '..', '.bench', 'long-session.md');
      fs.mkdirSync(path.dirname(out), { recursive: true });
      fs.writeFileSync(out, markdown.join('\n'));
    });
  })();
}
