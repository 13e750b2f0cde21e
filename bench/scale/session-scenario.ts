/** The project's worker under load: memory sessions through their whole lifecycle, then workspace sessions. */
import { DEFAULT_MAX_SESSIONS } from '../../src/activities';
import { SessionClient, type SessionHandle } from '../../src/client';
import { Calls, inPool } from './load';
import {
  ids,
  measureLifecycle,
  withScenarioWorker,
  type FilesSampler,
  type ScaleContext,
  type ScenarioResult,
  type WorkerFleet,
} from './scenario';

export interface WorkspaceResult {
  sessions: number;
  calls: Calls;
  /** Open files of the worker: with nothing running; the peak while they started; during the checkpoints. */
  openFiles: { empty: number; starting: number; checkpoints: number };
  checkpointsMs: number;
}

export interface SessionResult extends ScenarioResult {
  workspace: WorkspaceResult;
  /** When the last session stopped, before the worker did: what the fleet went through after it is not the run's. */
  finishedAt: Date;
}

/** Slow enough that 200 of them fork little on a shared machine; any sleeping loop would do. */
const WORKSPACE_COMMAND = ['sh', '-c', 'while true; do sleep 10; done'];

export async function runSessions(ctx: ScaleContext, bundlePath: string): Promise<SessionResult> {
  // The benchmark may ask for more sessions on one worker than the default limit. Headroom over N: the directory counts
  // a placement before the host's next report does, so a resume placed while its pause is being reported counts twice.
  const { sessions, workspaceSessions, concurrency, warmup } = ctx.options;
  const maxSessions = Math.max(DEFAULT_MAX_SESSIONS, Math.max(sessions, workspaceSessions) + 2 * concurrency + warmup);
  return withScenarioWorker(ctx, { mode: 'sessions', bundlePath, maxSessions }, async ({ fleet, files, taskQueue }) => {
    const client = new SessionClient({ client: ctx.client, taskQueue });
    const start = (calls: Calls, sessionId: string): Promise<SessionHandle> =>
      calls.time('start', () => client.start({ sessionId, runtime: { kind: 'memory', initialState: sessionId } }));
    const lifecycle = async (calls: Calls, session: SessionHandle): Promise<void> => {
      await calls.time('checkpoint', () => session.checkpoint());
      await calls.time('pause', () => session.pause());
      await calls.time('resume', () => session.resume());
      await calls.time('stop', () => session.stop());
    };

    const probe = async (calls: Calls, session: SessionHandle): Promise<void> => {
      await calls.time('control', () => session.checkpoint());
    };
    const measured = await measureLifecycle(ctx, fleet, files, { prefix: 'memory', start, run: lifecycle, probe });
    const workspace = await runWorkspaces(ctx, client, fleet, files);
    return { ...measured, workspace, finishedAt: new Date() };
  });
}

/** Workspace sessions (a real process each) all running, then checkpointed `concurrency` at a time, then stopped. */
async function runWorkspaces(
  ctx: ScaleContext,
  client: SessionClient,
  worker: WorkerFleet,
  files: FilesSampler,
): Promise<WorkspaceResult> {
  const { concurrency, workspaceSessions } = ctx.options;
  files.enter('workspace-idle');
  await worker.sample(); // (a GC, so that leftovers of the memory sessions hold no descriptors)
  const calls = new Calls();
  const sessions: SessionHandle[] = [];
  files.enter('workspace-start');
  try {
    await inPool(ids(ctx, 'workspace', workspaceSessions), concurrency, async (sessionId) => {
      sessions.push(
        await calls.time('start', () =>
          client.start({ sessionId, runtime: { kind: 'workspace', command: WORKSPACE_COMMAND } }),
        ),
      );
    });
    files.enter('workspace-checkpoints');
    const checkpointsMs = await inPool(sessions, concurrency, (s) => calls.time('checkpoint', () => s.checkpoint()));
    files.enter('workspace-stop');
    return {
      sessions: sessions.length,
      calls,
      openFiles: {
        empty: files.peak('workspace-idle')!,
        starting: files.peak('workspace-start')!,
        checkpoints: files.peak('workspace-checkpoints')!,
      },
      checkpointsMs,
    };
  } finally {
    // Stopped without a final checkpoint: the checkpoints above were the measurement.
    await inPool(sessions, concurrency, (s) => calls.time('stop', () => s.stop({ checkpoint: false })));
  }
}
