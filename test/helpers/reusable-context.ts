/**
 * The SDK's reusable V8 workflow context, as a worker thread holds it, built from a bundle's code with no server. The
 * SDK does not export it: this is the one place that reaches into its internals (the shared-modules test, the scale
 * bench's context measurement).
 */
export interface ReusableContext {
  /** The `vm` context every workflow of the thread runs in. */
  context: object;
  createWorkflow(options: object): Promise<{ dispose(): Promise<void> }>;
}

export async function reusableContext(bundleCode: string): Promise<ReusableContext> {
  /* eslint-disable @typescript-eslint/no-require-imports -- not exported by the SDK */
  const { ReusableVMWorkflowCreator } = require('@temporalio/worker/lib/workflow/reusable-vm') as {
    ReusableVMWorkflowCreator: {
      create(bundle: unknown, timeoutMs: number, activities: Set<string>, patched: undefined): Promise<ReusableContext>;
    };
  };
  const { parseWorkflowCode } = require('@temporalio/worker/lib/worker') as {
    parseWorkflowCode(code: string): unknown;
  };
  /* eslint-enable @typescript-eslint/no-require-imports */
  return ReusableVMWorkflowCreator.create(parseWorkflowCode(bundleCode), 5_000, new Set<string>(), undefined);
}
