/**
 * The baselines of the controls benchmark: the cheapest Update round trip a workflow has, and the cheapest one that
 * runs an activity (the floor of any control that does I/O). Bundled on its own (never part of src/workflows) and
 * run by a worker of its own on its own task queue, in the bench process.
 */
import { condition, defineSignal, defineUpdate, proxyActivities, setHandler } from '@temporalio/workflow';

/** The bare worker's one activity: returns at once. */
export const bareActivities = {
  async noop(): Promise<null> {
    return null;
  },
};
const { noop } = proxyActivities<typeof bareActivities>({ startToCloseTimeout: '10 seconds' });

/** Does nothing and answers: what is left of its round trip is Temporal's own cost. */
export const bareNoopUpdate = defineUpdate<null>('noop');
/** Runs the no-op activity and answers: a workflow task, an activity, a workflow task. */
export const bareActivityUpdate = defineUpdate<null>('noopActivity');
export const bareDoneSignal = defineSignal('done');

/** Answers no-op updates until told it is done. */
export async function bareUpdateWorkflow(): Promise<void> {
  let done = false;
  setHandler(bareNoopUpdate, () => null);
  setHandler(bareActivityUpdate, async () => {
    await noop();
    return null;
  });
  setHandler(bareDoneSignal, () => {
    done = true;
  });
  await condition(() => done);
}
