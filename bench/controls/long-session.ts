/**
 * A long session: many fire-and-forget checkpoints from four senders, across as many continue-as-new hand-overs as
 * the server suggests, then the whole timeline paged through.
 */
import { checkpointSignal, sessionWorkflowId } from '../../src/api';
import { untilCheckpoints } from './history';
import { timed } from './stats';
import type { ControlsSystem } from './system';

export interface LongSession {
  checkpoints: number;
  ms: number;
  runs: number;
  /** Runs the server lists for the workflow id (should be `runs`). */
  listedRuns: number;
  longestHistory: number;
  /** Timeline pages (1,000 entries each) read, entries in them, checkpoints among them, indices dense. */
  pages: number;
  entries: number;
  checkpointEntries: number;
  dense: boolean;
  pagingMs: number;
}

const SENDERS = 4;

export async function measureLongSession(sys: ControlsSystem, checkpoints: number): Promise<LongSession> {
  const sessionId = `long-${sys.runId}`;
  const session = await sys.sessions.start({ sessionId, runtime: { kind: 'memory', initialState: 'x' } });
  const perSender = Math.ceil(checkpoints / SENDERS);
  const sent = await timed(async () => {
    await Promise.all(
      Array.from({ length: SENDERS }, async (_, s) => {
        for (let n = s * perSender; n < Math.min(checkpoints, (s + 1) * perSender); n++) {
          await session.workflow.signal(checkpointSignal, {});
        }
      }),
    );
    await untilCheckpoints(session, checkpoints);
  });
  const { runs } = await session.status();
  let listedRuns = 0;
  let longestHistory = 0;
  for await (const wf of sys.client.workflow.list({ query: `WorkflowId = '${sessionWorkflowId(sessionId)}'` })) {
    listedRuns++;
    longestHistory = Math.max(longestHistory, wf.historyLength);
  }
  // Visibility has the length of closed runs; the running one's is the server's own count.
  longestHistory = Math.max(longestHistory, (await session.workflow.describe()).historyLength);

  let pages = 0;
  let entries = 0;
  let checkpointEntries = 0;
  let dense = true;
  const paging = await timed(async () => {
    let from: number | null = 1;
    while (from !== null) {
      const page = await session.timelinePage({ from, limit: 1000 });
      pages++;
      for (const e of page.entries) {
        if (e.index !== ++entries) dense = false;
        if (e.kind === 'checkpoint') checkpointEntries++;
      }
      from = page.next;
    }
  });
  await session.stop({ checkpoint: false });
  return {
    checkpoints,
    ms: sent.ms,
    runs,
    listedRuns,
    longestHistory,
    pages,
    entries,
    checkpointEntries,
    dense,
    pagingMs: paging.ms,
  };
}
