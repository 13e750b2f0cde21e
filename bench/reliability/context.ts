/**
 * What the scenarios of one host share: the cluster and host, the tally, how sessions under test are started, and the
 * aftermath of a fault — settle, judge, count orphans and leaked bytes, stop the sessions.
 */
import type { LivenessOptions } from '../../src/domain/schemas';
import type { SnapshotStore } from '../../src/snapshots';
import { settlesWithin, type Cluster, type Host } from './cluster';
import { leakedFiles, sessionProcesses, type SessionProcess } from './host';
import { judge, settle, Subject, type Outcome } from './judge';
import { sessionOfPath, type Tally } from './tally';
import { counterSpec, memorySpec, writeBlobs } from './workload';

/** How long after the fault is over (the next worker polls, the server is back) a session has to be settled. */
export const SETTLE_MS = 90_000;
const STOP_MS = 60_000;

/** Progress goes to stderr, so that stdout holds the table and the findings alone. */
export function progress(message: string): void {
  console.error(`[${new Date().toISOString().slice(11, 19)}] ${message}`);
}

/** The marker in the command line of every session process of a run: `<prefix><sessionId>`. */
export function markerPrefix(runId: string): string {
  return `ds-reliability-${runId}:`;
}

export class Context {
  /** The row of each session this host ever started, for what is found of it later (a leaked file, a process). */
  private readonly rows = new Map<string, string>();

  constructor(
    readonly cluster: Cluster,
    readonly host: Host,
    readonly tally: Tally,
    /** Unique to this run on this machine: part of every command's marker. */
    readonly runId: string,
  ) {}

  /** The store this host's workers write, read here to see what checkpoints hold. */
  get store(): SnapshotStore {
    return this.host.store();
  }

  /** A counter workspace, not started yet. */
  counter(row: string, sessionId: string, liveness?: LivenessOptions): Subject {
    this.rows.set(sessionId, row);
    const spec = counterSpec(sessionId, `${markerPrefix(this.runId)}${sessionId}`, liveness);
    return new Subject(row, spec, this.host.sessions.get(sessionId));
  }

  /** A counter workspace, running, with a few MiB of blob files written into it (unless `blobs` is false). */
  async runningCounter(row: string, sessionId: string, liveness?: LivenessOptions, blobs = true): Promise<Subject> {
    const subject = this.counter(row, sessionId, liveness);
    await this.host.sessions.start(subject.spec);
    const status = await subject.handle.status();
    subject.instancesBefore.add(status.runtime!.instanceId);
    if (blobs) subject.blobVersions.push(await writeBlobs(status.runtime!.location));
    return subject;
  }

  /** A memory session, running, with a checkpoint of its state. */
  async runningMemory(row: string, sessionId: string, liveness?: LivenessOptions): Promise<Subject> {
    this.rows.set(sessionId, row);
    const spec = memorySpec(sessionId, liveness);
    const subject = new Subject(row, spec, this.host.sessions.get(sessionId));
    await this.host.sessions.start(spec);
    subject.instancesBefore.add((await subject.handle.status()).runtime!.instanceId);
    subject.acked.push(await subject.handle.checkpoint());
    return subject;
  }

  /** Processes of this host's sessions (the marker names one of them, or they work under its workspace root). */
  processes(sessionIds?: ReadonlySet<string>): SessionProcess[] {
    return sessionProcesses(markerPrefix(this.runId), this.host.workspaceDir).filter((p) => {
      const id = this.sessionOfProcess(p);
      return id !== undefined && this.rows.has(id) && (!sessionIds || sessionIds.has(id));
    });
  }

  /** Counts processes as orphans, each under the row of the session it belongs to. */
  orphans(processes: readonly SessionProcess[], when: string): void {
    const byRow = new Map<string, SessionProcess[]>();
    for (const p of processes) {
      const name = this.rows.get(this.sessionOfProcess(p)!)!;
      byRow.set(name, [...(byRow.get(name) ?? []), p]);
    }
    for (const [name, list] of byRow) this.tally.orphans(name, list, when);
  }

  private sessionOfProcess(p: SessionProcess): string | undefined {
    const prefix = markerPrefix(this.runId);
    const marked = p.cmdline.indexOf(prefix);
    if (marked >= 0) return p.cmdline.slice(marked + prefix.length).split(' ')[0];
    return p.cwd && sessionOfPath(this.host.workspaceDir, p.cwd);
  }

  /**
   * Counts leaked files of these sessions (all of this host's when not given), each under its session's row; a file
   * of no session this host started counts under `fallbackRow`.
   */
  leaks(
    live: readonly { instanceId: string; location: string }[],
    when: string,
    fallbackRow: string,
    sessionIds?: ReadonlySet<string>,
  ): void {
    const { workspaceDir, snapshotDir } = this.host;
    const sessionOf = (file: string) =>
      sessionOfPath(file.startsWith(workspaceDir + '/') ? workspaceDir : snapshotDir, file);
    const files = leakedFiles(workspaceDir, snapshotDir, live).filter((f) => {
      const id = sessionOf(f.path);
      return !sessionIds || (id !== undefined && sessionIds.has(id));
    });
    this.tally.leaks((file) => this.rows.get(sessionOf(file) ?? '') ?? fallbackRow, files, when);
  }

  /**
   * After a fault (over at `faultOver`: the next worker polls, the server is back): waits until every subject has
   * settled, at most SETTLE_MS after that, judges each, then counts what of theirs is left — processes that
   * belong to no live instance or are stopped (state T), files nothing live owns — and stops them, and counts again.
   */
  async aftermath(subjects: readonly Subject[], when: string, faultOver = Date.now()): Promise<Outcome[]> {
    const ids = new Set(subjects.map((s) => s.sessionId));
    const began = Date.now();
    const deadline = faultOver + SETTLE_MS;
    const statuses = await Promise.all(
      subjects.map(async (s) => {
        const status = await settle(s, deadline);
        progress(`  ${s.sessionId} settled after ${Date.now() - began} ms: ${status?.phase ?? 'not settled'}`);
        return status;
      }),
    );
    const outcomes = await Promise.all(subjects.map((s, i) => judge(s, statuses[i], this.store)));
    for (const outcome of outcomes) this.tally.outcome(outcome);

    const live = (await Promise.all(subjects.map((s) => s.handle.status().catch(() => undefined)))).flatMap((s) =>
      s?.runtime?.kind === 'workspace' ? [s.runtime] : [],
    );
    const strays = this.processes(ids).filter(
      (p) => p.state.startsWith('T') || p.cwdDeleted || !live.some((r) => p.cwd === r.location),
    );
    this.orphans(strays, `${when}, once settled: not a live instance's, or stopped`);
    this.leaks(live, `${when}, once settled`, subjects[0]!.row, ids);

    const stopped = Promise.all(subjects.map((s) => s.handle.stop({ checkpoint: false }).catch(() => undefined)));
    if (!(await settlesWithin(stopped, STOP_MS))) this.tally.findings.push(`NOTE — ${when}: stops did not answer`);
    this.orphans(this.processes(ids), `${when}, after every session was stopped`);
    this.leaks([], `${when}, after every session was stopped`, subjects[0]!.row, ids);
    return outcomes;
  }
}
