/**
 * Placements through the fleet directory under load: `--in-flight` callers (default 100) asking for placements for
 * `--seconds` each way, against the project's own directory workflow on a dev server, while two hosts report their load
 * every 200 ms (as a host does while its load changes). Asked one placement per update (`place`, as workers did
 * before `placeMany`), then through a worker's `FleetMember`, which keeps one update in flight and sends the rest
 * together. Prints placements a second, latencies, failed calls (an 8 s deadline) and the updates the server aborted,
 * with the ratio of the two; nothing asserts.
 *
 *   npx tsx bench/directory.ts [--seconds 20] [--in-flight 100]
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { Client, Connection } from '@temporalio/client';
import { bundleWorkflowCode, DefaultLogger, NativeConnection, Runtime, Worker } from '@temporalio/worker';
import { HostState } from '../src/activities/host-state';
import { FleetMember } from '../src/activities/placement';
import { fleetTaskQueue, fleetWorkflowId, hostLoadSignal, placeUpdate } from '../src/api/fleet';
import { freePort, startDevServer } from '../src/dev-server';
import type { PlacementDecision } from '../src/domain/placement';
import { SESSION_WORKFLOWS } from '../src/workflow-bundle';
import { table } from './markdown';

const { values } = parseArgs({
  options: { seconds: { type: 'string', default: '20' }, 'in-flight': { type: 'string', default: '100' } },
  strict: true,
});
const SECONDS = Number(values.seconds);
const IN_FLIGHT = Number(values['in-flight']);
const REPORT_MS = 200;
const DEADLINE_MS = 8_000;

interface Round {
  way: string;
  placed: number;
  failed: number;
  p50: number;
  p99: number;
  aborted: number;
}

const quiet = { trace() {}, debug() {}, info() {}, warn() {}, error: console.error, log() {} };

async function main(): Promise<void> {
  Runtime.install({ logger: new DefaultLogger('ERROR'), shutdownSignals: [] });
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ds-directory-'));
  const logFile = path.join(dir, 'temporal.log');
  const server = await startDevServer({ port: await freePort(), uiPort: null, logFile });
  const connection = await NativeConnection.connect({ address: server.address });
  const clientConnection = await Connection.connect({ address: server.address });
  const client = new Client({ connection: clientConnection });
  const { code } = await bundleWorkflowCode({ ...SESSION_WORKFLOWS, logger: quiet });
  const rounds: Round[] = [];
  try {
    for (const way of ['one placement per update', 'batched (FleetMember)'] as const) {
      // A directory of its own for each way, so neither inherits the other's history.
      const taskQueue = `directory-${rounds.length}`;
      const worker = await Worker.create({
        connection,
        taskQueue: fleetTaskQueue(taskQueue),
        workflowBundle: { code },
        maxCachedWorkflows: 10,
      });
      await worker.runUntil(async () => {
        const member = new FleetMember({
          client,
          taskQueue,
          hostTaskQueue: `${taskQueue}@placer`,
          capacity: 1_000_000,
          host: new HostState(),
        });
        const handle = client.workflow.getHandle(fleetWorkflowId(taskQueue));
        const place = (): Promise<PlacementDecision | undefined> =>
          way === 'batched (FleetMember)'
            ? member.place({})
            : client.withDeadline(Date.now() + DEADLINE_MS, () => handle.executeUpdate(placeUpdate, { args: [{}] }));
        await reportLoads(client, taskQueue, 0);
        const abortedBefore = countAborted(logFile);
        const end = Date.now() + SECONDS * 1000;
        const reports = reportLoads(client, taskQueue, end);
        const latencies: number[] = [];
        let failed = 0;
        await Promise.all(
          Array.from({ length: IN_FLIGHT }, async () => {
            while (Date.now() < end) {
              const started = Date.now();
              const decision = await place().catch(() => undefined);
              if (decision?.ok) latencies.push(Date.now() - started);
              else failed++;
            }
          }),
        );
        await reports;
        latencies.sort((a, b) => a - b);
        rounds.push({
          way,
          placed: latencies.length,
          failed,
          p50: latencies[Math.floor(latencies.length / 2)] ?? NaN,
          p99: latencies[Math.floor(latencies.length * 0.99)] ?? NaN,
          aborted: countAborted(logFile) - abortedBefore,
        });
        await handle.terminate('benchmark done');
      });
    }
  } finally {
    await clientConnection.close();
    await connection.close();
    await server.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
  const [single, batched] = rounds as [Round, Round];
  console.log(
    `fleet directory: ${IN_FLIGHT} callers in flight for ${SECONDS} s each way, two hosts reporting every ${REPORT_MS} ms\n`,
  );
  console.log(
    table(
      ['way', 'placements / s', 'p50', 'p99', `failed (${DEADLINE_MS / 1000} s deadline)`, 'updates aborted'],
      rounds.map((r) => [
        r.way,
        (r.placed / SECONDS).toFixed(1),
        `${r.p50} ms`,
        `${r.p99} ms`,
        String(r.failed),
        String(r.aborted),
      ]),
    ),
  );
  console.log(
    `\nbatched / one per update: ${(batched.placed / Math.max(1, single.placed)).toFixed(1)}× the placements`,
  );
}

/** Two hosts report a changing load, as hosts do while sessions start; they also start the directory. */
async function reportLoads(client: Client, taskQueue: string, end: number): Promise<void> {
  for (let n = 0; Date.now() < end || n < 2; n++) {
    const host = `h${n % 2}`;
    await client.workflow
      .signalWithStart('fleetWorkflow', {
        workflowId: fleetWorkflowId(taskQueue),
        taskQueue: fleetTaskQueue(taskQueue),
        args: [{}],
        signal: hostLoadSignal,
        signalArgs: [
          {
            hostTaskQueue: `${taskQueue}@${host}`,
            workerId: host,
            incarnation: 'one',
            labels: [],
            running: n,
            capacity: 1_000_000,
            draining: false,
            begun: n,
            everyMs: 5_000,
          },
        ],
      })
      .catch(() => undefined);
    await new Promise((r) => setTimeout(r, REPORT_MS));
  }
}

/** Updates the server gave up on ("workflow update was aborted"), from its log. */
function countAborted(logFile: string): number {
  return (fs.readFileSync(logFile, 'utf8').match(/workflow update was aborted/g) ?? []).length;
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);
