import crypto from 'node:crypto';
import {
  fleetQuery,
  fleetTaskQueue,
  fleetWorkflowId,
  hostLoadSignal,
  hostWorkflowId,
  sessionWorkflowId,
} from '../../src/api';
import type { Payload } from '@temporalio/common';
import type { SessionHandle } from '../../src/client';
import { freePort, startDevServer, type DevServer } from '../../src/dev-server';
import { eventually, runningStatus, startTestSystem, type TestSystem } from '../helpers/temporal';
import type { HostLeaseInput } from '../../src/activities/activity-inputs';
import type { HostLoadReport } from '../../src/domain/placement';
import type { HostAttachment } from '../../src/domain/records';

/**
 * Long sessions outgrow one workflow run. This server suggests continue-as-new after 150 events instead of 4,096, so
 * a few dozen checkpoints cross several runs.
 */
let server: DevServer;
let sys: TestSystem;
beforeAll(async () => {
  server = await startDevServer({
    port: await freePort(),
    uiPort: null,
    extraArgs: ['--dynamic-config-value', 'limit.historyCount.suggestContinueAsNew=150'],
  });
  sys = await startTestSystem({ address: server.address });
});
afterAll(async () => {
  await sys?.close();
  await server?.stop();
});

test('a session keeps its checkpoints, idempotency answers and runtime watch across continue-as-new', async () => {
  const sessionId = `long-${crypto.randomUUID().slice(0, 8)}`;
  const session = await sys.sessions.start({
    sessionId,
    runtime: { kind: 'workspace', command: ['sh', '-c', 'while true; do sleep 0.1; done'] },
  });
  const { runtime } = await runningStatus(session);
  const handle = sys.client.workflow.getHandle(sessionWorkflowId(sessionId));
  const firstRunId = (await handle.describe()).runId;

  const first = await session.checkpoint({ label: 'first', idempotencyKey: 'first' });
  for (let i = 2; i <= 40; i++) await session.checkpoint({ label: `#${i}` });

  const description = await handle.describe();
  expect(description.runId).not.toBe(firstRunId);
  const status = await session.status();
  expect(status).toMatchObject({ phase: 'running', checkpointCount: 40 });
  expect(status.runtime?.instanceId).toBe(runtime.instanceId);
  const checkpoints = (await session.timeline()).flatMap((e) => (e.kind === 'checkpoint' ? [e.checkpoint] : []));
  expect(checkpoints.map((c) => c.sequence)).toEqual(Array.from({ length: 40 }, (_, i) => i + 1));
  for (let i = 1; i < 40; i++) expect(checkpoints[i]!.parentId).toBe(checkpoints[i - 1]!.checkpointId);

  // The first key is answered from the carried state, in a run that never saw it.
  await expect(session.checkpoint({ label: 'first', idempotencyKey: 'first' })).resolves.toEqual(first);
  expect((await session.status()).checkpointCount).toBe(40);

  // The new run watches the same process: an exit nobody asked for is still noticed.
  process.kill(-runtime.pid!, 'SIGKILL');
  await expect(session.result()).rejects.toMatchObject({ code: 'RuntimeFailed' });
  expect((await session.status()).failure?.message).toBe('the runtime process was killed by SIGKILL');
});

test("a fleet directory started on the sessions' queue moves to the fleet queue when it continues as new", async () => {
  // As a worker of an earlier version started it: on the sessions' queue, which this system's workers poll too.
  const legacy = `legacy-${crypto.randomUUID().slice(0, 8)}`;
  const handle = await sys.client.workflow.start('fleetWorkflow', {
    workflowId: fleetWorkflowId(legacy),
    taskQueue: sys.taskQueue,
    args: [{}],
  });
  const report = (running: number): HostLoadReport => ({
    hostTaskQueue: `${legacy}@old-host`,
    workerId: 'old-host',
    incarnation: 'one',
    labels: [],
    running,
    capacity: 100,
    draining: false,
    begun: 0,
    everyMs: 5_000,
  });
  // Reports until the directory continues as new: each is a signal, with a workflow task when it comes alone, so a
  // few dozen cross the 150 events of this server's suggestion.
  const latest = sys.client.workflow.getHandle(fleetWorkflowId(legacy));
  let sent = 0;
  while ((await latest.describe()).runId === handle.firstExecutionRunId) {
    if (sent === 300) throw new Error(`the directory did not continue as new after ${sent} reports`);
    await handle.signal(hostLoadSignal, report(++sent));
    await new Promise((r) => setTimeout(r, 20));
  }
  await eventually(async () => (await latest.query(fleetQuery)).hosts[0]?.report.running === sent);

  const now = await latest.describe();
  expect({ status: now.status.name, taskQueue: now.taskQueue }).toEqual({
    status: 'RUNNING',
    taskQueue: fleetTaskQueue(sys.taskQueue),
  });
  // The new run answers from the fleet's worker, with what the old one knew and what came since.
  expect((await latest.query(fleetQuery)).hosts.map((h) => h.report)).toEqual([report(sent)]);
  await latest.terminate('test done');
});

test("a host's monitor continues as new while it holds a lease, and its next lease lists every instance", async () => {
  const own = await startTestSystem({ address: server.address });
  try {
    const monitor = own.client.workflow.getHandle(hostWorkflowId(own.firstHost.hostTaskQueue));
    const firstRunId = await eventually(async () => (await monitor.describe().catch(() => undefined))?.runId);
    // Each session started attaches its instance to the monitor (a signal, a workflow task) while one lease, whose
    // round lasts 10 minutes, is held.
    const started: SessionHandle[] = [];
    while ((await monitor.describe()).runId === firstRunId) {
      if (started.length === 100) throw new Error('the monitor did not continue as new after 100 sessions');
      const sessionId = `attached-${crypto.randomUUID().slice(0, 8)}`;
      const session = await own.sessions.start({ sessionId, runtime: { kind: 'memory' } });
      await runningStatus(session);
      started.push(session);
    }
    // The first run ended near the server's suggestion (150 events), not when its lease's round would have.
    const first = (await own.client.workflow.getHandle(monitor.workflowId, firstRunId).fetchHistory()).events ?? [];
    expect(first.length).toBeLessThan(200);
    // The system's client decodes as the workers encoded (no codec here).
    const { payloadConverter } = own.client.options.loadedDataConverter;
    const firstArg = <T>(payloads?: { payloads?: Payload[] | null } | null): T =>
      payloadConverter.fromPayload<T>(payloads!.payloads![0]!);
    const attached = first.flatMap((e) => {
      const signal = e.workflowExecutionSignaledEventAttributes;
      if (signal?.signalName !== 'attachRuntime') return [];
      return [firstArg<HostAttachment>(signal.input).instanceId];
    });
    expect(attached.length).toBeGreaterThan(20);
    // The next run's first lease lists every instance the first run knew.
    const nextRunId = first.at(-1)?.workflowExecutionContinuedAsNewEventAttributes?.newExecutionRunId;
    const next = own.client.workflow.getHandle(monitor.workflowId, nextRunId!);
    const lease = await eventually(async () => {
      const scheduled = ((await next.fetchHistory()).events ?? []).find(
        (e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'holdHostLease',
      );
      return scheduled && firstArg<HostLeaseInput>(scheduled.activityTaskScheduledEventAttributes!.input);
    });
    expect(lease.instances.toSorted()).toEqual(attached.toSorted());
    await Promise.all(started.map((s) => s.stop()));
  } finally {
    await own.close();
  }
}, 120_000);
