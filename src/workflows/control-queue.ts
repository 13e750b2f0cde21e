import type { z } from 'zod';
import { ERROR_CODES, type ErrorCode } from '../domain/error-codes';
import type { RememberedResult } from '../domain/records';
import type { ResumeInput } from '../domain/schemas';
import { isFinal, isStable, planControl, type Control, type Phase, type StablePhase } from '../domain/session-state';
import { closed, failure, failureMessage, invalidTransition, typeOf } from './failures';
import { parseControl } from './inputs';
import { now, type Session } from './session';

/** The fields of a control that name the head it expects. */
interface Preconditions {
  ifHead?: string;
  ifIndex?: number;
}

/** Idempotency results kept (and carried across continue-as-new) per session. */
const MAX_REMEMBERED_RESULTS = 200;

/**
 * Runs the session's operations one at a time, in the order they were accepted, and decides which controls are
 * accepted: against the phase the session will be in once everything queued before them has run (the projection),
 * and once per idempotency key, across continue-as-new too.
 */
export class ControlQueue {
  private tail: Promise<unknown> = Promise.resolve();
  /** Operations accepted and not finished (controls and internal events). */
  private queued = 0;
  private pendingControls = 0;
  private projected: StablePhase;
  private readonly inFlight = new Map<string, { control: Control; result: Promise<unknown> }>();

  constructor(private readonly session: Session) {
    this.projected = stableOr(session.state.phase, 'running');
  }

  /** Nothing is queued or running. */
  get idle(): boolean {
    return this.queued === 0;
  }

  /** Controls accepted and not finished. */
  get pending(): number {
    return this.pendingControls;
  }

  serial<T>(op: () => Promise<T>): Promise<T> {
    this.queued++;
    const run = this.tail.then(op);
    this.tail = run.then(
      () => undefined,
      () => undefined,
    );
    return run.finally(() => {
      this.queued--;
      // Once nothing is queued, the projection is simply where the session is.
      if (this.queued === 0) this.projected = stableOr(this.session.state.phase, this.projected);
    });
  }

  /**
   * Synchronous by design: an async validator's rejection is ignored by the SDK. A rejected update leaves
   * no trace in history and changes nothing.
   */
  validate<S extends z.ZodType<{ idempotencyKey?: string } & Preconditions>>(
    control: Control,
    schema: S,
    raw: unknown,
  ): void {
    const input = parseControl(schema, raw);
    const key = input.idempotencyKey;
    if (key !== undefined && this.isRepeat(key, control)) return; // the handler answers with the first outcome
    if (isFinal(this.projected)) throw closed();
    const plan = planControl(this.projected, control);
    if (!plan.ok) throw invalidTransition(plan.reason);
    this.checkPreconditions(control, input);
    if (control === 'resume') this.session.checkKnownCheckpoint((input as ResumeInput).checkpointId);
  }

  /**
   * Optimistic concurrency: a control that names the head it expects (`ifHead`, `ifIndex`) runs only if that is still
   * the head when it is accepted, and nothing is queued ahead of it that could move the head. Otherwise Conflict.
   */
  private checkPreconditions(control: Control, input: Preconditions): void {
    const { ifHead, ifIndex } = input;
    if (ifHead === undefined && ifIndex === undefined) return;
    const head = this.session.state.head;
    const id = this.session.id;
    if (this.queued > 0) {
      throw failure(
        ERROR_CODES.Conflict,
        `${control} names the head it expects, but ${this.queued} operation(s) of session ${id} are queued or running and may move it: read the session again once they finish`,
      );
    }
    if (ifHead !== undefined && head?.checkpointId !== ifHead) {
      throw failure(ERROR_CODES.Conflict, `${control} expects head ${ifHead}, but the head of session ${id} is ${head?.checkpointId ?? 'none'}`);
    }
    if (ifIndex !== undefined && head?.index !== ifIndex) {
      throw failure(
        ERROR_CODES.Conflict,
        `${control} expects the head at index ${ifIndex}, but the head of session ${id} is at ${head?.index ?? 'none'}`,
      );
    }
  }

  /** Accepts a validated control: dedupes by key, advances the projection, and queues the work. */
  accept<I extends { idempotencyKey?: string } & Preconditions, R>(
    control: Control,
    input: I,
    run: (i: I) => Promise<R>,
  ): Promise<R> {
    const key = input.idempotencyKey;
    if (key !== undefined && this.isRepeat(key, control)) return this.outcomeOf(key) as Promise<R>;
    if (isFinal(this.projected)) return Promise.reject(closed());
    const plan = planControl(this.projected, control);
    if (!plan.ok) return Promise.reject(invalidTransition(plan.reason));
    try {
      // Again: another control may have been accepted since this one was validated.
      this.checkPreconditions(control, input);
    } catch (err) {
      return Promise.reject(err);
    }
    this.projected = plan.projected;
    this.session.runControl.lastActivityAt = now();
    this.pendingControls++;
    const result = this.serial(() => run(input)).finally(() => {
      this.pendingControls--;
      if (key !== undefined) this.inFlight.delete(key);
    });
    if (key !== undefined) {
      this.inFlight.set(key, { control, result });
      // Failures are remembered too: the server answers a repeated update id with the stored outcome within a
      // run, and this keeps the same answer after continue-as-new. A retry after a failure takes a new key.
      result.then(
        (value) => this.remember({ key, control, outcome: { ok: true, value } }),
        (err: unknown) =>
          this.remember({
            key,
            control,
            outcome: { ok: false, type: typeOf(err) ?? ERROR_CODES.RuntimeFailed, message: failureMessage(err) },
          }),
      );
    }
    return result;
  }

  /** Signals have no caller to answer: a control that cannot run is recorded in status instead. */
  fromSignal<I extends { idempotencyKey?: string }>(
    signal: string,
    control: Control,
    schema: z.ZodType<I>,
    run: (i: I) => Promise<unknown>,
  ) {
    return (raw: I): void => {
      try {
        this.validate(control, schema, raw);
        this.accept(control, parseControl(schema, raw), run).catch((err: unknown) =>
          this.session.rejectSignal(signal, err),
        );
      } catch (err) {
        this.session.rejectSignal(signal, err);
      }
    };
  }

  /** Whether `key` was used before; throws if it was used for another control. */
  private isRepeat(key: string, control: Control): boolean {
    const owner = this.session.state.results.find((r) => r.key === key)?.control ?? this.inFlight.get(key)?.control;
    if (owner === undefined) return false;
    if (owner !== control) {
      throw failure(ERROR_CODES.InvalidInput, `idempotency key "${key}" was already used for ${owner}`);
    }
    return true;
  }

  private outcomeOf(key: string): Promise<unknown> {
    const running = this.inFlight.get(key);
    if (running) return running.result;
    const { outcome } = this.session.state.results.find((r) => r.key === key)!;
    return outcome.ok
      ? Promise.resolve(outcome.value)
      : Promise.reject(failure(outcome.type as ErrorCode, outcome.message));
  }

  private remember(entry: RememberedResult): void {
    const { results } = this.session.state;
    results.push(entry);
    if (results.length > MAX_REMEMBERED_RESULTS) results.shift();
  }
}

function stableOr(phase: Phase, fallback: StablePhase): StablePhase {
  return isStable(phase) ? phase : fallback;
}
