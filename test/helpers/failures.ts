import { ApplicationFailure, type Client } from '@temporalio/client';

/** The first ApplicationFailure in an error's cause chain: what a raw Temporal client caller reads the type from. */
export function applicationFailureOf(err: unknown): ApplicationFailure | undefined {
  for (let cause: unknown = err; cause instanceof Error; cause = cause.cause) {
    if (cause instanceof ApplicationFailure) return cause;
  }
  return undefined;
}

export function failureType(err: unknown): string | undefined {
  return applicationFailureOf(err)?.type ?? undefined;
}

export function failureMessage(err: unknown): string {
  return applicationFailureOf(err)?.message ?? String(err);
}

/** Workflow tasks that failed in the workflow's history: a message that fails one blocks the session. */
export async function workflowTaskFailures(client: Client, workflowId: string): Promise<number> {
  const history = await client.workflow.getHandle(workflowId).fetchHistory();
  return (history.events ?? []).filter((e) => e.workflowTaskFailedEventAttributes).length;
}
