/** The Markdown report: the table against the baselines, where the time goes, the checks, the machine. */
import { table } from '../markdown';
import type { Baselines } from './baselines';
import { fmtMiB, fmtMiBps, fmtMs, fmtSigned, median, mibps, ratio, spread, throughput } from './format';
import type { Machine } from './machine';
import type { Options } from './options';
import type { OpName, OpRecord } from './records';
import type { RoundCheck } from './session-round';
import { blobSizes, COMMAND, SMALL_FILES } from './workload';

/** A probe event, the first of several that happened, or null: the call (as a start) or its return (as an end). */
type Events = string | string[] | null;

/** Median of the spans between two probe events. */
function phaseSpan(records: OpRecord[], from: Events, to: Events): string {
  const at = (r: OpRecord, events: Events, none: number): number | undefined => {
    if (events === null) return none;
    for (const name of typeof events === 'string' ? [events] : events) if (r.at[name] !== undefined) return r.at[name];
    return undefined;
  };
  const spans: number[] = [];
  for (const r of records) {
    const start = at(r, from, 0);
    const end = at(r, to, r.ms);
    if (start !== undefined && end !== undefined) spans.push(end - start);
  }
  return spans.length ? fmtMs(median(spans)) : '—';
}

export function report(
  options: Options,
  machine: Machine,
  b: Baselines,
  records: OpRecord[],
  checks: RoundCheck[],
): string {
  const stateBytes = median(byOp(records, 'checkpoint').map((r) => r.bytes));
  const rssBefore = median(records.map((r) => r.rssBefore));
  const checkLines = checks.map(
    (c) =>
      `- round ${c.round}: restored pid alive ${c.pidAlive}, cwd = restored dir ${c.cwdMatches}, old pid gone ${c.oldPidGone}, ` +
      `state after checkpoint ${c.stateAfterCheckpoint ?? 'gone'}, tree sha256 ${c.original.sha256 === c.restored.sha256 ? 'equal' : 'DIFFERENT'} ` +
      `(${c.restored.files} files, ${c.restored.bytes} bytes)`,
  );

  return [
    `# durable-sessions benchmark`,
    '',
    `${new Date().toISOString()} · workspace ${options.sizeMiB} MiB: ${blobSizes(options).length} random files + ` +
      `${Object.keys(SMALL_FILES).length} small text files · checkpoint size ${stateBytes} bytes · ${options.rounds} rounds ` +
      `(one session each) · command \`${COMMAND.join(' ')}\``,
    '',
    table(['metric', 'value: median (min–max)', 'baseline', 'ratio'], summaryRows(b, records, checks, stateBytes)),
    '',
    'ratio = engine throughput ÷ baseline throughput at the same byte count (= baseline time ÷ engine time); ' +
      '1.00× runs at the baseline, 0.50× takes twice as long. The workspace files are in the page cache when ' +
      'captured (written and fsynced just before), and the checkpoint is in the page cache when restored. ' +
      `RSS is of this process, which also runs the workers; it was ${fmtMiB(rssBefore)} before an operation (median).`,
    '',
    '## Where the time goes (medians, from the probes around the runtime and the store)',
    '',
    table(
      ['span', 'checkpoint', 'checkpoint after resume', 'pause', 'resume', 'capture alone¹', 'restore alone¹'],
      breakdownRows(records, stateBytes, machine.cores),
    ),
    '',
    "¹ The engine's data path without Temporal, in the same process: `WorkspaceRuntime.capture` → " +
      '`ChunkedSnapshotStore.write`, and `ChunkedSnapshotStore.open` → `WorkspaceRuntime.restore`, called directly (no ' +
      'activity, so no heartbeat per chunk), on a session seeded the same way.',
    '',
    '## Freeze: pre-copy against a freeze for the whole capture',
    '',
    table(['metric', 'with pre-copy', 'without (baseline, same run)', 'target', 'result'], freezeRows(records)),
    '',
    'Without Temporal, each a first checkpoint (no base) on the same seed: `captureState` → `ChunkedSnapshotStore.write`. ' +
      '"Without" is the runtime with `precopy: false`, which freezes the process for the whole capture (what every ' +
      'capture did before pre-copy). "1 % changed" rewrites 1 % of the bytes in place between the pre-copy and the ' +
      'freeze (for the baseline: just before its capture). Frozen = SIGSTOP sent → SIGCONT sent.',
    '',
    '## Checks',
    '',
    ...checkLines,
    '',
    '## Machine',
    '',
    `- CPU: ${machine.cpu} × ${machine.cores} · memory ${machine.memory} · node ${machine.node} · ${machine.kernel}`,
    `- Temporal: ${machine.temporal} (dev server, in memory, headless)`,
    `- temp dir: ${machine.tempRoot} — ${machine.tempWhy}`,
    `- load average before: ${machine.loadBefore} · after: ${machine.loadAfter}`,
    '',
    '```',
    machine.df,
    '```',
    '',
  ].join('\n');
}

/** The freeze rounds alone (`--freeze-only`). */
export function freezeReport(options: Options, machine: Machine, records: OpRecord[]): string {
  return [
    `# durable-sessions benchmark: freeze`,
    '',
    `${new Date().toISOString()} · workspace ${options.sizeMiB} MiB in ${blobSizes(options).length} files · ` +
      `${options.rounds} rounds`,
    '',
    table(['metric', 'with pre-copy', 'without (baseline, same run)', 'target', 'result'], freezeRows(records)),
    '',
    `load average before: ${machine.loadBefore} · after: ${machine.loadAfter}`,
    '',
  ].join('\n');
}

/** The main table: baselines, then each operation against the baseline it is read against. */
function summaryRows(b: Baselines, records: OpRecord[], checks: RoundCheck[], stateBytes: number): string[][] {
  const of = (op: OpName) => byOp(records, op);
  const ms = (op: OpName) => of(op).map((r) => r.ms);
  const write = median(b.writeMs);
  const readWarm = median(b.readWarmMs);
  const sha = median(b.sha256Ms);
  const tarC = median(b.tarCreateMs);
  const tarX = median(b.tarExtractMs);
  // Resume's physical floor: the slower of reading the bytes and hashing them (at the same byte count).
  const readOrHash = Math.max(readWarm, sha);
  const scale = (baselineMs: number, baselineBytes: number) => (baselineMs * stateBytes) / baselineBytes;

  const rows: string[][] = [];
  const row = (...cells: string[]) => rows.push(cells);
  row('**baseline** write + fsync, one file', throughput(b.bytes, b.writeMs), '—', '—');
  row('**baseline** read, warm (page cache)', throughput(b.bytes, b.readWarmMs), '—', '—');
  if (b.readColdMs) row('**baseline** read, cold (O_DIRECT, dd)', throughput(b.bytes, b.readColdMs), '—', '—');
  row('**baseline** SHA-256 in memory', throughput(b.bytes, b.sha256Ms), '—', '—');
  row('**baseline** `tar -c` + fsync of the workspace', throughput(b.tarBytes, b.tarCreateMs), '—', '—');
  row('**baseline** `tar -x` into a fresh dir (no fsync)', throughput(b.tarBytes, b.tarExtractMs), '—', '—');
  for (const [op, label] of [
    ['checkpoint', 'checkpoint() of the running session'],
    ['checkpointChanged', 'checkpoint() after one file was rewritten'],
    ['checkpoint2', 'checkpoint() after resume'],
    ['pause', 'pause() (checkpoint + stop + dispose)'],
  ] as const) {
    const t = ms(op);
    row(
      label,
      throughput(stateBytes, t),
      `write+fsync ${fmtMiBps(mibps(b.bytes, write))}`,
      ratio(median(t), scale(write, b.bytes)),
    );
  }
  const tarMs = scale(tarC, b.tarBytes);
  const overTar = median(ms('checkpoint')) / tarMs;
  row(
    'checkpoint() vs plain tar (target: ≤ 1.5 × tar -c + fsync)',
    spread(ms('checkpoint')),
    `tar -c + fsync ${fmtMs(tarMs)}`,
    `${ratio(median(ms('checkpoint')), tarMs)} = ${overTar.toFixed(2)} × tar: ${overTar <= 1.5 ? 'PASS' : 'MISS'}`,
  );
  row(
    'resume() (call → restored process running)',
    throughput(stateBytes, ms('resume')),
    `min(read ${fmtMiBps(mibps(b.bytes, readWarm))}, sha256 ${fmtMiBps(mibps(b.bytes, sha))})`,
    ratio(median(ms('resume')), scale(readOrHash, b.bytes)),
  );
  // Resume is read as a time against tar -x of the same tree: target ≤ 1.5 ×. The engine's open alone (nothing
  // written) is what no runtime work can go below.
  const tarXMs = scale(tarX, b.tarBytes);
  const againstTarX = (op: OpName, target?: number) => {
    const times = `${(median(ms(op)) / tarXMs).toFixed(2)} × (${(Math.min(...ms(op)) / tarXMs).toFixed(2)}–${(Math.max(...ms(op)) / tarXMs).toFixed(2)})`;
    if (target === undefined) return times;
    return `${times} · target ≤ ${target.toFixed(1)} × · ${median(ms(op)) / tarXMs <= target ? 'PASS' : '**MISS**'}`;
  };
  row('**resume() vs plain tar -x**', spread(ms('resume')), `tar -x ${fmtMs(tarXMs)}`, againstTarX('resume', 1.5));
  row(
    'store.open → restore alone¹ vs tar -x',
    spread(ms('direct-restore')),
    `tar -x ${fmtMs(tarXMs)}`,
    againstTarX('direct-restore'),
  );
  row(
    "store.open drained alone¹ (the engine's open: read, decrypt; nothing written) vs tar -x",
    spread(ms('direct-open')),
    `tar -x ${fmtMs(tarXMs)}`,
    againstTarX('direct-open'),
  );
  row(
    'capture → store.write alone¹ (no Temporal, no heartbeats)',
    throughput(stateBytes, ms('direct-capture')),
    `write+fsync ${fmtMiBps(mibps(b.bytes, write))}`,
    ratio(median(ms('direct-capture')), scale(write, b.bytes)),
  );
  row(
    'store.open → restore alone¹ (no Temporal)',
    throughput(stateBytes, ms('direct-restore')),
    'min(read, sha256)',
    ratio(median(ms('direct-restore')), scale(readOrHash, b.bytes)),
  );
  row('stop() (no final checkpoint)', spread(ms('stop')), '—', '—');
  for (const op of ['checkpoint', 'resume'] as const) {
    const deltas = of(op).map((r) => r.rssPeak - r.rssBefore);
    const maxGrowth = of(op).map((r) => r.maxRssAfter - r.maxRssBefore);
    row(
      `peak RSS − RSS before, during ${op}()`,
      `${fmtSigned(median(deltas))} (${fmtSigned(Math.min(...deltas))}…${fmtSigned(Math.max(...deltas))}); ${median(of(op).map((r) => r.samples))} samples`,
      `state ${fmtMiB(stateBytes)}`,
      `${(median(deltas) / stateBytes).toFixed(2)} of state`,
    );
    row(`growth of maxRSS during ${op}()`, `${fmtSigned(Math.max(...maxGrowth))} (max over rounds)`, '—', '—');
  }
  const ok = checks.filter(
    (c) =>
      c.pidAlive &&
      c.cwdMatches &&
      c.oldPidGone &&
      c.stateAfterCheckpoint !== undefined &&
      c.stateAfterCheckpoint !== 'T' &&
      c.original.sha256 === c.restored.sha256 &&
      c.original.bytes === c.restored.bytes,
  );
  const first = checks[0]!;
  row(
    'restore verified (pid alive, cwd, tree sha256 + size)',
    `${ok.length}/${checks.length} rounds ok · ${first.original.files} files, ${first.original.bytes} bytes`,
    '—',
    '—',
  );

  return rows;
}

/** Where the time goes: medians of spans between probe events, from the client's call to its return. */
function breakdownRows(records: OpRecord[], stateBytes: number, cores: number): string[][] {
  const of = (op: OpName) => byOp(records, op);
  const columns: OpRecord[][] = [
    of('checkpoint'),
    of('checkpoint2'),
    of('pause'),
    of('resume'),
    of('direct-capture'),
    of('direct-restore'),
  ];
  const breakdown: string[][] = [];
  const spanRow = (label: string, from: Events, to: Events) =>
    breakdown.push([label, ...columns.map((rs) => phaseSpan(rs, from, to))]);
  const fnRow = (label: string, fn: (rs: OpRecord[]) => string) =>
    breakdown.push([label, ...columns.map((rs) => (rs.length ? fn(rs) : '—'))]);
  spanRow('call → engine starts (update, workflow task, activity dispatch)', null, ['capture.call', 'open.call']);
  spanRow('pre-copy: capture call → SIGSTOP (read while the process runs)', 'capture.call', 'capture.freeze');
  spanRow('freeze: SIGSTOP until /proc shows the group stopped', 'capture.freeze', 'capture.frozen');
  spanRow('capture call → first byte in the store', 'capture.call', 'write.firstByte');
  spanRow('stream: capture call → last byte packed', 'capture.call', 'capture.packed');
  spanRow('process frozen in total (SIGSTOP → SIGCONT)', 'capture.freeze', 'capture.thawed');
  spanRow('last byte → data + manifest durable (fsync, rename, dir fsync)', 'capture.packed', 'write.done');
  spanRow('stop the process (SIGTERM → exit)', 'stop.call', 'stop.done');
  spanRow('dispose (remove the workspace dir)', 'dispose.call', 'dispose.done');
  // The resume, step by step: the history's events (server clock, the same machine's) between the probes'.
  spanRow('resume: call → update accepted (request, workflow task)', null, 'wf.accepted');
  spanRow('resume: accepted → host placed (placeSession activity)', 'wf.accepted', 'placeSession.completed');
  spanRow(
    'resume: placed → restore scheduled (workflow task)',
    'placeSession.completed',
    'restoreCheckpoint.scheduled',
  );
  spanRow('resume: restore scheduled → activity started', 'restoreCheckpoint.scheduled', 'restoreCheckpoint.started');
  spanRow(
    'resume: activity started → store opened (describe, manifest, checks)',
    'restoreCheckpoint.started',
    'open.call',
  );
  spanRow('stream: open → first plaintext byte', 'open.call', 'open.firstByte');
  spanRow('stream: read → decrypt → tar extract (until the last byte)', 'open.call', 'open.verified');
  spanRow('last byte → tree complete (last file, dir modes, index)', 'open.verified', 'restore.launch');
  spanRow('tree complete → process running (spawn, instance record)', 'restore.launch', 'restore.started');
  spanRow('resume: process running → activity completed', 'restore.started', 'restoreCheckpoint.completed');
  spanRow(
    'resume: activity completed → update completed (workflow task)',
    'restoreCheckpoint.completed',
    'wf.updateCompleted',
  );
  spanRow('resume: update completed → result in hand', 'wf.updateCompleted', null);
  fnRow('resume: workflow tasks · activities (from the history)', (rs) => {
    const r = rs.find((x) => x.activities);
    return r ? `${r.workflowTasks} · ${r.activities!.join(', ')}` : '—';
  });
  spanRow(
    'engine done → result in hand (activity completion, workflow task, update)',
    ['dispose.done', 'write.done', 'restore.started'],
    null,
  );
  fnRow('**total (wall time)**', (rs) => spread(rs.map((r) => r.ms)));
  fnRow('CPU of this process, user + system (all its threads: streams, hashing, workers, Temporal core)', (rs) => {
    const user = median(rs.map((r) => r.cpuUserMs));
    const sys = median(rs.map((r) => r.cpuSystemMs));
    return `${fmtMs(user)} + ${fmtMs(sys)} (${(((user + sys) / median(rs.map((r) => r.ms))) * 100).toFixed(0)}% of wall)`;
  });
  fnRow('CPU of the Temporal server · of everything else (kernel threads, other users)', (rs) => {
    const server = median(rs.map((r) => r.serverCpuMs));
    const rest = median(rs.map((r) => r.machineBusyMs - r.cpuUserMs - r.cpuSystemMs - r.serverCpuMs));
    const busy = median(rs.map((r) => r.machineBusyMs)) / (median(rs.map((r) => r.ms)) * cores);
    return `${fmtMs(server)} · ${fmtMs(Math.max(0, rest))} (machine ${(busy * 100).toFixed(0)}% busy)`;
  });
  fnRow(
    'GC pauses on the main thread: major (count · time) · minor and incremental',
    (rs) =>
      `${median(rs.map((r) => r.gcMajor))} · ${fmtMs(median(rs.map((r) => r.gcMajorMs)))} · ` +
      fmtMs(median(rs.map((r) => r.gcOtherMs))),
  );
  fnRow('max event-loop delay during the call', (rs) => fmtMs(median(rs.map((r) => r.loopDelayMaxMs))));
  fnRow('progress callbacks (one per chunk) × avg chunk · time inside them (heartbeats)', (rs) => {
    const calls = median(rs.map((r) => r.progressCalls));
    const spent = median(rs.map((r) => r.progressMs));
    return calls ? `${calls} × ${(stateBytes / calls / 1024).toFixed(0)} KiB · ${fmtMs(spent)}` : '—';
  });

  return breakdown;
}

/** The freeze rounds: how long the process stayed frozen, with pre-copy and without, against the two targets. */
function freezeRows(records: OpRecord[]): string[][] {
  const frozen = (op: OpName) =>
    byOp(records, op)
      .filter((r) => r.at['capture.freeze'] !== undefined && r.at['capture.thawed'] !== undefined)
      .map((r) => r.at['capture.thawed']! - r.at['capture.freeze']!);
  const share = (op: OpName) =>
    byOp(records, op).map((r) => (r.at['capture.thawed']! - r.at['capture.freeze']!) / r.ms);
  const pct = (values: number[]) => `${(median(values) * 100).toFixed(1)} %`;
  const verdict = (ok: boolean) => (ok ? 'PASS' : 'MISS');
  if (byOp(records, 'freeze-first').length === 0) return [];
  const firstShare = share('freeze-first');
  const changed = frozen('freeze-changed');
  const sessionFrozen = frozen('checkpoint');
  return [
    [
      'first checkpoint: capture time (call → stored)',
      spread(byOp(records, 'freeze-first').map((r) => r.ms)),
      spread(byOp(records, 'freeze-first-whole').map((r) => r.ms)),
      '—',
      '—',
    ],
    [
      'first checkpoint: process frozen',
      spread(frozen('freeze-first')),
      spread(frozen('freeze-first-whole')),
      '—',
      '—',
    ],
    [
      'first checkpoint: frozen ÷ capture time',
      pct(firstShare),
      pct(share('freeze-first-whole')),
      '≤ 10 %',
      verdict(median(firstShare) <= 0.1),
    ],
    [
      'first checkpoint, 1 % changed between pre-copy and freeze: process frozen',
      spread(changed),
      spread(frozen('freeze-changed-whole')),
      '≤ 100 ms (at 1 GiB)',
      verdict(median(changed) <= 100),
    ],
    [
      'checkpoint() through Temporal (first of the session): process frozen',
      sessionFrozen.length ? spread(sessionFrozen) : '—',
      '—',
      '—',
      '—',
    ],
  ];
}

const byOp = (records: OpRecord[], op: OpName) => records.filter((r) => r.op === op);
