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
}

/** Times operations one at a time (the probe follows the one in flight) and keeps their records in order. */
export class Recorder {
  readonly records: OpRecord[] = [];

  constructor(
    private readonly probe: Probe,
    private readonly serverPid: number | undefined,
  ) {}

  async time<T>(op: OpName, round: number, fn: () => Promise<T>, bytesOf: (result: T) => number): Promise<T> {
    this.probe.reset();
    const { result, t0, ...measurement } = await measure(fn, this.serverPid);
    const at: Record<string, number> = {};
    for (const [name, t] of this.probe.events) at[name] = t - t0;
    this.records.push({
      op,
      round,
      bytes: bytesOf(result),
      ...measurement,
      at,
      progressCalls: this.probe.progressCalls,
      progressMs: this.probe.progressMs,
    });
    return result;
  }
}
