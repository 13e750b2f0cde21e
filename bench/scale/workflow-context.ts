/**
 * What one workflow costs the worker thread that runs it, apart from Temporal: the SDK's reusable V8 context
 * evaluates a bundle's unshared modules once per workflow it creates (at each start, and at each replay of an evicted
 * one). Run in a process of its own (`--expose-gc`), with the SDK's own workflow creator, so the heap is the
 * workflows' alone. Run as a script: `node --expose-gc --import tsx bench/scale/workflow-context.ts <bundle.js>
 * <workflow type> <count>` prints one JSON line.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import { promisify } from 'node:util';
import { reusableContext } from '../../test/helpers/reusable-context';

export interface ContextCost {
  /** Main-heap growth per live workflow, after full collections. */
  heapPerWorkflow: number;
  /** Wall time to create one (its modules evaluated, its runtime initialised). */
  createMs: number;
  /** Heap still held after every workflow was disposed of and collected, in all. */
  heldAfterDispose: number;
}

export async function measureContexts(bundleFile: string, workflowType: string, count: number): Promise<ContextCost> {
  const { stdout } = await promisify(execFile)(
    process.execPath,
    ['--expose-gc', '--import', 'tsx', __filename, bundleFile, workflowType, String(count)],
    { maxBuffer: 1 << 20 },
  );
  return JSON.parse(stdout.trim().split('\n').pop()!) as ContextCost;
}

async function child(bundleFile: string, workflowType: string, count: number): Promise<ContextCost> {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (!gc) throw new Error('run with --expose-gc');
  const heap = () => {
    gc();
    gc();
    return process.memoryUsage().heapUsed;
  };
  const creator = await reusableContext(fs.readFileSync(bundleFile, 'utf8'));
  const info = (i: number) => ({
    workflowType,
    workflowId: `context-${i}`,
    runId: `run-${i}`,
    firstExecutionRunId: `run-${i}`,
    taskQueue: 'bench',
    namespace: 'default',
    attempt: 1,
    historyLength: 3,
    historySize: 300,
    continueAsNewSuggested: false,
    startTime: new Date(),
    runStartTime: new Date(),
    searchAttributes: {},
    typedSearchAttributes: [],
    memo: {},
    priority: {},
    unsafe: { isReplaying: false, now: Date.now },
  });
  const create = (i: number) =>
    creator.createWorkflow({ info: info(i), randomnessSeed: [1], now: Date.now(), showStackTraceSources: false });
  // One not counted: the thread's first workflow pays the shared modules and the compilation.
  await (await create(-1)).dispose();
  const before = heap();
  const workflows: { dispose(): Promise<void> }[] = [];
  const started = performance.now();
  for (let i = 0; i < count; i++) workflows.push(await create(i));
  const createMs = (performance.now() - started) / count;
  const heapPerWorkflow = (heap() - before) / count;
  for (let workflow = workflows.pop(); workflow; workflow = workflows.pop()) await workflow.dispose();
  return { heapPerWorkflow, createMs, heldAfterDispose: heap() - before };
}

if (require.main === module) {
  const [bundleFile, workflowType, count] = process.argv.slice(2);
  child(bundleFile!, workflowType!, Number(count)).then(
    (cost) => console.log(JSON.stringify(cost)),
    (err: unknown) => {
      console.error(err);
      process.exit(1);
    },
  );
}
