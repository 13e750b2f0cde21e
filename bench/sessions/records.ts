/** One record per measured operation: what `measure` saw around the call and what the probes saw inside it. */
import { measure, type Measurement } from './measure';
import type { Probe } from './probes';

export type OpName =
  | 'checkpoint'
  | 'pause'
  | 'resume'
  | 'checkpoint2'
  | 'checkpointChanged'
  | 'stop'
  | 'direct-capture'
  | 'direct-open'
  | 'direct-restore'
  | 'freeze-first'
  | 'freeze-changed'
  | 'freeze-first-whole'
  | 'freeze-changed-whole';

export interface OpRecord extends Measurement {
  op: OpName;
  round: number;
  bytes: number;
  /** Milliseconds from the client call to each probe event. */
  at: Record<string, number>;
  progressCalls: number;
  progressMs: number;
  /** Workflow tasks and activities the control took, from its history (resume only). */
  workflowTasks?: number;
  activities?: string[];
}

/** Times operations one at a time (the probe follows the one in flight) and keeps their records in order. */
export class Recorder {
  readonly records: OpRecord[] = [];
  /** When each record's call was made (`performance.now()`). */
  private readonly starts = new Map<OpRecord, number>();

  constructor(
    private readonly probe: Probe,
    private readonly serverPid: number | undefined,
  ) {}

  async time<T>(op: OpName, round: number, fn: () => Promise<T>, bytesOf: (result: T) => number): Promise<T> {
    this.probe.reset();
    const { result, t0, ...measurement } = await measure(fn, this.serverPid);
    const at: Record<string, number> = {};
    for (const [name, t] of this.probe.events) at[name] = t - t0;
    const record: OpRecord = {
      op,
      round,
      bytes: bytesOf(result),
      ...measurement,
      at,
      progressCalls: this.probe.progressCalls,
      progressMs: this.probe.progressMs,
    };
    this.records.push(record);
    this.starts.set(record, t0);
    return result;
  }

  /** Adds marks taken after the fact (`performance.now()` times, e.g. from history) to the last record of `op`. */
  annotate(op: OpName, marks: Record<string, number>, extra: Pick<OpRecord, 'workflowTasks' | 'activities'>): void {
    const record = this.records.findLast((r) => r.op === op);
    if (!record) return;
    const t0 = this.starts.get(record)!;
    for (const [name, t] of Object.entries(marks)) record.at[name] = t - t0;
    Object.assign(record, extra);
  }
}
