import crypto from 'node:crypto';
import path from 'node:path';
import { bundleWorkflowCode, NativeConnection, Worker } from '@temporalio/worker';
import { HostState } from '../../src/activities/host-state';
import { FleetMember } from '../../src/activities/placement';
import { fleetTaskQueue, fleetWorkflowId } from '../../src/api';
import { OLD_DIRECTORY_HOST } from '../fixtures/workflows/directory-without-batches';
import { startTestSystem, type TestSystem } from '../helpers/temporal';

let sys: TestSystem;
beforeAll(async () => {
  sys = await startTestSystem();
});
afterAll(async () => {
  await sys?.close();
});

/** The updates a directory accepted, by name. */
async function acceptedUpdates(workflowId: string): Promise<Record<string, number>> {
  const counts: Record<string, number> = {};
  for (const e of (await sys.client.workflow.getHandle(workflowId).fetchHistory()).events ?? []) {
    const name = e.workflowExecutionUpdateAcceptedEventAttributes?.acceptedRequest?.input?.name;
    if (name) counts[name] = (counts[name] ?? 0) + 1;
  }
  return counts;
}

/** A member of the system's fleet that places but runs nothing, on a host queue of its own. */
function placer(host: string): FleetMember {
  return new FleetMember({
    client: sys.client,
    taskQueue: sys.taskQueue,
    hostTaskQueue: `${sys.taskQueue}@${host}`,
    capacity: 1_000,
    host: new HostState(),
  });
}

test('placements asked for at once go to the directory together, each decided and counted', async () => {
  // A second member of the fleet, as a worker host that places but runs nothing: its own placements land on the
  // system's host (the only live one that reports room) or on itself.
  const member = placer('placer');
  await member.start();
  try {
    const before = await acceptedUpdates(fleetWorkflowId(sys.taskQueue));
    const decisions = await Promise.all(Array.from({ length: 40 }, () => member.place({})));
    expect(decisions.every((d) => d?.ok)).toBe(true);
    const after = await acceptedUpdates(fleetWorkflowId(sys.taskQueue));
    const batches = (after.placeMany ?? 0) - (before.placeMany ?? 0);
    // The first goes alone; the others wait for it and go together (at most a few batches on a loaded machine).
    expect(batches).toBeGreaterThanOrEqual(2);
    expect(batches).toBeLessThanOrEqual(10);
    expect((after.place ?? 0) - (before.place ?? 0)).toBe(0);
  } finally {
    await member.stop();
  }
});

test('a caller that gives up is answered at once, and the others as before', async () => {
  const member = placer('quitter');
  await member.start();
  try {
    // The first placement goes alone; of those waiting behind it, every third gives up before its batch goes.
    const controllers = Array.from({ length: 12 }, () => new AbortController());
    const outcomes = Promise.allSettled(controllers.map((c) => member.place({}, c.signal)));
    controllers.forEach((c, i) => i % 3 === 0 && c.abort(new Error(`caller ${i} gave up`)));
    const settled = await outcomes;
    settled.forEach((outcome, i) => {
      if (i % 3 === 0) expect(outcome).toEqual({ status: 'rejected', reason: new Error(`caller ${i} gave up`) });
      else expect(outcome).toMatchObject({ status: 'fulfilled', value: { ok: true } });
    });
  } finally {
    await member.stop();
  }
});

test('a directory of a release before placeMany is asked one placement at a time', async () => {
  // The old directory runs on its own fleet queue, with its own worker and bundle.
  const taskQueue = `old-directory-${crypto.randomUUID().slice(0, 8)}`;
  const { code } = await bundleWorkflowCode({
    workflowsPath: path.join(__dirname, '..', 'fixtures', 'workflows', 'directory-without-batches.ts'),
    logger: { trace() {}, debug() {}, info() {}, warn() {}, error: console.error, log() {} },
  });
  const connection = await NativeConnection.connect({ address: process.env.DS_TEST_TEMPORAL_ADDRESS! });
  const worker = await Worker.create({ connection, taskQueue: fleetTaskQueue(taskQueue), workflowBundle: { code } });
  const member = new FleetMember({
    client: sys.client,
    taskQueue,
    hostTaskQueue: `${taskQueue}@placer`,
    capacity: 10,
    host: new HostState(),
  });
  await worker.runUntil(async () => {
    await member.start();
    const decisions = await Promise.all(Array.from({ length: 5 }, () => member.place({})));
    expect(decisions).toEqual(Array.from({ length: 5 }, () => ({ ok: true, hostTaskQueue: OLD_DIRECTORY_HOST })));
    // The batch was refused (no handler, so no event); each placement then went as `place`.
    expect(await acceptedUpdates(fleetWorkflowId(taskQueue))).toEqual({ place: 5 });
    await member.stop();
    await sys.client.workflow.getHandle(fleetWorkflowId(taskQueue)).terminate('test done');
  });
  await connection.close();
});
