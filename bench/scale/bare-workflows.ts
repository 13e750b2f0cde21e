/**
 * The baselines of the scale benchmark: the least a workflow can do to make the Temporal calls a session makes.
 * Bundled on its own (never part of src/workflows), run by a worker with one no-op activity.
 */
import {
  allHandlersFinished,
  condition,
  defineSignal,
  defineUpdate,
  proxyActivities,
  setHandler,
} from '@temporalio/workflow';

/** The activities of the baseline worker: nothing to do, so what is left is Temporal's own cost. */
export interface BareActivities {
  noop(): Promise<null>;
}

const { noop } = proxyActivities<BareActivities>({ startToCloseTimeout: '1 minute' });

export const bareStartUpdate = defineUpdate<null>('start');
export const bareCheckpointUpdate = defineUpdate<null>('checkpoint');
export const barePauseUpdate = defineUpdate<null>('pause');
export const bareResumeUpdate = defineUpdate<null>('resume');
export const bareStopUpdate = defineUpdate<null>('stop');
export const bareDoneSignal = defineSignal('done');

/** A session's control surface with nothing behind it: each update runs one no-op activity; stop ends the run. */
export async function bareSessionWorkflow(): Promise<void> {
  let stopped = false;
  for (const update of [bareStartUpdate, bareCheckpointUpdate, barePauseUpdate, bareResumeUpdate]) {
    setHandler(update, () => noop());
  }
  setHandler(bareStopUpdate, async () => {
    const result = await noop();
    stopped = true;
    return result;
  });
  // The stop's caller is answered before the run closes, as a session answers its stop.
  await condition(() => stopped && allHandlersFinished());
}

/** The cheapest round trip a workflow has: started, signalled, complete. */
export async function bareSignalWorkflow(): Promise<void> {
  let done = false;
  setHandler(bareDoneSignal, () => {
    done = true;
  });
  await condition(() => done);
}
