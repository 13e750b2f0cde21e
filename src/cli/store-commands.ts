import type { Config } from '../config';
import { DEFAULT_TENANT } from '../domain/names';
import {
  KeyringConfigError,
  MissingMasterKeyError,
  openSnapshotStore,
  type SnapshotMaintenance,
  type TimelineLog,
} from '../snapshots';
import { CLI_ERROR_CODES, CliError } from './errors';
import type { Invocation } from './parse';
import { verificationReport, type Output } from './render';

/** The commands that read and write the snapshot store directly, as a worker would. */
export type StoreInvocation = Extract<Invocation, { command: 'verify' | 'gc' | 'rekey' | 'shred' }>;

export async function runStoreCommand(invocation: StoreInvocation, config: Config): Promise<Output> {
  const root = await openSnapshotStore(config).catch((err: unknown) => {
    if (err instanceof KeyringConfigError || err instanceof MissingMasterKeyError) {
      throw new CliError(CLI_ERROR_CODES.InvalidConfig, err.message, { cause: err });
    }
    throw err;
  });
  const store: SnapshotMaintenance = root.forTenant(invocation.values.tenant ?? DEFAULT_TENANT);
  switch (invocation.command) {
    case 'verify': {
      const results = await store.verifyLineage(invocation.sessionId);
      const wanted = new Set(results.map((r) => r.checkpointId));
      const indices = await checkpointIndices(store as Partial<TimelineLog>, invocation.sessionId, wanted);
      // Led by the timeline index, the number every other command shows and takes; the sequence is in the JSON.
      return verificationReport(
        results,
        (id) => indices.get(id),
        (r) => `v${r.formatVersion ?? '?'}  `,
      );
    }
    case 'gc': {
      const report = await store.gc({ dryRun: invocation.values['dry-run'] === true });
      const verb = report.dryRun ? 'would remove' : 'removed';
      return {
        json: report,
        text: [
          `${verb} ${report.packsRemoved.length} pack(s), ${report.bytesRemoved} bytes; kept ${report.packsKept}`,
          `${verb} ${report.abandoned.tempFiles} temp file(s) and ${report.abandoned.pins} pin(s) of dead writers, ${report.abandoned.bytes} bytes`,
          ...report.skipped.map((skip) => `skipped ${skip.lineage}: ${skip.reason}`),
        ],
      };
    }
    case 'rekey': {
      const r = await store.rekey();
      return { json: r, text: [`re-wrapped ${r.rewrapped} data key(s); ${r.unchanged} already under the primary key`] };
    }
    case 'shred': {
      const { sessionId } = invocation;
      const lineage = await store.shred(sessionId);
      const scope = lineage === sessionId ? sessionId : `lineage ${lineage} (${sessionId} is a fork of it)`;
      return { json: { shredded: sessionId, lineage }, text: [`data key of ${scope} destroyed`] };
    }
  }
}

/** Each checkpoint's timeline index, from the store's timeline; none where it cannot be read (verify says why). */
async function checkpointIndices(
  log: Partial<TimelineLog>,
  sessionId: string,
  wanted: ReadonlySet<string>,
): Promise<Map<string, number>> {
  const indices = new Map<string, number>();
  if (typeof log.readTimeline !== 'function') return indices;
  try {
    // Read until every verified checkpoint has its index (a long session's timeline is not read to its end).
    for (let from: number | null = 1; from !== null && indices.size < wanted.size;) {
      const page = await log.readTimeline(sessionId, { from, limit: 1000 });
      for (const e of page.entries as { kind: string; index?: number; checkpoint?: { checkpointId: string } }[]) {
        const id = e.kind === 'checkpoint' ? e.checkpoint?.checkpointId : undefined;
        if (id !== undefined && wanted.has(id) && e.index !== undefined) indices.set(id, e.index);
      }
      from = page.entries.length ? page.next : null;
    }
  } catch {
    // A timeline record that does not verify is not this command's finding: the checkpoints' own results are.
  }
  return indices;
}
