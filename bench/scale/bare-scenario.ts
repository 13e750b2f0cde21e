/** The baselines: the same Temporal calls as a session with nothing behind them, and start+signal+complete. */
import { WithStartWorkflowOperation, type WorkflowHandle } from '@temporalio/client';
import * as path from 'node:path';
import {
  bareCheckpointUpdate,
  bareDoneSignal,
  barePauseUpdate,
  bareResumeUpdate,
  bareSessionWorkflow,
  bareSignalWorkflow,
  bareStartUpdate,
  bareStopUpdate,
} from './bare-workflows';
import { Calls, inPool } from './load';
import { OpenFilesSampler } from './procfs';
import { ids, measureIdle, RequestCounter, startInHalves, type ScaleContext, type ScenarioResult } from './scenario';
import { startWorkerProcess } from './worker-handle';

export interface BareResult extends ScenarioResult {
  /** Start, signal, result: N of them at the same concurrency. */
  signalMs: number;
  signalCalls: Calls;
}

export async function runBare(ctx: ScaleContext, bundlePath: string): Promise<BareResult> {
  const taskQueue = `scale-bare-${ctx.runId}`;
  const worker = await startWorkerProcess({
    mode: 'bare',
    address: ctx.address,
    taskQueue,
    bundlePath,
    dir: path.join(ctx.dir, 'bare'),
    maxSessions: ctx.options.sessions,
  });
  const files = new OpenFilesSampler(worker.pid);
  try {
    const start = async (calls: Calls, workflowId: string): Promise<WorkflowHandle> => {
      const startWorkflowOperation = new WithStartWorkflowOperation(bareSessionWorkflow, {
        workflowId,
        taskQueue,
        workflowIdConflictPolicy: 'FAIL',
      });
      await calls.time('start', () =>
        ctx.client.workflow.executeUpdateWithStart(bareStartUpdate, { startWorkflowOperation }),
      );
      return startWorkflowOperation.workflowHandle();
    };
    const lifecycle = async (calls: Calls, handle: WorkflowHandle): Promise<void> => {
      for (const [name, update] of [
        ['checkpoint', bareCheckpointUpdate],
        ['pause', barePauseUpdate],
        ['resume', bareResumeUpdate],
        ['stop', bareStopUpdate],
      ] as const) {
        await calls.time(name, () => handle.executeUpdate(update));
      }
    };
    const signalled = async (calls: Calls, workflowId: string): Promise<void> => {
      const handle = await calls.time('start', () =>
        ctx.client.workflow.start(bareSignalWorkflow, { workflowId, taskQueue }),
      );
      await calls.time('signal', () => handle.signal(bareDoneSignal));
      await calls.time('result', () => handle.result());
    };

    const warm = new Calls();
    await inPool(ids(ctx, 'bare-warm', ctx.options.warmup), ctx.options.concurrency, async (id) => {
      await lifecycle(warm, await start(warm, id));
      await signalled(warm, `${id}-signal`);
    });
    if (warm.errors.length) throw new Error(`the baseline's warm-up failed: ${warm.errors[0]}`);
    const empty = await worker.sample();
    const emptyFiles = files.peak('idle')!;

    files.enter('run');
    const calls = new Calls();
    const handles: WorkflowHandle[] = [];
    const requests = new RequestCounter(ctx);
    const started = await requests.around(() =>
      startInHalves(
        ctx,
        ids(ctx, 'bare', ctx.options.sessions),
        async (id) => handles.push(await start(calls, id)),
        () => worker.sample(),
      ),
    );
    const idle = await measureIdle(ctx, worker.pid);
    const controlsMs = await requests.around(() =>
      inPool(handles, ctx.options.concurrency, (h) => lifecycle(calls, h)),
    );
    const after = await worker.sample();

    const signalCalls = new Calls();
    const signalMs = await inPool(ids(ctx, 'bare-signal', ctx.options.sessions), ctx.options.concurrency, (id) =>
      signalled(signalCalls, id),
    );
    return {
      startMs: started.ms,
      controlsMs,
      calls,
      memory: { empty, half: started.half, loaded: started.loaded, after },
      requestsPerWorkflow: requests.perWorkflow(ctx.options.sessions),
      idle,
      openFiles: { empty: emptyFiles, peak: files.peak('run')! },
      signalMs,
      signalCalls,
    };
  } finally {
    files.stop();
    await worker.stop();
  }
}
