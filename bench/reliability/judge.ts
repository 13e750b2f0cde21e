/**
 * A session under test and the verdict on it once the fault is over: survived, lost (failed, or lost durable work),
 * corrupt (a checkpoint that does not verify, restored bytes that differ) or stuck (not where it should be in time).
 */
import { setTimeout as delay } from 'node:timers/promises';
import type { SessionStatus, TimelineEntry } from '../../src/api';
import type { SessionHandle } from '../../src/client';
import type { CheckpointRef, StartSessionInput } from '../../src/domain/schemas';
import { messageOf } from '../../src/errors';
import type { SnapshotStore } from '../../src/snapshots';
import { runsIn } from './host';
import {
  checkpointBytes,
  checkpointFiles,
  liveFiles,
  logProblem,
  sameBlobs,
  type BlobVersion,
  type WorkspaceFiles,
} from './workload';

export type Verdict = 'survived' | 'lost' | 'corrupt' | 'stuck';

/** The call a fault interrupts, and how it ended. */
export interface Operation {
  name: string;
  /** How long it had run when the fault came (ms). */
  offsetMs?: number;
  /** When the fault came (epoch ms). */
  struckAt?: number;
  /** Whether the fault came while the operation was under way; by default, whether it answered after the fault. */
  underWay?: boolean;
  outcome?: { ok: true } | { ok: false; error: string };
  /** When it answered (epoch ms). */
  answeredAt?: number;
  done: Promise<void>;
}

export class Subject {
  /** Checkpoints the client was handed: durable work the session must never lose. */
  readonly acked: CheckpointRef[] = [];
  /** The versions of the blob files written into the session; its checkpoints hold one of them. */
  readonly blobVersions: BlobVersion[] = [];
  /** Instances the session ran in before the fault; after a crash it must run in none of them. */
  readonly instancesBefore = new Set<string>();
  /** Outage: the session must keep its instance (a restore would roll back a healthy process). */
  keepInstance = false;
  /** Timeline entries there were before the fault (the outage checks that nothing was added). */
  timelineBefore = 0;
  operation?: Operation;
  /** What a scenario found wrong along the way (a resume that restored another checkpoint, say). */
  readonly problems: { verdict: Verdict; detail: string }[] = [];
  /** What is worth knowing when the verdict is not `survived` (what the worker said of its drain, say). */
  readonly notes: string[] = [];

  constructor(
    readonly row: string,
    readonly spec: StartSessionInput,
    readonly handle: SessionHandle,
    /** Where the session should settle; a scenario may change it once it knows how a control answered. */
    public expected: 'running' | 'paused' = 'running',
  ) {}

  get sessionId(): string {
    return this.spec.sessionId;
  }

  get isMemory(): boolean {
    return this.spec.runtime.kind === 'memory';
  }

  /** Runs `call` as this subject's operation; a checkpoint it returns counts as acknowledged. */
  begin(name: string, call: () => Promise<unknown>): void {
    const operation: Operation = { name, done: Promise.resolve() };
    operation.done = call().then(
      (value) => {
        if (isCheckpointRef(value)) this.acked.push(value);
        operation.outcome = { ok: true };
        operation.answeredAt = Date.now();
      },
      (error: unknown) => {
        operation.answeredAt = Date.now();
        operation.outcome = { ok: false, error: messageOf(error) };
      },
    );
    this.operation = operation;
  }
}

export interface Outcome {
  subject: Subject;
  verdict: Verdict;
  detail?: string;
  timeline?: TimelineEntry[];
  status?: SessionStatus;
}

/**
 * Waits until the subject's operation has answered and the session is back where it should be: its expected phase,
 * no control pending, and — when running — in an instance that is alive (a workspace's process runs in its
 * directory) and, after a crash, not one it had before. A failed or completed session is settled too.
 */
export async function settle(subject: Subject, deadline: number): Promise<SessionStatus | undefined> {
  for (;;) {
    const status = await subject.handle.status().catch(() => undefined);
    if (status && (status.phase === 'failed' || status.phase === 'completed')) return status;
    if (status && subject.operation?.outcome !== undefined && isSettled(subject, status)) return status;
    if (Date.now() > deadline) return undefined;
    await delay(250);
  }
}

function isSettled(subject: Subject, status: SessionStatus): boolean {
  if (status.phase !== subject.expected || status.pendingControls > 0) return false;
  if (status.phase !== 'running') return true;
  const runtime = status.runtime;
  if (!runtime) return false;
  // After a crash the session runs in a new instance; after an outage judge() tells whether it kept its own.
  if (!subject.keepInstance && subject.instancesBefore.has(runtime.instanceId)) return false;
  return subject.isMemory || runsIn(runtime.pid, runtime.location);
}

/** How long a subject that moved after it settled gets to settle again. */
const RESETTLE_MS = 60_000;

/**
 * The verdict on a settled (or, with no status, unsettled) subject; a control that fails while judging is a loss.
 * A session can move after it settled (its host, slow under load, was declared lost and the session recovered
 * elsewhere): then the instance it settled in is gone, and it is judged again where it runs now.
 */
export async function judge(
  subject: Subject,
  status: SessionStatus | undefined,
  store: SnapshotStore,
): Promise<Outcome> {
  try {
    for (let judged = 1; ; judged++) {
      const outcome = await judgeSettled(subject, status, store);
      if (outcome.verdict === 'survived' || status?.phase !== 'running' || judged >= 3) return outcome;
      const now = await subject.handle.status().catch(() => undefined);
      if (!now || now.runtime?.instanceId === status.runtime?.instanceId) return outcome;
      status = await settle(subject, Date.now() + RESETTLE_MS);
    }
  } catch (error) {
    const timeline = await subject.handle.timeline().catch(() => undefined);
    const last = await subject.handle.status().catch(() => undefined);
    const failed = last?.phase === 'failed' ? `${failedDetail(last)}; ` : '';
    const detail = `${failed}a control failed after the fault: ${messageOf(error)}`;
    return { subject, verdict: 'lost', detail, timeline, status: last ?? status };
  }
}

async function judgeSettled(
  subject: Subject,
  status: SessionStatus | undefined,
  store: SnapshotStore,
): Promise<Outcome> {
  const timeline = await subject.handle.timeline().catch(() => undefined);
  const verdict = (v: Verdict, detail?: string, s = status): Outcome => ({
    subject,
    verdict: v,
    ...(detail ? { detail } : {}),
    ...(v !== 'survived' ? { timeline, status: s } : {}),
  });
  if (!status) {
    const last = await subject.handle.status().catch(() => undefined);
    const where = last ? `${last.phase}, ${last.pendingControls} control(s) pending` : 'no answer to status';
    const op = subject.operation?.outcome === undefined ? `; ${subject.operation?.name} has not answered` : '';
    return verdict('stuck', `not ${subject.expected} in time: ${where}${op}`, last);
  }
  if (status.phase === 'failed') {
    return verdict('lost', failedDetail(status));
  }
  if (status.phase === 'completed') return verdict('lost', 'completed, though nothing stopped it');
  const found = subject.problems[0];
  if (found) return verdict(found.verdict, subject.problems.map((p) => p.detail).join('; '));

  const newestAcked = subject.acked.reduce((n, ref) => Math.max(n, ref.sequence), 0);
  if (newestAcked > (status.head?.sequence ?? 0)) {
    return verdict(
      'lost',
      `head is ${status.head?.checkpointId ?? 'none'}, older than acknowledged checkpoint ${newestAcked}`,
    );
  }
  const results = await subject.handle.verify();
  const bad = results.filter((r) => r.status !== 'ok');
  if (bad.length > 0) {
    return verdict('corrupt', bad.map((r) => `${r.checkpointId} ${r.status}: ${r.detail ?? ''}`).join('; '));
  }
  const missing = subject.acked.filter((ref) => !results.some((r) => r.checkpointId === ref.checkpointId));
  if (missing.length > 0)
    return verdict('lost', `acknowledged checkpoint(s) gone: ${missing.map((r) => r.checkpointId).join(', ')}`);
  if (subject.keepInstance && status.runtime && !subject.instancesBefore.has(status.runtime.instanceId)) {
    return verdict(
      'lost',
      `rolled back: runs in ${status.runtime.instanceId}, not in ${[...subject.instancesBefore].join(', ')}`,
    );
  }
  if (subject.keepInstance && timeline && timeline.length > subject.timelineBefore) {
    const added = timeline
      .slice(subject.timelineBefore)
      .filter((e) => e.kind === 'runtime-lost' || e.kind === 'restored');
    if (added.length > 0) return verdict('lost', `rolled back: ${added.map((e) => e.kind).join(', ')} while healthy`);
  }
  const problem = subject.isMemory
    ? await memoryProblem(subject, status, store)
    : await workspaceProblem(subject, status, store);
  return problem ? verdict(problem.verdict, problem.detail) : verdict('survived');
}

type Problem = { verdict: Verdict; detail: string } | undefined;

/** How a failed session's loss reads; KNOWN_LOSSES in the reliability test match on it. */
function failedDetail(status: SessionStatus): string {
  return `failed: ${status.failure?.type}: ${status.failure?.message}`;
}

async function memoryProblem(subject: Subject, status: SessionStatus, store: SnapshotStore): Promise<Problem> {
  if (status.phase !== 'running') return undefined;
  if (subject.spec.runtime.kind !== 'memory') return undefined;
  // The bytes the instance holds now, as a checkpoint taken after the fault writes them.
  const ref = await subject.handle.checkpoint({ label: 'after the fault' });
  const bytes = await checkpointBytes(store, ref);
  const expected = Buffer.from(subject.spec.runtime.initialState ?? '', 'utf8');
  return bytes.equals(expected)
    ? undefined
    : {
        verdict: 'corrupt',
        detail: `memory state is ${bytes.length} bytes unlike the ${expected.length} it was given`,
      };
}

async function workspaceProblem(subject: Subject, status: SessionStatus, store: SnapshotStore): Promise<Problem> {
  let head: WorkspaceFiles | undefined;
  if (status.head) {
    head = await checkpointFiles(store, status.head);
    if (subject.blobVersions.length > 0 && !subject.blobVersions.some((v) => sameBlobs(v, head!.blobs))) {
      return { verdict: 'corrupt', detail: `head ${status.head.checkpointId} holds none of the blob versions written` };
    }
    const logged = logProblem(head.log);
    if (logged) return { verdict: 'corrupt', detail: `head ${status.head.checkpointId}: ${logged}` };
  }
  if (status.phase !== 'running' || !status.runtime) return undefined;
  const live = await liveFiles(status.runtime.location);
  if (head && !sameBlobs(live.blobs, head.blobs)) {
    return { verdict: 'corrupt', detail: `the running instance's blobs differ from head ${status.head!.checkpointId}` };
  }
  if (head && (!live.log.startsWith(head.log) || (live.n ?? 0) < (head.n ?? 0))) {
    return {
      verdict: 'lost',
      detail: `the running state (counter ${live.n}) does not continue head ${status.head!.checkpointId} (counter ${head.n})`,
    };
  }
  const logged = logProblem(live.log);
  return logged ? { verdict: 'corrupt', detail: `running instance: ${logged}` } : undefined;
}

function isCheckpointRef(value: unknown): value is CheckpointRef {
  return typeof value === 'object' && value !== null && 'checkpointId' in value && 'sequence' in value;
}
