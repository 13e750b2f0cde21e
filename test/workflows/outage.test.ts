import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { NativeConnection, Worker } from '@temporalio/worker';
import { fleetTaskQueue, hostWorkflowId } from '../../src/api';
import { freePort, startDevServer, type DevServer } from '../../src/dev-server';
import { LATE_QUESTION_SLACK_MS } from '../../src/workflows/host-workflow';
import { startSteadyHost } from '../helpers/steady-host';
import { eventually, runningStatus, startTestSystem, type TestSystem } from '../helpers/temporal';

/**
 * A Temporal outage longer than every heartbeat timeout, with the worker and its processes healthy throughout: once
 * the server is back, no session may be declared lost, restored or rolled back to its checkpoint.
 */
const OUTAGE_MS = 40_000;

let dir: string;
let port: number;
let server: DevServer | undefined;
let sys: TestSystem | undefined;

async function serve(): Promise<DevServer> {
  return startDevServer({
    port,
    uiPort: null,
    dbFilename: path.join(dir, 'temporal.db'),
    logFile: path.join(dir, 'log'),
  });
}

beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ds-outage-'));
  port = await freePort();
  server = await serve();
  sys = await startTestSystem({ address: server.address });
});
afterAll(async () => {
  await sys?.close();
  await server?.stop();
  fs.rmSync(dir, { recursive: true, force: true });
});

/** How many activities of this name the workflow scheduled, and how many of those completed and timed out. */
async function activities(workflowId: string, name: string) {
  const history = await sys!.client.workflow.getHandle(workflowId).fetchHistory();
  const events = history.events ?? [];
  const scheduled = new Set(
    events
      .filter((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === name)
      .map((e) => String(e.eventId)),
  );
  const of = (id: unknown) => scheduled.has(String(id));
  return {
    scheduled: scheduled.size,
    completed: events.filter((e) => of(e.activityTaskCompletedEventAttributes?.scheduledEventId)).length,
    timedOut: events.filter((e) => of(e.activityTaskTimedOutEventAttributes?.scheduledEventId)).length,
  };
}

/** How many sessions' reports the monitor sent: its own signals (before tellSessions), or batches of them. */
async function told(workflowId: string): Promise<number> {
  const history = await sys!.client.workflow.getHandle(workflowId).fetchHistory();
  return (history.events ?? []).filter(
    (e) =>
      e.signalExternalWorkflowExecutionInitiatedEventAttributes ||
      e.activityTaskScheduledEventAttributes?.activityType?.name === 'tellSessions',
  ).length;
}

test(`a ${OUTAGE_MS / 1000} s server outage with a live worker: no session is lost or rolled back`, async () => {
  const s = sys!;
  const memory = await s.sessions.start({
    sessionId: `outage-mem-${crypto.randomUUID().slice(0, 6)}`,
    runtime: { kind: 'memory' },
  });
  const workspace = await s.sessions.start({
    sessionId: `outage-ws-${crypto.randomUUID().slice(0, 6)}`,
    runtime: { kind: 'workspace', command: ['sh', '-c', 'while :; do date +%s%N >> ticks; sleep 0.2; done'] },
    liveness: { heartbeatTimeoutMs: 3_000, hostTimeoutMs: 3_000 },
  });
  const before = await Promise.all([runningStatus(memory), runningStatus(workspace)]);
  await memory.checkpoint();
  await workspace.checkpoint();
  s.memory.write(before[0].runtime.instanceId, 'work after the checkpoint');

  // kill -9: no graceful anything; the SQLite file keeps the sessions.
  server!.process.kill('SIGKILL');
  await new Promise((r) => setTimeout(r, OUTAGE_MS));
  server = await serve();

  // The host's lease timed out meanwhile; its monitor asks the host, which answers: nobody is told of a loss.
  const monitor = hostWorkflowId(s.firstHost.hostTaskQueue);
  await eventually(async () => (await activities(monitor, 'describeHost')).completed > 0, 90_000);
  await eventually(async () => {
    const d = await s.client.workflow.getHandle(monitor).describe();
    return d.raw.pendingActivities?.some((a) => a.activityType?.name === 'holdHostLease') || undefined;
  }, 30_000);
  const after = await Promise.all([runningStatus(memory), runningStatus(workspace)]);
  for (const [i, session] of [memory, workspace].entries()) {
    expect(after[i]!.runtime.instanceId).toBe(before[i]!.runtime.instanceId);
    expect((await session.timeline()).map((e) => e.kind)).toEqual(['checkpoint']);
  }
  // Not rolled back: the work after the checkpoint is still there, the same process still runs.
  expect(s.memory.read(after[0].runtime.instanceId).toString('utf8')).toBe('work after the checkpoint');
  expect(() => process.kill(before[1].runtime.pid!, 0)).not.toThrow();
  await Promise.all([memory.stop({ checkpoint: false }), workspace.stop({ checkpoint: false })]);
});

test('a question to a host that a server running behind records as unanswered late is asked again', async () => {
  const s = sys!;
  const hostTaskQueue = `${s.taskQueue}@late-${crypto.randomUUID().slice(0, 6)}`;
  const host = await startSteadyHost(server!.address, hostTaskQueue);
  const hostTimeoutMs = 10_000;
  const monitor = await s.client.workflow.start('hostWorkflow', {
    workflowId: hostWorkflowId(hostTaskQueue),
    taskQueue: fleetTaskQueue(s.taskQueue),
    args: [{ hostTaskQueue, attached: [{ instanceId: 'late-1', sessionWorkflowId: 'session-late-1', hostTimeoutMs }] }],
  });
  try {
    await eventually(async () => host.leases.length === 1 || undefined);
    // The host's worker stops: its lease ends, and its monitor asks the host with nobody polling.
    await host.stop();
    await eventually(async () => (await activities(monitor.workflowId, 'describeHost')).scheduled === 1 || undefined);
    // The server stops before the question's timeout is due, and resumes after that and the slack: it records the
    // question as not picked up, late, as a dev server minutes behind did with a live host.
    server!.process.kill('SIGSTOP');
    await new Promise((r) => setTimeout(r, hostTimeoutMs + LATE_QUESTION_SLACK_MS + 5_000));
    server!.process.kill('SIGCONT');
    await eventually(async () => (await activities(monitor.workflowId, 'describeHost')).timedOut === 1 || undefined);
    await host.start();
    // Asked again, the host answers and is leased again: no session was told it was lost.
    await eventually(async () => host.leases.length === 2 || undefined, 60_000);
    const asked = await activities(monitor.workflowId, 'describeHost');
    expect(asked).toMatchObject({ scheduled: 2, completed: 1, timedOut: 1 });
    expect(await told(monitor.workflowId)).toBe(0);
  } finally {
    server!.process.kill('SIGCONT');
    await monitor.terminate('test done').catch(() => undefined);
    await host.close();
  }
}, 180_000);

test('a host is not declared lost while no worker picks up a question anyone could answer', async () => {
  // A fleet of its own whose sessions' queue nobody polls: the monitor's control question is never picked up, as on a
  // server too far behind to hand any worker a task. Its host stops, and comes back after two unanswered questions.
  const s = sys!;
  const fleet = `${s.taskQueue}-behind-${crypto.randomUUID().slice(0, 6)}`;
  const hostTaskQueue = `${fleet}@host`;
  const connection = await NativeConnection.connect({ address: server!.address });
  const monitorWorker = await Worker.create({
    connection,
    taskQueue: fleetTaskQueue(fleet),
    workflowBundle: { codePath: process.env.DS_TEST_WORKFLOW_BUNDLE! },
  });
  const monitorRunning = monitorWorker.run();
  const host = await startSteadyHost(server!.address, hostTaskQueue);
  const monitor = await s.client.workflow.start('hostWorkflow', {
    workflowId: hostWorkflowId(hostTaskQueue),
    taskQueue: fleetTaskQueue(fleet),
    args: [
      {
        hostTaskQueue,
        attached: [
          {
            instanceId: 'behind-1',
            sessionWorkflowId: 'session-behind-1',
            heartbeatTimeoutMs: 3_000,
            hostTimeoutMs: 3_000,
          },
        ],
      },
    ],
  });
  try {
    await eventually(async () => host.leases.length === 1 || undefined);
    await host.stop();
    await eventually(
      async () => (await activities(monitor.workflowId, 'describeHost')).timedOut >= 2 || undefined,
      60_000,
    );
    expect((await activities(monitor.workflowId, 'askAnyWorker')).timedOut).toBeGreaterThanOrEqual(2);
    await host.start();
    await eventually(async () => host.leases.length === 2 || undefined, 60_000);
    expect((await activities(monitor.workflowId, 'describeHost')).completed).toBe(1);
    expect(await told(monitor.workflowId)).toBe(0);
  } finally {
    await monitor.terminate('test done').catch(() => undefined);
    await host.close();
    monitorWorker.shutdown();
    await monitorRunning;
    await connection.close();
  }
}, 180_000);
