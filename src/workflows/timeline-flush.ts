import { condition, deprecatePatch, log, sleep } from '@temporalio/workflow';
import { timelineEntries } from '../domain/operator-view';
import { local, summarized } from './activity-proxies';
import { failureMessage } from './failures';
import { RUN_CONTROL_PATCH } from './patches';
import type { Session } from './session';

/** Entries that wait before a flush of their own (captures take them along before that). */
const FLUSH_AT = 32;
/** Entries one local activity appends at most. */
const FLUSH_BATCH = 500;

/**
 * Takes the timeline entries the session records to the snapshot store, where the authoritative timeline lives. A
 * session that checkpoints often needs none of this (each capture takes them along); one that records without
 * checkpointing (verifications, refused signals, forks) flushes once FLUSH_AT wait, and every run flushes the rest
 * before it ends.
 */
export class TimelineFlush {
  private flushing = false;

  constructor(private readonly session: Session) {}

  get idle(): boolean {
    return !this.flushing;
  }

  /** Runs beside the controls for the life of the run. */
  start(done: () => boolean): void {
    deprecatePatch(RUN_CONTROL_PATCH);
    void (async () => {
      for (;;) {
        await condition(() => done() || this.session.runControl.unflushed.length >= FLUSH_AT);
        if (done()) return;
        await this.flush();
      }
    })();
  }

  /** Appends everything that waits; a store that stays unreachable through the retries is tried again later. */
  async flush(): Promise<boolean> {
    const { session } = this;
    if (this.flushing) {
      await condition(() => !this.flushing);
    }
    this.flushing = true;
    try {
      while (session.runControl.unflushed.length > 0) {
        const batch = session.runControl.unflushed.slice(0, FLUSH_BATCH);
        await summarized(`append ${timelineEntries(batch.length)}`, local.appendTimeline, {
          sessionId: session.id,
          ...session.tenancy,
          entries: batch,
        });
        session.flushed(batch);
      }
      return true;
    } catch (err) {
      log.warn('timeline not appended to the store; it stays in the session state and is tried again', {
        error: failureMessage(err),
      });
      await sleep('1 minute');
      return false;
    } finally {
      this.flushing = false;
    }
  }

  /** Before the run ends: everything in the store, or the run keeps trying (the entries exist nowhere else). */
  async flushAll(): Promise<void> {
    deprecatePatch(RUN_CONTROL_PATCH);
    for (let attempt = 0; attempt < 60 && !(await this.flush()); attempt++);
  }
}
