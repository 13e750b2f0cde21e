import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { Worker } from '@temporalio/worker';
import { sessionWorkflowId } from '../../src/api';
import { SessionClient, type SessionHandle } from '../../src/client';
import { eventually, installQuietRuntime, runningStatus } from '../helpers/temporal';

/**
 * A rolling upgrade as an operator runs it (docs/design.md §8.5): workers of the previous release (its tree, taken from
 * git at the commit test/fixtures/previous-release.json names) and of this tree poll one queue and share one store and
 * nothing else. Sessions started on the old build go on while both run, move to the new build when the old worker is
 * stopped gracefully (SIGTERM drains), and the new build serves every control on them. Their histories, written by
 * both builds, hold no failed workflow task and replay against this tree's workflow code.
 */
const root = path.resolve(__dirname, '..', '..');
const release = JSON.parse(fs.readFileSync(path.join(root, 'test', 'fixtures', 'previous-release.json'), 'utf8')) as {
  version: string;
  commit: string;
};
const address = process.env.DS_TEST_TEMPORAL_ADDRESS!;
const taskQueue = `upgrade-${crypto.randomUUID().slice(0, 8)}`;
const marker = `${taskQueue}-counter`;
const masterKeys = `upgrade-1:${crypto.randomBytes(32).toString('base64')}`;
let dir: string;
let connection: Connection;
let client: Client;
let sessions: SessionClient;
const workers: ChildProcess[] = [];

// Counts on from the number in its file, so a restore from an older state shows as a count that went back.
const COUNTER = [
  'sh',
  '-c',
  'n=$(cat n 2>/dev/null || echo 0); while :; do n=$((n+1)); echo $n > n.tmp; mv n.tmp n; sleep 0.1; done',
  marker,
];

beforeAll(async () => {
  installQuietRuntime();
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ds-upgrade-'));
  connection = await Connection.connect({ address });
  client = new Client({ connection });
  sessions = new SessionClient({ client, taskQueue });
});
afterAll(async () => {
  for (const w of workers) if (w.exitCode === null && w.signalCode === null) w.kill('SIGKILL');
  await Promise.all(workers.map(exited));
  for (const pid of processesWith(marker)) process.kill(pid, 'SIGKILL');
  await connection?.close();
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

/**
 * The previous release's sources, as committed, beside this tree's node_modules (a release changes no dependency it
 * loads without the lockfile saying so; its worker starting below is the check). A clone without that commit fails
 * here: the upgrade path is a release gate, never skipped.
 */
function previousReleaseTree(): string {
  try {
    execFileSync('git', ['cat-file', '-e', `${release.commit}^{commit}`], { cwd: root, stdio: 'ignore' });
  } catch {
    throw new Error(
      `the previous release ${release.version} (commit ${release.commit}, test/fixtures/previous-release.json) ` +
        'is not in this clone: fetch the full history (git fetch --unshallow) to run the upgrade test',
    );
  }
  const tree = path.join(dir, `release-${release.version}`);
  fs.mkdirSync(tree);
  const archive = execFileSync('git', ['archive', release.commit, 'src', 'package.json', 'tsconfig.json'], {
    cwd: root,
    maxBuffer: 256 * 1024 * 1024,
  });
  execFileSync('tar', ['-x', '-C', tree], { input: archive });
  fs.symlinkSync(path.join(root, 'node_modules'), path.join(tree, 'node_modules'), 'dir');
  return tree;
}

interface WorkerProcess {
  child: ChildProcess;
  hostTaskQueue: string;
  output: () => string;
}

/** A worker process of the tree at `cwd`, with its own data dir and workspace root, on the shared store. */
async function startWorker(cwd: string, workerId: string): Promise<WorkerProcess> {
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    TEMPORAL_ADDRESS: address,
    DS_TASK_QUEUE: taskQueue,
    DS_WORKER_ID: workerId,
    DS_DATA_DIR: path.join(dir, `data-${workerId}`),
    DS_WORKSPACE_DIR: path.join(dir, `workspaces-${workerId}`),
    DS_SNAPSHOT_DIR: path.join(dir, 'snapshots'),
    DS_MASTER_KEYS: masterKeys,
    // The test's client has no payload codec: the workers write what it reads.
    DS_PAYLOAD_ENCRYPTION: 'none',
    DS_DRAIN_TIMEOUT_MS: '60000',
    LOG_LEVEL: 'WARN',
  };
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/worker.ts'], { cwd, env, stdio: 'pipe' });
  workers.push(child);
  let output = '';
  child.stdout.on('data', (d: Buffer) => (output += d.toString()));
  child.stderr.on('data', (d: Buffer) => (output += d.toString()));
  await eventually(() => {
    if (child.exitCode !== null) throw new Error(`worker ${workerId} exited: ${output}`);
    return output.includes(' polling ');
  }, 120_000).catch((err: unknown) => {
    throw new Error(`worker ${workerId} did not start: ${String(err)}\n${output}`);
  });
  return { child, hostTaskQueue: `${taskQueue}@${workerId}`, output: () => output };
}

function exited(child: ChildProcess): Promise<number | null> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve(child.exitCode);
  return new Promise((resolve) => child.once('exit', (code) => resolve(code)));
}

/** Pids of the processes whose command line holds `text`. */
function processesWith(text: string): number[] {
  return fs
    .readdirSync('/proc')
    .filter((name) => /^\d+$/.test(name))
    .filter((pid) => {
      try {
        return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes(text);
      } catch {
        return false;
      }
    })
    .map(Number)
    .filter((pid) => pid !== process.pid);
}

function counterOf(location: string): number {
  return Number(fs.readFileSync(path.join(location, 'n'), 'utf8').trim() || 0);
}

/** The messages of the workflow tasks that failed in the session's current run. */
async function failedTasks(session: SessionHandle): Promise<string[]> {
  const history = await client.workflow.getHandle(sessionWorkflowId(session.sessionId)).fetchHistory();
  return history.events!.flatMap((e) =>
    e.workflowTaskFailedEventAttributes ? [e.workflowTaskFailedEventAttributes.failure?.message ?? '(no message)'] : [],
  );
}

/** Waits until the session runs on the host, or one of its workflow tasks fails (a build that cannot replay it). */
async function movedTo(session: SessionHandle, hostTaskQueue: string): Promise<{ failedTasks: string[] }> {
  return eventually(async () => {
    const failed = await failedTasks(session);
    if (failed.length > 0) return { failedTasks: failed };
    const status = await session.status();
    return status.phase === 'running' && status.runtime?.hostTaskQueue === hostTaskQueue && { failedTasks: [] };
  }, 120_000);
}

/** Every run's history of the session (continue-as-new starts new ones), oldest first. */
async function historiesOf(session: SessionHandle) {
  const workflowId = sessionWorkflowId(session.sessionId);
  const runs: { runId: string; startTime: Date }[] = [];
  for await (const w of client.workflow.list({ query: `WorkflowId = '${workflowId}'` })) runs.push(w);
  runs.sort((a, b) => a.startTime.getTime() - b.startTime.getTime());
  return Promise.all(runs.map((r) => client.workflow.getHandle(workflowId, r.runId).fetchHistory()));
}

test(`sessions started on ${release.version} drain to this build and run on under it`, async () => {
  const old = await startWorker(previousReleaseTree(), 'old-a');

  const counter = await sessions.start({
    sessionId: `upgrade-ws-${crypto.randomUUID().slice(0, 8)}`,
    runtime: { kind: 'workspace', command: COUNTER },
  });
  const memory = await sessions.start({
    sessionId: `upgrade-mem-${crypto.randomUUID().slice(0, 8)}`,
    runtime: { kind: 'memory', initialState: 'kept across the upgrade' },
  });
  const chat = await sessions.start({
    sessionId: `upgrade-chat-${crypto.randomUUID().slice(0, 8)}`,
    runtime: { kind: 'conversation', messages: [{ role: 'system', content: 'be brief' }] },
  });
  const all = [counter, memory, chat];
  for (const s of all) expect((await runningStatus(s, 60_000)).runtime.hostTaskQueue).toBe(old.hostTaskQueue);
  const onOld = await runningStatus(counter);
  await eventually(() => counterOf(onOld.runtime.location) > 3);
  const first = await counter.checkpoint();
  await chat.append({ messages: [{ role: 'user', content: 'hello' }], checkpoint: true });

  // Both builds poll the shared queue now: either may run the sessions' workflow tasks until the old one goes.
  const next = await startWorker(root, 'new-b');
  await memory.checkpoint();
  await chat.append({ messages: [{ role: 'assistant', content: 'hi' }], checkpoint: true });

  const counted = counterOf(onOld.runtime.location);
  old.child.kill('SIGTERM');
  expect(await exited(old.child)).toBe(0);
  expect(old.output()).toMatch(/drained 3 of 3 session\(s\)/);

  for (const s of all) expect(await movedTo(s, next.hostTaskQueue)).toEqual({ failedTasks: [] });
  const after = await Promise.all(all.map((s) => runningStatus(s)));
  const [counterAfter, , chatAfter] = after as [(typeof after)[0], (typeof after)[0], (typeof after)[0]];
  for (const s of after) {
    expect(s.runtime.hostTaskQueue).toBe(next.hostTaskQueue);
    expect(s.head).toMatchObject({ trigger: 'drain' });
  }
  // The workspace counts on from where the old build's drain checkpointed it: no work before the stop is lost.
  expect(counterAfter.head!.checkpointId).not.toBe(first.checkpointId);
  expect(counterOf(counterAfter.runtime.location)).toBeGreaterThanOrEqual(counted);
  expect(chatAfter.messageCount).toBe(3);

  const counterTimeline = await counter.timeline();
  expect(counterTimeline.map((e) => e.kind)).toEqual(['checkpoint', 'checkpoint', 'restored']);
  expect(counterTimeline[2]).toMatchObject({ checkpointId: counterAfter.head!.checkpointId, cause: 'drain' });
  expect((await chat.timeline()).map((e) => e.kind)).toEqual([
    'appended',
    'checkpoint',
    'appended',
    'checkpoint',
    'checkpoint',
    'restored',
  ]);

  // The new build serves every control on sessions the old one started.
  for (const s of all) {
    const taken = await s.checkpoint();
    expect((await s.status()).head?.checkpointId).toBe(taken.checkpointId);
    await s.pause();
    expect((await s.status()).phase).toBe('paused');
    await s.resume();
    expect((await runningStatus(s)).runtime.hostTaskQueue).toBe(next.hostTaskQueue);
  }
  const appended = await chat.append({ messages: [{ role: 'user', content: 'still there?' }], checkpoint: false });
  expect(appended).toMatchObject({ messageCount: 4 });
  for (const s of all) await s.stop({ checkpoint: false });
  for (const s of all) expect((await s.status()).phase).toBe('completed');
  expect(processesWith(marker)).toEqual([]);

  // Written by two builds, each history holds no failed workflow task and replays against this tree's code.
  for (const s of all) {
    const histories = await historiesOf(s);
    expect(histories.length).toBeGreaterThan(0);
    for (const history of histories) {
      const failed = history.events!.filter((e) => e.workflowTaskFailedEventAttributes);
      expect(failed.map((e) => e.workflowTaskFailedEventAttributes!.failure?.message)).toEqual([]);
      await Worker.runReplayHistory(
        { workflowBundle: { codePath: process.env.DS_TEST_WORKFLOW_BUNDLE! } },
        history,
        sessionWorkflowId(s.sessionId),
      );
    }
  }

  next.child.kill('SIGTERM');
  expect(await exited(next.child)).toBe(0);
}, 400_000);
