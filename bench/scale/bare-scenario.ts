/** The baselines: the same Temporal calls as a session with nothing behind them, and start+signal+complete. */
import { WithStartWorkflowOperation, type WorkflowHandle } from '@temporalio/client';
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
import { ids, measureLifecycle, withScenarioWorker, type ScaleContext, type ScenarioResult } from './scenario';

export interface BareResult extends ScenarioResult {
  /** Start, signal, result: N of them at the same concurrency. */
  signalMs: number;
  signalCalls: Calls;
}

export async function runBare(ctx: ScaleContext, bundlePath: string): Promise<BareResult> {
  return withScenarioWorker(
    ctx,
    { mode: 'bare', bundlePath, maxSessions: ctx.options.sessions },
    async ({ fleet, files, taskQueue }) => {
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

      const measured = await measureLifecycle(ctx, fleet, files, {
        prefix: 'bare',
        start,
        run: lifecycle,
        probe: async (calls, handle) => {
          await calls.time('control', () => handle.executeUpdate(bareCheckpointUpdate));
        },
        alsoWarm: signalled,
      });

      const signalCalls = new Calls();
      const signalMs = await inPool(ids(ctx, 'bare-signal', ctx.options.sessions), ctx.options.concurrency, (id) =>
        signalled(signalCalls, id),
      );
      return { ...measured, signalMs, signalCalls };
    },
  );
}
