import { condition, log, patched } from '@temporalio/workflow';
import type { PauseInput, StopInput } from '../domain/schemas';
import { isFinal } from '../domain/session-state';
import type { ControlQueue } from './control-queue';
import { askHost, summarized } from './activity-proxies';
import { failureMessage } from './failures';
import { POLICY_CLOCK_PATCH } from './patches';
import { now, type Session } from './session';
import type { SessionController } from './session-controller';

/** What a policy does when its timer fires. */
type Due = { at: number; action: 'checkpoint' | 'idle-check' | 'stop-paused'; summary: string };

/**
 * The session's policies, on durable timers: an automatic checkpoint every so much running time, a pause after so
 * much idleness, a stop after so long paused. Each timer is planned from timestamps the state carries (the last
 * checkpoint, the last activity, when the session paused), so it survives worker and server restarts and
 * continue-as-new; a change of phase, a checkpoint, `configure` or `touch` plans it again.
 */
export class PolicyClock {
  /** Bumped by whatever changes the plan: the timer under way is cancelled and planned again. */
  private epoch = 0;
  /** When an automatic checkpoint was last skipped for want of activity (the next one is a period later). */
  private skippedAt = 0;

  constructor(
    private readonly session: Session,
    private readonly queue: ControlQueue,
    private readonly controller: SessionController,
  ) {}

  replan(): void {
    this.epoch++;
  }

  start(done: () => boolean): void {
    void (async () => {
      let seen = this.signature();
      for (;;) {
        if (done() || isFinal(this.session.state.phase)) return;
        const due = this.next();
        const epoch = this.epoch;
        const changed = () => done() || this.epoch !== epoch || this.signature() !== seen;
        if (!due) {
          await condition(changed);
        } else {
          const fired = await this.wait(due, changed);
          if (fired && !changed()) {
            const before = this.signature();
            await this.act(due);
            // An action that changed nothing (refused: another control got there first) waits before trying again.
            if (this.signature() === before && this.epoch === epoch) await condition(changed, '1 minute');
          }
        }
        seen = this.signature();
      }
    })();
  }

  /** What the plan depends on, so that a change made anywhere replans without every site saying so. */
  private signature(): string {
    const { state } = this.session;
    const rc = state.runControl;
    return [state.phase, rc.lastCheckpointAt, rc.lastActivityAt, rc.pausedAt, JSON.stringify(rc.policies)].join('|');
  }

  private next(): Due | null {
    const { state } = this.session;
    const rc = state.runControl;
    const p = rc.policies;
    const candidates: Due[] = [];
    if (state.phase === 'running') {
      if (p.checkpointEveryMs !== undefined) {
        const since = Math.max(
          ms(rc.lastCheckpointAt),
          ms(state.lastRestore?.at ?? null),
          ms(state.startedAt),
          this.skippedAt,
        );
        candidates.push({
          at: since + p.checkpointEveryMs,
          action: 'checkpoint',
          summary: `auto checkpoint in ${human(p.checkpointEveryMs)}`,
        });
      }
      if (p.idlePauseAfterMs !== undefined) {
        candidates.push({
          at: ms(rc.lastActivityAt) + p.idlePauseAfterMs,
          action: 'idle-check',
          summary: `idle pause after ${human(p.idlePauseAfterMs)} without activity`,
        });
      }
    } else if (state.phase === 'paused' && p.stopPausedAfterMs !== undefined && rc.pausedAt) {
      candidates.push({
        at: ms(rc.pausedAt) + p.stopPausedAfterMs,
        action: 'stop-paused',
        summary: `auto stop after ${human(p.stopPausedAfterMs)} paused`,
      });
    }
    return candidates.sort((a, b) => a.at - b.at)[0] ?? null;
  }

  /** Sleeps until `due` (true) unless the plan changes first (false). */
  private async wait(due: Due, changed: () => boolean): Promise<boolean> {
    const delay = due.at - Date.now();
    if (delay <= 0) return true;
    return !(await condition(changed, delay, { summary: due.summary }));
  }

  private async act(due: Due): Promise<void> {
    const { session, queue, controller } = this;
    const { state } = session;
    const rc = state.runControl;
    if (due.action === 'stop-paused') {
      const reason = `paused for longer than ${human(rc.policies.stopPausedAfterMs!)}`;
      session.record({ kind: 'policy', at: now(), action: 'stop', reason });
      const input: StopInput = { checkpoint: false, reason };
      await queue.accept('stop', input, (x) => controller.stop(x)).catch(ignore);
      return;
    }
    const seen = await this.runtimeActivity(due.action === 'idle-check' ? 'idle pause' : 'automatic checkpoint');
    if (due.action === 'idle-check') {
      if (seen !== null && seen > ms(rc.lastActivityAt)) {
        rc.lastActivityAt = new Date(seen).toISOString();
        return; // active after all: planned again from the activity seen
      }
      const reason = `idle for ${human(rc.policies.idlePauseAfterMs!)}`;
      session.record({ kind: 'policy', at: now(), action: 'pause', reason });
      const input: PauseInput = { reason };
      await queue.accept('pause', input, (x) => controller.pause(x)).catch(ignore);
      return;
    }
    if (rc.policies.checkpointOnlyIfActive && seen !== null && seen <= ms(rc.lastCheckpointAt)) {
      this.skippedAt = Date.now();
      this.replan();
      return;
    }
    await queue
      .serial(async () => {
        if (state.phase !== 'running') return;
        session.apply({ type: 'checkpointRequested' });
        try {
          await controller.capture('automatic');
          session.apply({ type: 'checkpointSucceeded' });
        } catch (err) {
          session.apply({ type: 'checkpointFailed' });
          session.controlFailed('checkpoint', err);
          // The next attempt is a period later, not at once.
          this.skippedAt = Date.now();
        }
      }, 'automatic checkpoint')
      .catch(ignore);
  }

  /**
   * When the runtime last showed activity, by the workflow's clock (the host tells how long ago); null when it cannot
   * tell or cannot be asked.
   */
  private async runtimeActivity(purpose: string): Promise<number | null> {
    const { state } = this.session;
    const runtime = state.runtime;
    if (!runtime) return null;
    try {
      const host = askHost(runtime.hostTaskQueue, state.spec.liveness);
      const summary = `ask how long the runtime is idle (${purpose})`;
      if (patched(POLICY_CLOCK_PATCH)) {
        const idleMs = await summarized(summary, host.idleFor, { instance: runtime });
        return idleMs === null ? null : Date.now() - idleMs;
      }
      const at = await summarized(summary, host.lastActivity, { instance: runtime });
      return at ? Date.parse(at) : null;
    } catch (err) {
      log.warn('runtime activity unknown', { error: failureMessage(err) });
      return null;
    }
  }
}

function ms(iso: string | null): number {
  return iso ? Date.parse(iso) : 0;
}

function ignore(): void {}

/** 600000 → "10m", 7200000 → "2h", 90000 → "1m30s". */
export function human(durationMs: number): string {
  const units: [string, number][] = [
    ['d', 86_400_000],
    ['h', 3_600_000],
    ['m', 60_000],
    ['s', 1_000],
  ];
  let rest = durationMs;
  const parts: string[] = [];
  for (const [name, size] of units) {
    const n = Math.floor(rest / size);
    if (n > 0) parts.push(`${n}${name}`);
    rest -= n * size;
    if (parts.length === 2) break;
  }
  return parts.join('') || `${durationMs}ms`;
}
