import crypto from 'node:crypto';
import { temporal } from '@temporalio/proto';
import {
  attachRuntimeSignal,
  fleetTaskQueue,
  hostWorkflowId,
  runtimeReportSignal,
  sessionWorkflowId,
} from '../../src/api';
import type { HostAttachment, HostWorkflowInput, RuntimeReport } from '../../src/domain/records';
import { MONITOR_RUN_EVENTS, PENDING_SIGNALS_LIMIT, TELL_BATCH } from '../../src/workflows/host-workflow';
import type { SessionHandle } from '../../src/client';
import { startSteadyHost } from '../helpers/steady-host';
import { eventually, runningStatus, startTestSystem, type TestSystem } from '../helpers/temporal';

/**
 * A host's liveness is one lease for the whole host, held by its monitor workflow: running sessions hold no activity
 * (and no activity slot) each, and hear of their instance's end from the monitor.
 */
let sys: TestSystem;
beforeAll(async () => {
  sys = await startTestSystem();
});
afterAll(async () => {
  await sys?.close();
});

const id = (name: string) => `${name}-${crypto.randomUUID().slice(0, 8)}`;

async function pendingActivities(workflowId: string): Promise<string[]> {
  const d = await sys.client.workflow.getHandle(workflowId).describe();
  return (d.raw.pendingActivities ?? []).map((a) => a.activityType?.name ?? '?');
}

/** The session ended by itself: no runtime left, and its timeline ends with the exit. */
async function expectExitedWith(session: SessionHandle, exitCode: number): Promise<void> {
  const ended = await eventually(async () => {
    const s = await session.status();
    return s.phase !== 'running' ? s : undefined;
  }, 30_000);
  expect(ended.runtime).toBeNull();
  expect((await session.timeline()).at(-1)).toMatchObject({ kind: 'runtime-exited', exitCode });
}

test('twenty running sessions hold no activity each: their host holds one lease for all of them', async () => {
  const sessions: SessionHandle[] = [];
  for (let i = 0; i < 20; i++) {
    sessions.push(await sys.sessions.start({ sessionId: id(`lease-${i}`), runtime: { kind: 'memory' } }));
  }
  await Promise.all(sessions.map((s) => runningStatus(s)));
  const monitor = hostWorkflowId(sys.firstHost.hostTaskQueue);
  await eventually(async () => ((await pendingActivities(monitor)).join() === 'holdHostLease' ? true : undefined));
  for (const s of sessions) expect(await pendingActivities(sessionWorkflowId(s.sessionId))).toEqual([]);
  await Promise.all(sessions.map((s) => s.stop()));
});

test('a command that exits on its own is reported by the host: the session ends with its exit code', async () => {
  const session = await sys.sessions.start({
    sessionId: id('exits'),
    runtime: { kind: 'workspace', command: ['sh', '-c', 'sleep 1; exit 3'] },
  });
  await expectExitedWith(session, 3);
});

test('a host that rests between lease rounds holds no activity while it rests, and reports an exit after', async () => {
  const resting = await startTestSystem({ firstHost: { leaseRoundMs: 300, leaseRestMs: 3_000 } });
  try {
    const session = await resting.sessions.start({
      sessionId: id('rests'),
      runtime: { kind: 'workspace', command: ['sh', '-c', 'sleep 4; exit 3'] },
    });
    await runningStatus(session);
    const monitor = resting.client.workflow.getHandle(hostWorkflowId(resting.firstHost.hostTaskQueue));
    await eventually(async () => {
      const d = await monitor.describe();
      return (d.raw.pendingActivities ?? []).length === 0 && (await session.status()).phase === 'running';
    }, 10_000);
    await expectExitedWith(session, 3);
  } finally {
    await resting.close();
  }
}, 60_000);

test('a forged report is refused and one about another instance changes nothing', async () => {
  const session = await sys.sessions.start({
    sessionId: id('forged'),
    runtime: { kind: 'workspace', command: ['sh', '-c', 'while true; do sleep 0.1; done'] },
  });
  const before = await runningStatus(session);
  const handle = sys.client.workflow.getHandle(sessionWorkflowId(session.sessionId));
  await handle.signal(runtimeReportSignal, {
    outcome: 'lost',
    instanceId: 'someone-else-1234',
    reason: 'not this one',
  });
  await handle.signal('runtimeReport', { outcome: 'lost', instance_id: before.runtime.instanceId } as never);
  const status = await eventually(async () => {
    const s = await session.status();
    return s.rejectedSignals.length > 0 ? s : undefined;
  });
  expect(status.rejectedSignals[0]).toMatchObject({ signal: 'runtimeReport' });
  expect(status.rejectedSignals[0]!.reason).toContain('invalid report');
  expect(status.phase).toBe('running');
  expect(status.runtime?.instanceId).toBe(before.runtime.instanceId);
  expect(() => process.kill(before.runtime.pid!, 0)).not.toThrow();
  await session.stop();
});

test('a session that wants its host watched more closely gets a new lease at once; a looser one does not', async () => {
  const own = await startTestSystem();
  try {
    const monitor = own.client.workflow.getHandle(hostWorkflowId(own.firstHost.hostTaskQueue));
    /** The heartbeat timeouts of the monitor's leases, in the order they were asked for. */
    const leases = async (): Promise<number[]> => {
      const timeouts: number[] = [];
      for (const event of (await monitor.fetchHistory()).events ?? []) {
        const scheduled = event.activityTaskScheduledEventAttributes;
        if (scheduled?.activityType?.name !== 'holdHostLease') continue;
        timeouts.push(Number(scheduled.heartbeatTimeout?.seconds ?? 0));
      }
      return timeouts;
    };
    const loose = await own.sessions.start({ sessionId: id('loose'), runtime: { kind: 'memory' } });
    await runningStatus(loose);
    await eventually(async () => ((await leases()).length === 1 ? true : undefined));
    const looser = await own.sessions.start({
      sessionId: id('looser'),
      runtime: { kind: 'memory' },
      liveness: { heartbeatTimeoutMs: 60_000, hostTimeoutMs: 60_000 },
    });
    await runningStatus(looser);
    const close = await own.sessions.start({
      sessionId: id('close'),
      runtime: { kind: 'memory' },
      liveness: { heartbeatTimeoutMs: 3_000, hostTimeoutMs: 3_000 },
    });
    await runningStatus(close);
    // The default lease (5 s), then one as tight as the close session wants: none for the looser one.
    await eventually(async () => ((await leases()).join() === '5,3' ? true : undefined), 15_000);
    await Promise.all([loose.stop(), looser.stop(), close.stop()]);
  } finally {
    await own.close();
  }
}, 60_000);

/** Runs `fn` on every item, `width` at a time. */
async function eachLimited<T>(items: T[], width: number, fn: (item: T) => Promise<unknown>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: width }, async () => {
      while (next < items.length) await fn(items[next++]!);
    }),
  );
}

test('a lost host with thousands of sessions has each of them told, and its monitor stays short', async () => {
  // A host that never ran: its lease is not picked up, nor is the question whether it is alive, so the monitor declares
  // it lost and tells every attached session. These sessions are workflows that no worker runs (their queue has no
  // poller): what they were told stays in their histories. One never existed, and is only counted.
  const hostTaskQueue = `${sys.taskQueue}@${id('gone')}`;
  const count = PENDING_SIGNALS_LIMIT + 500;
  const attached = Array.from({ length: count }, (_, i) => ({
    instanceId: `instance-${i}`,
    sessionWorkflowId: id(`recipient-${i}`),
  }));
  const recipients = attached.slice(1);
  const nobodysQueue = `${sys.taskQueue}-${id('nobody')}`;
  await eachLimited(recipients, 50, (a) =>
    sys.client.workflow.start('reportRecipient', {
      workflowId: a.sessionWorkflowId,
      taskQueue: nobodysQueue,
      workflowExecutionTimeout: '10 minutes',
    }),
  );
  const monitor = await sys.client.workflow.start('hostWorkflow', {
    workflowId: hostWorkflowId(hostTaskQueue),
    taskQueue: fleetTaskQueue(sys.taskQueue),
    args: [{ hostTaskQueue, attached }],
  });
  const { payloadConverter } = sys.client.options.loadedDataConverter;
  try {
    const { EventType } = temporal.api.enums.v1;
    const batches = Math.ceil(count / TELL_BATCH);
    // The batches' results: the monitor's other activities (its lease, its question and the control beside it) are
    // not counted.
    const tellResults = (history: temporal.api.history.v1.IHistoryEvent[]) => {
      const tells = new Set(
        history
          .filter((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'tellSessions')
          .map((e) => String(e.eventId)),
      );
      return history.flatMap((e) => {
        const done = e.activityTaskCompletedEventAttributes;
        if (!done || !tells.has(String(done.scheduledEventId))) return [];
        return [payloadConverter.fromPayload<{ told: number; gone: number }>(done.result!.payloads![0]!)];
      });
    };
    const events = await eventually(async () => {
      const history = (await monitor.fetchHistory()).events ?? [];
      return tellResults(history).length === batches ? history : undefined;
    }, 120_000);
    const results = tellResults(events);
    expect(results.reduce((sum, r) => sum + r.told, 0)).toBe(recipients.length);
    expect(results.reduce((sum, r) => sum + r.gone, 0)).toBe(1);
    // Three events a batch, not two and a pending signal per session: the run stays far from any limit.
    expect(events.some((e) => e.eventType === EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED)).toBe(
      false,
    );
    expect(events.length).toBeLessThan(100);
    const wrong: string[] = [];
    await eachLimited(recipients, 50, async (a) => {
      const history = await sys.client.workflow.getHandle(a.sessionWorkflowId).fetchHistory();
      const reports = (history.events ?? []).flatMap((e) => {
        const signal = e.workflowExecutionSignaledEventAttributes;
        if (signal?.signalName !== runtimeReportSignal.name) return [];
        return [payloadConverter.fromPayload<RuntimeReport>(signal.input!.payloads![0]!)];
      });
      const told = reports.every((r) => r.outcome === 'lost' && r.instanceId === a.instanceId);
      if (reports.length === 0 || !told) wrong.push(`${a.sessionWorkflowId}: ${JSON.stringify(reports)}`);
    });
    expect(wrong).toEqual([]);
  } finally {
    await monitor.terminate('test done').catch(() => undefined);
    await eachLimited(recipients, 50, (a) =>
      sys.client.workflow
        .getHandle(a.sessionWorkflowId)
        .terminate('test done')
        .catch(() => undefined),
    );
  }
}, 300_000);

test("a host's monitor continues as new at its own length, before the server suggests it", async () => {
  const hostTaskQueue = `${sys.taskQueue}@${id('steady')}`;
  const host = await startSteadyHost(process.env.DS_TEST_TEMPORAL_ADDRESS!, hostTaskQueue);
  const monitor = await sys.client.workflow.start('hostWorkflow', {
    workflowId: hostWorkflowId(hostTaskQueue),
    taskQueue: fleetTaskQueue(sys.taskQueue),
    args: [{ hostTaskQueue }],
  });
  try {
    const count = MONITOR_RUN_EVENTS + 1_000;
    let sent = 0;
    await Promise.all(
      Array.from({ length: 4 }, async () => {
        while (sent < count) {
          const instanceId = `instance-${sent++}`;
          await monitor.signal(attachRuntimeSignal, { instanceId, sessionWorkflowId: `session-of-${instanceId}` });
        }
      }),
    );
    const firstRun = sys.client.workflow.getHandle(monitor.workflowId, monitor.firstExecutionRunId);
    const first = await eventually(async () => {
      const events = (await firstRun.fetchHistory()).events!;
      return events.at(-1)?.workflowExecutionContinuedAsNewEventAttributes ? events : undefined;
    }, 30_000);
    const next = first.at(-1)!.workflowExecutionContinuedAsNewEventAttributes!.newExecutionRunId!;
    // Past the bound only by the attachments that came in while it continued (the server refuses to close a run while
    // signals keep coming); this server would suggest it at 4,096.
    expect(first.length).toBeGreaterThanOrEqual(MONITOR_RUN_EVENTS);
    expect(first.length).toBeLessThan(4_096);
    // Nothing was dropped on the way: the next run starts with every instance the first one was sent, and asks for a
    // lease listing them.
    const { payloadConverter } = sys.client.options.loadedDataConverter;
    const signalled = first.flatMap((e) => {
      const signal = e.workflowExecutionSignaledEventAttributes;
      if (signal?.signalName !== 'attachRuntime') return [];
      return [payloadConverter.fromPayload<HostAttachment>(signal.input!.payloads![0]!).instanceId];
    });
    expect(signalled.length).toBeGreaterThan(MONITOR_RUN_EVENTS / 4);
    const started = (await sys.client.workflow.getHandle(monitor.workflowId, next).fetchHistory()).events![0]!;
    const carried = payloadConverter.fromPayload<HostWorkflowInput>(
      started.workflowExecutionStartedEventAttributes!.input!.payloads![0]!,
    );
    expect(carried.attached!.map((a) => a.instanceId).toSorted()).toEqual(signalled.toSorted());
    const lease = await eventually(async () => host.leases.find((l) => l.instances.length === signalled.length));
    expect(lease.instances.toSorted()).toEqual(signalled.toSorted());
  } finally {
    await monitor.terminate('test done').catch(() => undefined);
    await host.close();
  }
}, 180_000);
