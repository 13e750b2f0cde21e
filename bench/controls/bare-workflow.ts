/**
 * The baseline of the controls benchmark: the cheapest Update round trip a workflow has. Bundled on its own (never
 * part of src/workflows) and run by a worker of its own on its own task queue, in the bench process.
 */
import { condition, defineSignal, defineUpdate, setHandler } from '@temporalio/workflow';

/** Does nothing and answers: what is left of its round trip is Temporal's own cost. */
export const bareNoopUpdate = defineUpdate<null>('noop');
export const bareDoneSignal = defineSignal('done');

/** Answers no-op updates until told it is done. */
export async function bareUpdateWorkflow(): Promise<void> {
  let done = false;
  setHandler(bareNoopUpdate, () => null);
  setHandler(bareDoneSignal, () => {
    done = true;
  });
  await condition(() => done);
}
