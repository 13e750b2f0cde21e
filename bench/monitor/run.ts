/**
 * How long a host monitor's run takes to replay, by the attachments it holds. A task that misses its sticky worker
 * (a worker restarted, the workflow evicted, a task timed out) replays the whole run, and must do so within the
 * workflow task timeout (10 s) or it times out and is replayed again. The history here is the worst case: every
 * attachment arrived before the monitor's first task completed, as they pile up behind a slow task on a loaded host.
 * Each is replayed against the project's workflows and against a bare workflow of the same name that only keeps the
 * attachments (bare-monitor.ts), best of three; the monitor's own bound (MONITOR_RUN_EVENTS) is chosen from these
 * figures. Nothing here asserts a time: it prints what it measured.
 *
 *   npx tsx bench/monitor/run.ts [--quick]
 */
import path from 'node:path';
import { parseArgs } from 'node:util';
import { Client, Connection } from '@temporalio/client';
import { bundleWorkflowCode, DefaultLogger, Runtime, Worker, type WorkflowBundle } from '@temporalio/worker';
import { attachRuntimeSignal } from '../../src/api/messages';
import { freePort, startDevServer } from '../../src/dev-server';
import { SESSION_WORKFLOWS } from '../../src/workflow-bundle';
import { MONITOR_RUN_EVENTS } from '../../src/workflows/host-workflow';
import { table } from '../markdown';

const { values } = parseArgs({ options: { quick: { type: 'boolean', default: false } }, strict: true });
const SIZES = values.quick ? [500, MONITOR_RUN_EVENTS] : [500, MONITOR_RUN_EVENTS, 4_096, 8_000];
const ROUNDS = 3;
const TASK_TIMEOUT_MS = 10_000;
/** The 10,000-session run replayed the monitor up to three times slower than a quiet machine: a margin of five. */
const LOAD_MARGIN = 5;
const quietBundler = { trace() {}, debug() {}, info() {}, warn: console.warn, error: console.error, log() {} };

async function best(bundle: WorkflowBundle, history: Awaited<ReturnType<typeof fetchAttached>>): Promise<number> {
  let fastest = Infinity;
  for (let r = 0; r < ROUNDS; r++) {
    const started = performance.now();
    await Worker.runReplayHistory({ workflowBundle: bundle }, history.events, history.workflowId);
    fastest = Math.min(fastest, performance.now() - started);
  }
  return fastest;
}

async function fetchAttached(client: Client, count: number) {
  const workflowId = `host-bench-${count}-${Date.now()}`;
  const handle = await client.workflow.start('hostWorkflow', {
    workflowId,
    taskQueue: 'bench-nobody-polls',
    args: [{ hostTaskQueue: 'bench-host' }],
  });
  let next = 0;
  await Promise.all(
    Array.from({ length: 32 }, async () => {
      while (next < count) {
        const i = next++;
        await handle.signal(attachRuntimeSignal, {
          instanceId: `memory-${String(i).padStart(6, '0')}-5f0c2a9e`,
          sessionWorkflowId: `session-bench-${String(i).padStart(6, '0')}`,
        });
      }
    }),
  );
  const events = await handle.fetchHistory();
  await handle.terminate('bench done');
  return { workflowId, events };
}

async function main(): Promise<void> {
  Runtime.install({ logger: new DefaultLogger('ERROR') });
  const monitor = await bundleWorkflowCode({ ...SESSION_WORKFLOWS, logger: quietBundler });
  const bare = await bundleWorkflowCode({
    workflowsPath: path.join(__dirname, 'bare-monitor.ts'),
    logger: quietBundler,
  });
  const server = await startDevServer({ port: await freePort(), uiPort: null });
  const connection = await Connection.connect({ address: server.address });
  try {
    const client = new Client({ connection });
    const rows: string[][] = [];
    let atBound = 0;
    for (const count of SIZES) {
      const history = await fetchAttached(client, count);
      const ms = await best(monitor, history);
      const floor = await best(bare, history);
      if (count === MONITOR_RUN_EVENTS) atBound = ms;
      rows.push([
        count.toLocaleString('en-US'),
        (history.events.events?.length ?? 0).toLocaleString('en-US'),
        ms.toFixed(0),
        floor.toFixed(0),
        (ms / floor).toFixed(2),
        (ms / count).toFixed(2),
        `${((ms / TASK_TIMEOUT_MS) * 100).toFixed(1)} %`,
      ]);
    }
    console.log(`\n## Host monitor: replay of a run by its attachments (best of ${ROUNDS})\n`);
    console.log(
      table(
        [
          'attachments',
          'events',
          'monitor ms',
          'bare ms',
          'monitor / bare',
          'ms per attachment',
          'of the task timeout',
        ],
        rows,
      ),
    );
    const verdict = atBound * LOAD_MARGIN <= TASK_TIMEOUT_MS ? 'PASS' : 'MISS';
    console.log(
      `\nA run at the monitor's bound (${MONITOR_RUN_EVENTS.toLocaleString('en-US')} events) replays in ` +
        `${atBound.toFixed(0)} ms: ${LOAD_MARGIN}× that is ${((atBound * LOAD_MARGIN) / 1000).toFixed(1)} s ` +
        `against the ${TASK_TIMEOUT_MS / 1000} s task timeout: ${verdict}`,
    );
  } finally {
    await connection.close();
    await server.stop();
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
