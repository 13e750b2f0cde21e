import { patched, type ApplicationFailure } from '@temporalio/workflow';
import type { z } from 'zod';
import { ERROR_CODES, type ErrorCode } from '../domain/error-codes';
import { inputFingerprint } from '../domain/fingerprint';
import type { RememberedResult } from '../domain/records';
import type { ResumeInput } from '../domain/schemas';
import { isFinal, isStable, planControl, type Control, type Phase, type StablePhase } from '../domain/session-state';
import { closed, failedSession, failure, failureMessage, invalidTransition, typeOf } from './failures';
import { parseControl } from './inputs';
import { IDEMPOTENCY_DIGEST_PATCH } from './patches';
import { now, type Session } from './session';

/** The fields of a control that name the head it expects. */
interface Preconditions {
  ifHead?: string;
  ifIndex?: number;
}

/** Operations queued at most before further signals wait in the state for their turn. */
const MAX_QUEUED_SIGNALS = 8;

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
  private readonly inFlight = new Map<string, { control: Control; input?: string; result: Promise<unknown> }>();
  /** Set while the run hands over to the next: updates are refused (Busy), signals are kept for the next run. */
  private draining = false;
  /** While signals carried from the previous run wait to be applied, new ones queue behind them. */
  private replaying: boolean;
  private readonly signalHandlers = new Map<string, (raw: unknown) => void>();
  /** The named operations queued or running, in order: what the Web UI's details list as pending. */
  private readonly operations: { what: string; running: boolean }[] = [];

  constructor(private readonly session: Session) {
    this.projected = stableOr(session.state.phase, 'running');
    this.replaying = (session.runControl.deferredSignals?.length ?? 0) > 0;
    session.pendingOperations = () => this.operations;
  }

  /** The run hands over to the next one: from now on, nothing new is started here. */
  drain(): void {
    this.draining = true;
  }

  /** Applies the signals the previous run kept for this one, and those that arrived since, in arrival order. */
  replayDeferred(): void {
    this.replaying = false;
    this.feed();
  }

  /** Nothing is queued or running (signals waiting in the state for a turn count as queued). */
  get idle(): boolean {
    return this.queued === 0 && (this.draining || !this.session.runControl.deferredSignals?.length);
  }

  /** Controls accepted and not finished, and signals waiting for their turn. */
  get pending(): number {
    return this.pendingControls + (this.session.runControl.deferredSignals?.length ?? 0);
  }

  /** Runs `op` after everything queued before it; `what` names it among the pending operations operators see. */
  serial<T>(op: () => Promise<T>, what?: string): Promise<T> {
    this.queued++;
    const shown = what === undefined ? undefined : { what, running: false };
    if (shown) {
      this.operations.push(shown);
      this.session.publishDetails();
    }
    const run = this.tail.then(() => {
      if (shown) {
        shown.running = true;
        this.session.publishDetails();
      }
      return op();
    });
    this.tail = run.then(
      () => undefined,
      () => undefined,
    );
    return run.finally(() => {
      this.queued--;
      if (shown) this.operations.splice(this.operations.indexOf(shown), 1);
      this.feed();
      // Once nothing is queued, the projection is simply where the session is.
      if (this.queued === 0) this.projected = stableOr(this.session.state.phase, this.projected);
      if (shown) this.session.publishDetails();
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
    if (key !== undefined && this.isRepeat(key, control, inputFingerprint(input))) return; // answered with the first outcome
    if (this.draining) {
      throw failure(
        ERROR_CODES.Busy,
        `session ${this.session.id} is handing over to its next run: send ${control} again shortly`,
      );
    }
    if (isFinal(this.projected)) throw this.ended();
    const plan = planControl(this.projected, control);
    if (!plan.ok) throw invalidTransition(plan.reason);
    const conflict = this.conflictOf(control, input);
    if (conflict) throw conflict;
    if (control === 'resume') this.session.checkKnownCheckpoint((input as ResumeInput).checkpointId);
  }

  /**
   * Optimistic concurrency: a control that names the head it expects (`ifHead`, `ifIndex`) runs only if that is still
   * the head when it is accepted, and nothing is queued ahead of it that could move the head. Otherwise Conflict.
   */
  private conflictOf(control: Control, input: Preconditions): ApplicationFailure | undefined {
    const { ifHead, ifIndex } = input;
    if (ifHead === undefined && ifIndex === undefined) return undefined;
    const head = this.session.state.head;
    const id = this.session.id;
    if (this.queued > 0) {
      return failure(
        ERROR_CODES.Conflict,
        `${control} names the head it expects, but ${this.queued} operation(s) of session ${id} are queued or running and may move it: read the session again once they finish`,
      );
    }
    if (ifHead !== undefined && head?.checkpointId !== ifHead) {
      return failure(
        ERROR_CODES.Conflict,
        `${control} expects head ${ifHead}, but the head of session ${id} is ${head?.checkpointId ?? 'none'}`,
      );
    }
    if (ifIndex !== undefined && head?.index !== ifIndex) {
      return failure(
        ERROR_CODES.Conflict,
        `${control} expects the head at index ${ifIndex}, but the head of session ${id} is at ${head?.index ?? 'none'}`,
      );
    }
    return undefined;
  }

  /** The refusal of a control to a session that has ended: failed (with its failure), or closed. */
  private ended(): ApplicationFailure {
    const { state } = this.session;
    if (state.phase === 'failed') return failedSession(this.session.id, state.failure);
    return closed();
  }

  /** Accepts a validated control: dedupes by key, advances the projection, and queues the work. */
  accept<I extends { idempotencyKey?: string } & Preconditions, R>(
    control: Control,
    input: I,
    run: (i: I) => Promise<R>,
  ): Promise<R> {
    const key = input.idempotencyKey;
    if (key !== undefined && this.isRepeat(key, control, inputFingerprint(input))) {
      return this.outcomeOf(key) as Promise<R>;
    }
    if (isFinal(this.projected)) return Promise.reject(this.ended());
    const plan = planControl(this.projected, control);
    if (!plan.ok) return Promise.reject(invalidTransition(plan.reason));
    // Again: another control may have been accepted since this one was validated.
    const conflict = this.conflictOf(control, input);
    if (conflict) return Promise.reject(conflict);
    this.projected = plan.projected;
    this.session.runControl.lastActivityAt = now();
    this.pendingControls++;
    const result = this.serial(() => run(input), control).finally(() => {
      this.pendingControls--;
      if (key !== undefined) this.inFlight.delete(key);
    });
    if (key !== undefined) {
      // Histories from before digests replay without one, so their repeats are answered as they were.
      const digest = patched(IDEMPOTENCY_DIGEST_PATCH) ? { input: inputFingerprint(input) } : {};
      this.inFlight.set(key, { control, ...digest, result });
      // Failures are remembered too: the server answers a repeated update id with the stored outcome within a
      // run, and this keeps the same answer after continue-as-new. A retry after a failure takes a new key.
      result.then(
        (value) => this.remember({ key, control, ...digest, outcome: { ok: true, value } }),
        (err: unknown) =>
          this.remember({
            key,
            control,
            ...digest,
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
    /** A further check the signal must pass before it is accepted (it throws the refusal). */
    check: () => void = () => {},
  ) {
    const apply = (raw: I): void => {
      try {
        this.validate(control, schema, raw);
        check();
        this.accept(control, parseControl(schema, raw), run).catch((err: unknown) =>
          this.session.rejectSignal(signal, err),
        );
      } catch (err) {
        this.session.rejectSignal(signal, err);
      }
    };
    this.signalHandlers.set(signal, apply as (raw: unknown) => void);
    // Beyond a few queued operations, signals wait in the state (in arrival order) instead of in the queue: a storm
    // of them never makes a queue that a run handing over would have to work off first.
    return (raw: I): void => {
      const rc = this.session.runControl;
      if (
        this.draining ||
        this.replaying ||
        (rc.deferredSignals?.length ?? 0) > 0 ||
        this.queued >= MAX_QUEUED_SIGNALS
      ) {
        (rc.deferredSignals ??= []).push({ signal, input: raw });
        this.session.publishDetails();
        return;
      }
      apply(raw);
    };
  }

  /** Moves waiting signals into the queue as it empties. */
  private feed(): void {
    const rc = this.session.runControl;
    while (!this.draining && !this.replaying && rc.deferredSignals?.length && this.queued < MAX_QUEUED_SIGNALS) {
      const { signal, input } = rc.deferredSignals.shift()!;
      const apply = this.signalHandlers.get(signal);
      if (apply) apply(input);
      else this.session.rejectSignal(signal, new Error(`no signal named ${signal}`));
    }
  }

  /**
   * Whether `key` was used before; throws if it was used for another control, or (when its input's digest was kept)
   * with other input: a retry sends what it sent the first time, so other input is a second request under one key.
   */
  private isRepeat(key: string, control: Control, input: string): boolean {
    const first = this.session.state.results.find((r) => r.key === key) ?? this.inFlight.get(key);
    if (first === undefined) return false;
    if (first.control !== control) {
      throw failure(ERROR_CODES.InvalidInput, `idempotency key "${key}" was already used for ${first.control}`);
    }
    if (first.input !== undefined && first.input !== input) {
      throw failure(
        ERROR_CODES.IdempotencyKeyReused,
        `idempotency key "${key}" was already used for ${control} with other input: send the same input again, or use a new key`,
      );
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
