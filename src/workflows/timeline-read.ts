import { proxyActivities } from '@temporalio/workflow';
import type { ReadTimelineInput, SessionActivities } from '../activities';

const { readTimeline } = proxyActivities<Pick<SessionActivities, 'readTimeline'>>({
  startToCloseTimeout: '30 seconds',
  retry: { initialInterval: '200 milliseconds', maximumInterval: '5 seconds', maximumAttempts: 5 },
});

/**
 * Reads one page of a session's timeline from the snapshot store on a worker, the only place that holds the store's
 * keys: clients, the CLI and the gateway page through what a session no longer holds (an ended session's whole
 * timeline) with this, and never open the store themselves. Short-lived; its history is its one activity.
 */
export async function timelineReadWorkflow(input: ReadTimelineInput): ReturnType<SessionActivities['readTimeline']> {
  return readTimeline(input);
}
