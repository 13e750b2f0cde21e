import type { VerificationStatus } from '../domain/schemas';
import type { AbandonedReport, CleanAbandonedOptions } from './abandoned';

/** One checkpoint's line of a lineage verification. */
export interface VerifyResult {
  checkpointId: string;
  sequence: number | null;
  formatVersion: number | null;
  status: VerificationStatus;
  detail?: string;
}

export interface GcReport {
  dryRun: boolean;
  lineages: number;
  /** Lineages left untouched, with why (a manifest that cannot be read may reference any pack). */
  skipped: { lineage: string; reason: string }[];
  packsKept: number;
  packsRemoved: { lineage: string; packId: string; bytes: number }[];
  bytesRemoved: number;
  /** Temp files and pins of dead writers, untouched for ABANDONED_AFTER_MS, removed first (cleanAbandoned). */
  abandoned: AbandonedReport;
}

/**
 * What an operator does to a store, beside the sessions' reads and writes: the CLI's `verify`, `gc`, `rekey` and
 * `shred`, and the clean-up a worker runs at start. Safe while workers write (see each method).
 */
export interface SnapshotMaintenance {
  /**
   * Walks a session's checkpoints oldest first and checks each manifest, its link to its parent's manifest, and
   * every chunk's authentication tag. Reports one status per checkpoint; changes nothing.
   */
  verifyLineage(sessionId: string): Promise<VerifyResult[]>;
  /**
   * Removes packs no manifest of their lineage references, once older than the grace period and than the oldest
   * running writer's pin; dead writers' temp files and pins go first.
   */
  gc(options?: { dryRun?: boolean; now?: number }): Promise<GcReport>;
  /** Re-wraps every lineage's data key under the primary master key. Chunks are not rewritten. */
  rekey(): Promise<{ rewrapped: number; unchanged: number }>;
  /**
   * Destroys the data key of the session's lineage: every checkpoint of every session of the lineage is unreadable
   * from then on. Returns the lineage. The session's claim stays.
   */
  shred(sessionId: string): Promise<string>;
  /** Removes temp files and pins that writers which died mid-write left, once untouched for long enough. */
  cleanAbandoned(options?: CleanAbandonedOptions): Promise<AbandonedReport>;
}
