/**
 * A fleet on an object store: two real worker processes that share nothing but the Temporal server and an S3 bucket
 * (versitygw) — each its own data directory, workspace root, worker id and host queue, and no snapshot directory at
 * all. Sessions move between them through the bucket: a resume, a kill -9, a graceful stop; placement spreads by load
 * and passes a full worker by; and every checkpoint written verifies at the end through the sessions.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { ListMultipartUploadsCommand, ListObjectsV2Command } from '@aws-sdk/client-s3';
import { temporal } from '@temporalio/proto';
import { Client, Connection } from '@temporalio/client';
import { fleetQuery, fleetWorkflowId, sessionWorkflowId } from '../../src/api';
import { SessionClient, type SessionHandle } from '../../src/client';
import type { StartSessionInput } from '../../src/domain';
import { s3StoreEnv, startS3Server, type S3TestServer } from '../helpers/s3-server';
import { eventually, runningStatus } from '../helpers/temporal';
import {
  processesWith,
  runningCopies,
  sampleEvery100ms,
  startWorkerProcess,
  type WorkerProcess,
} from '../helpers/worker-process';

const address = process.env.DS_TEST_TEMPORAL_ADDRESS!;
const taskQueue = `fleet-s3-${crypto.randomUUID().slice(0, 8)}`;
const prefix = `fleet-${crypto.randomUUID().slice(0, 8)}`;
// One master key on every worker: any of them opens any checkpoint.
const masterKeys = `m-1:${crypto.randomBytes(32).toString('base64')}`;
const NAMES = ['alpha', 'beta'] as const;
type Name = (typeof NAMES)[number];

let tmp: string;
let s3: S3TestServer;
let connection: Connection;
let client: Client;
let sessions: SessionClient;
const workers = new Map<Name, WorkerProcess>();
/** Sessions whose checkpoints the last test verifies; paused between tests, stopped after all. */
const kept: SessionHandle[] = [];
/** Sessions a test stops itself (stopped here too if it failed first). */
const passing: SessionHandle[] = [];

beforeAll(async () => {
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ds-fleet-s3-'));
  s3 = await startS3Server();
  connection = await Connection.connect({ address });
  client = new Client({ connection });
  sessions = new SessionClient({ client, taskQueue });
  await Promise.all(NAMES.map((name) => startWorker(name)));
}, 300_000);

afterAll(async () => {
  await Promise.allSettled([...kept, ...passing].map((s) => s.stop({ checkpoint: false })));
  await Promise.all([...workers.values()].map((w) => w.kill()));
  // Every session command carries the task queue in its command line: none may outlive the workers.
  const left = processesWith(taskQueue);
  for (const pid of left) process.kill(pid, 'SIGKILL');
  await connection?.close();
  await s3?.stop();
  fs.rmSync(tmp, { recursive: true, force: true });
  if (left.length > 0) throw new Error(`session processes outlived their workers: ${left.join(', ')}`);
}, 120_000);

afterEach(async () => {
  await Promise.allSettled(passing.splice(0).map((s) => s.stop({ checkpoint: false })));
  // The next test starts from idle workers: the kept sessions are paused, the others stopped.
  await Promise.allSettled(kept.map(pausedOrStopped));
  await eventually(async () => (await fleet()).filter((h) => h.live).every((h) => h.load === 0), 60_000);
}, 120_000);

async function pausedOrStopped(session: SessionHandle): Promise<void> {
  const { phase } = await session.status();
  if (phase === 'running') await session.pause();
}

async function startWorker(name: Name, env: NodeJS.ProcessEnv = {}): Promise<WorkerProcess> {
  const worker = await startWorkerProcess({
    address,
    taskQueue,
    workerId: name,
    dataDir: path.join(tmp, name),
    storeEnv: { ...s3StoreEnv(s3, prefix), DS_SNAPSHOT_ENCRYPTION: 'aes-256-gcm', DS_MASTER_KEYS: masterKeys },
    env,
  });
  workers.set(name, worker);
  return worker;
}

/** Starts again, on its own data directory, a worker that has exited (a killed host's worker comes back). */
async function bothRunning(): Promise<void> {
  const running = (w?: WorkerProcess) => w?.child.exitCode === null && w.child.signalCode === null;
  const exited = NAMES.filter((name) => !running(workers.get(name)));
  await Promise.all(exited.map((name) => startWorker(name)));
}

const hostOf = (name: Name) => `${taskQueue}@${name}`;
const nameOf = (hostTaskQueue: string) => NAMES.find((n) => hostOf(n) === hostTaskQueue)!;
const otherThan = (name: Name) => NAMES.find((n) => n !== name)!;

async function fleet() {
  return (await client.workflow.getHandle(fleetWorkflowId(taskQueue)).query(fleetQuery)).hosts;
}

/** Waits until the fleet directory counts these loads (a host reports a change within a fraction of a second). */
async function directoryShows(loads: Partial<Record<Name, number>>): Promise<void> {
  await eventually(async () => {
    const hosts = await fleet();
    return Object.entries(loads).every(
      ([name, load]) => hosts.find((h) => h.report.hostTaskQueue === hostOf(name as Name))?.load === load,
    );
  }, 30_000);
}

async function start(spec: Partial<StartSessionInput>, list: SessionHandle[] = passing): Promise<SessionHandle> {
  const session = await sessions.start({
    sessionId: `fleet-s3-${crypto.randomUUID().slice(0, 8)}`,
    runtime: { kind: 'memory' },
    ...spec,
  });
  list.push(session);
  return session;
}

/**
 * Counts in the file `n` from the value it finds there, and logs that value to `starts` each time it starts: what a
 * restored copy starts from is the checkpoint's count. `marker` names its processes.
 */
function counter(marker: string): StartSessionInput['runtime'] {
  const script =
    'n=$(cat n 2>/dev/null || echo 0); echo "$n" >> starts; ' +
    'while :; do n=$((n+1)); echo $n > n.tmp; mv n.tmp n; sleep 0.1; done';
  return { kind: 'workspace', command: ['sh', '-c', script, marker], files: { 'seed.txt': 'from the spec' } };
}

function read(location: string, file: string): string {
  return fs.readFileSync(path.join(location, file), 'utf8');
}

function countOf(location: string): number {
  return Number(read(location, 'n').trim() || 0);
}

/** The counts the command started from, once a restored copy has logged its start (it runs before it logs). */
async function restartedFrom(location: string): Promise<number[]> {
  return eventually(() => {
    const starts = read(location, 'starts').trim().split('\n').map(Number);
    return starts.length > 1 && starts;
  });
}

/** Waits until the session runs in a runtime instance other than `instanceId`. */
async function runningAgain(session: SessionHandle, instanceId: string, timeoutMs = 120_000) {
  const s = await eventually(async () => {
    const s = await session.status();
    return s.phase === 'running' && s.runtime && s.runtime.instanceId !== instanceId ? s : undefined;
  }, timeoutMs);
  return { ...s, runtime: s.runtime! };
}

async function placementAttempts(sessionId: string): Promise<number[]> {
  const events = (await client.workflow.getHandle(sessionWorkflowId(sessionId)).fetchHistory()).events ?? [];
  const scheduled = new Set(
    events
      .filter((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'placeSession')
      .map((e) => Number(e.eventId)),
  );
  return events
    .filter((e) => e.eventType === temporal.api.enums.v1.EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED)
    .filter((e) => scheduled.has(Number(e.activityTaskStartedEventAttributes?.scheduledEventId)))
    .map((e) => e.activityTaskStartedEventAttributes?.attempt ?? 0);
}

test('a worker whose credentials the bucket refuses does not start, and says which store and why', async () => {
  const refused = await startWorkerProcess({
    address,
    taskQueue,
    workerId: 'refused',
    dataDir: path.join(tmp, 'refused'),
    storeEnv: { ...s3StoreEnv(s3, prefix), AWS_SECRET_ACCESS_KEY: 'not-the-secret', DS_MASTER_KEYS: masterKeys },
    waitUntilPolling: false,
  });
  try {
    await eventually(() => refused.child.exitCode !== null, 60_000);
    expect(refused.child.exitCode).toBe(1);
    expect(refused.output()).toContain(`snapshot store s3://${s3.bucket}/${prefix}: The request signature`);
    expect(refused.output()).not.toContain(' polling ');
  } finally {
    await refused.kill();
  }
});

test('new sessions spread over both workers by load', async () => {
  const hosts: string[] = [];
  for (let i = 0; i < 4; i++) hosts.push((await runningStatus(await start({}), 60_000)).runtime.hostTaskQueue);
  expect(new Set(hosts.slice(0, 2))).toEqual(new Set(NAMES.map(hostOf)));
  expect(hosts[2]).not.toBe(hosts[3]);
  expect(hosts.filter((h) => h === hostOf('alpha'))).toHaveLength(2);
}, 180_000);

test("a session paused on one worker resumes on the other with its checkpoint's files and count", async () => {
  const session = await start({ runtime: counter(`${taskQueue}-moves`) }, kept);
  const first = await runningStatus(session, 60_000);
  const a = nameOf(first.runtime.hostTaskQueue);
  const b = otherThan(a);
  expect(first.runtime.location.startsWith(path.join(tmp, a))).toBe(true);
  fs.writeFileSync(path.join(first.runtime.location, 'notes.txt'), `written on ${a}`);
  await eventually(() => countOf(first.runtime.location) > 3);

  // A second session held on `a` keeps it busier than `b`: the resume goes to `b` by load.
  await runningStatus(await start({ placement: { host: a } }), 60_000);
  await directoryShows({ [a]: 2, [b]: 0 });
  const counted = countOf(first.runtime.location);
  const paused = await session.pause();
  await directoryShows({ [a]: 1, [b]: 0 });

  await session.resume();
  const after = await runningStatus(session, 60_000);
  expect(after.runtime.hostTaskQueue).toBe(hostOf(b));
  expect(after.runtime.location.startsWith(path.join(tmp, b))).toBe(true);
  expect(after.lastRestore?.checkpointId).toBe(paused.checkpointId);
  // The checkpoint's files, on the other worker's disk; its command counts on from the checkpoint's count.
  expect(read(after.runtime.location, 'notes.txt')).toBe(`written on ${a}`);
  expect(read(after.runtime.location, 'seed.txt')).toBe('from the spec');
  const starts = await restartedFrom(after.runtime.location);
  expect(starts).toHaveLength(2);
  expect(starts[0]).toBe(0);
  expect(starts[1]).toBeGreaterThanOrEqual(counted);
  await eventually(() => countOf(after.runtime.location) > starts[1]!);
}, 240_000);

test('kill -9 of a worker: its session runs again on the other from its newest checkpoint, never twice', async () => {
  const marker = `${taskQueue}-failover`;
  const session = await start(
    { runtime: counter(marker), liveness: { heartbeatTimeoutMs: 3_000, hostTimeoutMs: 3_000 } },
    kept,
  );
  const first = await runningStatus(session, 60_000);
  const a = nameOf(first.runtime.hostTaskQueue);
  const b = otherThan(a);
  await eventually(() => countOf(first.runtime.location) > 3);
  const counted = countOf(first.runtime.location);
  const checkpoint = await session.checkpoint();
  // Work since the newest checkpoint is what a crash may lose.
  fs.writeFileSync(path.join(first.runtime.location, 'after-checkpoint.txt'), 'lost with the host');

  // What the sampler counts: the one copy, before the kill.
  expect(runningCopies(marker)).toEqual([first.runtime.pid]);
  const sampler = sampleEvery100ms(() => runningCopies(marker));
  const killedAt = Date.now();
  await workers.get(a)!.kill();
  const after = await runningAgain(session, first.runtime.instanceId);
  const seconds = (Date.now() - killedAt) / 1000;
  // A second of samples with the recovered copy running.
  const seen = sampler.samples.length;
  await eventually(() => sampler.samples.length >= seen + 10);
  const samples = sampler.stop();
  console.log(
    `kill -9 of ${a} → running on ${nameOf(after.runtime.hostTaskQueue)} after ${seconds.toFixed(1)} s ` +
      `(heartbeat timeout 3 s, host timeout 3 s); ${samples.length} samples, ` +
      `${samples.filter((c) => c.length > 1).length} with two copies`,
  );

  expect(after.runtime.hostTaskQueue).toBe(hostOf(b));
  expect(after.head?.checkpointId).toBe(checkpoint.checkpointId);
  expect(after.lastRestore?.checkpointId).toBe(checkpoint.checkpointId);
  expect(samples.filter((copies) => copies.length > 1)).toEqual([]);
  expect(runningCopies(marker)).toEqual([after.runtime.pid]);
  expect(fs.existsSync(`/proc/${first.runtime.pid}`)).toBe(false);
  // The checkpoint's state: its files, its count, and nothing written after it.
  expect(read(after.runtime.location, 'seed.txt')).toBe('from the spec');
  expect(fs.existsSync(path.join(after.runtime.location, 'after-checkpoint.txt'))).toBe(false);
  const starts = await restartedFrom(after.runtime.location);
  expect(starts).toHaveLength(2);
  expect(starts[1]).toBeGreaterThanOrEqual(counted);
  const timeline = await session.timeline();
  expect(timeline.map((e) => e.kind)).toEqual(['checkpoint', 'runtime-lost', 'restored']);
  expect(timeline[2]).toMatchObject({ kind: 'restored', checkpointId: checkpoint.checkpointId });
}, 300_000);

test('a graceful stop of a worker moves its sessions to the other with no work lost', async () => {
  await bothRunning();
  const one = await start({ runtime: counter(`${taskQueue}-drain-1`) }, kept);
  const two = await start({ runtime: counter(`${taskQueue}-drain-2`) }, kept);
  const before = await Promise.all([one, two].map((s) => runningStatus(s, 60_000)));
  // By load, one on each worker; alpha stops.
  expect(new Set(before.map((s) => s.runtime.hostTaskQueue))).toEqual(new Set(NAMES.map(hostOf)));
  const [moving, staying] = before[0]!.runtime.hostTaskQueue === hostOf('alpha') ? [0, 1] : [1, 0];
  const movingSession = [one, two][moving]!;
  const { runtime } = before[moving]!;
  await eventually(() => countOf(runtime.location) > 3);
  // State larger than an upload part: the drain checkpoint goes up in parts and comes back whole.
  const state = crypto.randomBytes(12 * 1024 * 1024);
  fs.writeFileSync(path.join(runtime.location, 'state.bin'), state);
  const counted = countOf(runtime.location);

  const worker = workers.get('alpha')!;
  expect(await worker.stop()).toBe(0);
  expect(worker.output()).toContain('drained 1 of 1 session(s)');
  expect(fs.existsSync(runtime.location)).toBe(false);

  const after = await runningAgain(movingSession, runtime.instanceId);
  expect(after.runtime.hostTaskQueue).toBe(hostOf('beta'));
  expect(after.head).toMatchObject({ trigger: 'drain' });
  expect(after.lastRestore?.checkpointId).toBe(after.head!.checkpointId);
  // It counts on from where the drain checkpointed it: the drain checkpoint holds every count before the stop.
  const starts = await restartedFrom(after.runtime.location);
  expect(starts).toHaveLength(2);
  expect(starts[1]).toBeGreaterThanOrEqual(counted);
  expect(fs.readFileSync(path.join(after.runtime.location, 'state.bin')).equals(state)).toBe(true);
  const timeline = await movingSession.timeline();
  expect(timeline.map((e) => e.kind)).toEqual(['checkpoint', 'restored']);
  expect(timeline[1]).toMatchObject({ cause: 'drain', checkpointId: after.head!.checkpointId });
  // The session on the other worker was left alone.
  const other = await runningStatus([one, two][staying]!);
  expect(other.runtime.instanceId).toBe(before[staying]!.runtime.instanceId);
}, 300_000);

test('a full worker (DS_MAX_SESSIONS=1) is passed by at once, never waited for', async () => {
  // alpha comes back (from its graceful stop) with room for one session only.
  await workers.get('alpha')?.stop();
  await startWorker('alpha', { DS_MAX_SESSIONS: '1' });
  const hosts: string[] = [];
  for (let i = 0; i < 4; i++) {
    const session = await start({});
    hosts.push((await runningStatus(session, 60_000)).runtime.hostTaskQueue);
    // Decided by its first attempt: no refusal, no retry, no timeout.
    expect(await placementAttempts(session.sessionId)).toEqual([1]);
  }
  expect(hosts.filter((h) => h === hostOf('alpha'))).toHaveLength(1);
  expect(hosts.filter((h) => h === hostOf('beta'))).toHaveLength(3);
}, 300_000);

test('every checkpoint the fleet wrote is in the bucket and verifies; nothing half-written, none on a worker', async () => {
  expect(kept.length).toBeGreaterThan(0);
  const listed = new Set<string>();
  let token: string | undefined;
  const s3client = s3.client();
  try {
    do {
      const page = await s3client.send(
        new ListObjectsV2Command({ Bucket: s3.bucket, Prefix: `${prefix}/`, ContinuationToken: token }),
      );
      for (const o of page.Contents ?? []) listed.add(o.Key!);
      token = page.NextContinuationToken;
    } while (token);
    // Every upload was completed or aborted, the killed worker's included: nothing invisible takes space.
    const uploads = await s3client.send(new ListMultipartUploadsCommand({ Bucket: s3.bucket, Prefix: `${prefix}/` }));
    expect(uploads.Uploads ?? []).toEqual([]);
  } finally {
    s3client.destroy();
  }
  for (const session of kept) {
    const checkpoints = (await session.timeline()).flatMap((e) =>
      e.kind === 'checkpoint' ? [e.checkpoint.checkpointId] : [],
    );
    expect(checkpoints.length).toBeGreaterThan(0);
    const results = await session.verify();
    expect(results.map((r) => [r.checkpointId, r.status])).toEqual(checkpoints.map((id) => [id, 'ok']));
    for (const id of checkpoints) expect([...listed].some((key) => key.endsWith(`/${id}.manifest`))).toBe(true);
  }
  // The workers kept nothing of the store on their own disks.
  for (const name of NAMES) expect(fs.existsSync(path.join(tmp, name, 'snapshots'))).toBe(false);
}, 180_000);
