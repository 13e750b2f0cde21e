/**
 * Preloaded into the worker process (`--require`), and so into each of its workflow threads: the time of each call
 * into a workflow's V8 context, posted to the main thread (bench/scale/worker-process.ts) when it is long. The SDK cuts
 * such a call at its `isolateExecutionTimeout`; the longest call is the margin left. Plain JavaScript: a workflow
 * thread runs its preloads before any TypeScript loader is registered in it.
 */
'use strict';
const vm = require('node:vm');
const { BroadcastChannel, isMainThread } = require('node:worker_threads');

/** The channel bench/scale/worker-process.ts listens on. */
const CHANNEL = 'ds-bench-workflow-calls';
/** Shorter calls are not posted: a busy worker makes thousands a second. */
const POSTED_MS = 50;

if (!isMainThread) probe();

function probe() {
  const channel = new BroadcastChannel(CHANNEL);
  channel.unref();
  const shared = require('@temporalio/worker/lib/workflow/vm-shared');
  const reusable = require('@temporalio/worker/lib/workflow/reusable-vm');
  const types = new Map();
  let current = { workflowType: 'none', jobs: '' };

  const create = reusable.ReusableVMWorkflowCreator.prototype.createWorkflow;
  reusable.ReusableVMWorkflowCreator.prototype.createWorkflow = function (options) {
    types.set(options.info.runId, options.info.workflowType);
    return create.call(this, options);
  };
  const dispose = reusable.ReusableVMWorkflow.prototype.dispose;
  reusable.ReusableVMWorkflow.prototype.dispose = function () {
    types.delete(this.runId);
    return dispose.call(this);
  };
  const activate = shared.BaseVMWorkflow.prototype.activate;
  shared.BaseVMWorkflow.prototype.activate = function (activation) {
    current = { workflowType: types.get(this.runId) || 'unknown', jobs: jobKinds(activation.jobs || []) };
    return activate.call(this, activation);
  };

  const runInContext = vm.Script.prototype.runInContext;
  vm.Script.prototype.runInContext = function (context, options) {
    // Only the SDK's calls into a workflow carry a timeout.
    if (!options || options.timeout === undefined) return runInContext.call(this, context, options);
    const start = performance.now();
    try {
      return runInContext.call(this, context, options);
    } finally {
      const ms = performance.now() - start;
      if (ms >= POSTED_MS) channel.postMessage({ ms, ...current });
    }
  };
}

/** `signalWorkflow ×3, fireTimer`: what an activation asked of the workflow. */
function jobKinds(jobs) {
  const counts = new Map();
  for (const job of jobs) {
    const kind = Object.keys(job).find((k) => k !== 'variant' && job[k] != null) || '?';
    counts.set(kind, (counts.get(kind) || 0) + 1);
  }
  return [...counts].map(([kind, n]) => (n > 1 ? `${kind} ×${n}` : kind)).join(', ');
}
