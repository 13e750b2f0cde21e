import { proxyActivities } from '@temporalio/workflow';
import type { SessionActivities, VerifyStoredInput } from '../activities';

const { verifyStoredCheckpoints } = proxyActivities<Pick<SessionActivities, 'verifyStoredCheckpoints'>>({
  // It reads every checkpoint the session keeps, chunk by chunk: as long as a large session's reads take.
  startToCloseTimeout: '30 minutes',
  retry: { initialInterval: '1 second', maximumInterval: '30 seconds', maximumAttempts: 5 },
});

/**
 * Verifies the checkpoints a session that has ended left in the snapshot store, on a worker, the only place that holds
 * the store's keys: clients, the CLI and the gateway verify with this what no session workflow holds any more, and
 * never open the store themselves. Short-lived; its history is its one activity.
 */
export async function checkpointVerifyWorkflow(
  input: VerifyStoredInput,
): ReturnType<SessionActivities['verifyStoredCheckpoints']> {
  return verifyStoredCheckpoints(input);
}
