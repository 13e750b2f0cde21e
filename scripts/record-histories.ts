/**
 * Records the workflow histories that the replay test (test/workflows/replay.test.ts) replays against the
 * current workflow code. Run it when a release changes what the workflow does, and commit the new files
 * next to the old ones — never replace old ones: they stand for sessions still running on older code, and go only
 * when their release leaves the supported window (docs/design.md §8.6). Then point test/fixtures/previous-release.json
 * at the release (its version, and the commit of its tree) for the rolling upgrade test.
 *
 *   npx tsx scripts/record-histories.ts <label>
 */
import { execFileSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { DefaultLogger, NativeConnection, Runtime } from '@temporalio/worker';
import { fleetWorkflowId, hostWorkflowId, sessionWorkflowId } from '../src/api';
import { SessionClient } from '../src/client';
import { DEFAULT_TEMPORAL_BIN, freePort, startDevServer } from '../src/dev-server';
import { ConversationRuntime, MemoryRuntime, WorkspaceRuntime } from '../src/runtimes';
import { FsSnapshotStore } from '../src/snapshots';
import { createWorkers } from '../src/worker';

async function main(): Promise<void> {
  const label = process.argv[2];
  if (!label || !/^[a-z0-9.-]+$/.test(label)) throw new Error('usage: record-histories.ts <label, e.g. v0.1.0>');
  Runtime.install({ logger: new DefaultLogger('WARN') });
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ds-record-'));
  const server = await startDevServer({ port: await freePort(), uiPort: null });
  const native = await NativeConnection.connect({ address: server.address });
  const connection = await Connection.connect({ address: server.address });
  const taskQueue = 'record';
  const memory = new MemoryRuntime();
  const conversation = new ConversationRuntime();
  const workspace = new WorkspaceRuntime({ rootDir: path.join(dir, 'ws') });
  const store = new FsSnapshotStore(path.join(dir, 'snapshots'));
  const client = new Client({ connection });
  const workers = await createWorkers({
    connection: native,
    client,
    namespace: 'default',
    taskQueue,
    hostTaskQueue: `${taskQueue}@host`,
    deps: {
      store,
      runtimes: { memory, workspace, conversation },
      hostTaskQueue: `${taskQueue}@host`,
      watchHeartbeatMs: 500,
    },
  });
  const running = workers.run();
  const sessions = new SessionClient({ client, taskQueue });
  const out = path.resolve(__dirname, '..', 'test', 'fixtures', 'histories');
  fs.mkdirSync(out, { recursive: true });
  try {
    // Every control, a signal, an idempotent repeat, a rejected control, a fallback past a corrupt checkpoint, and
    // retention deleting old checkpoints.
    const id = `replay-${crypto.randomUUID().slice(0, 8)}`;
    const s = await sessions.start({
      sessionId: id,
      runtime: { kind: 'memory', initialState: 'a' },
      retention: { keepLast: 2 },
    });
    await waitFor(async () => (await s.status()).phase === 'running');
    const cp1 = await s.checkpoint({ label: 'first', idempotencyKey: 'k1' });
    await s.checkpoint({ label: 'first', idempotencyKey: 'k1' });
    await s.resume().catch(() => undefined);
    const cp2 = await s.pause({ reason: 'recording' });
    const data = path.join(dir, 'snapshots', id, `${cp2.checkpointId}.data`);
    fs.writeFileSync(data, Buffer.from('not the bytes the manifest describes'));
    await s.resume();
    await s.signal('checkpoint', { label: 'by signal' });
    await waitFor(async () => (await s.status()).checkpointCount === 3);
    await s.stop();
    void cp1;
    write(server.address, out, `${label}-memory-lifecycle.json`, sessionWorkflowId(id));

    // Run control: rewind (running and paused), policies on timers, configure, touch, and a conversation rewound by
    // message index. (Forks need the chunked store; this recorder's store is format 1.)
    const rc = await sessions.start({
      sessionId: `replay-run-control-${crypto.randomUUID().slice(0, 8)}`,
      runtime: { kind: 'memory', initialState: 'a' },
      policies: { checkpointEveryMs: 1_000 },
    });
    await waitFor(async () => (await rc.status()).checkpointCount >= 2);
    const first = await rc.checkpoint({ label: 'rewind here' });
    await rc.rewind({ to: first.index!, reason: 'recording' });
    await rc.configure({ policies: { idlePauseAfterMs: 60_000 } });
    await rc.touch();
    await rc.pause();
    await rc.rewind({ to: first.checkpointId });
    await rc.resume();
    await rc.stop();
    write(server.address, out, `${label}-run-control.json`, sessionWorkflowId(rc.sessionId));

    const chat = await sessions.start({
      sessionId: `replay-chat-${crypto.randomUUID().slice(0, 8)}`,
      runtime: { kind: 'conversation' },
    });
    await waitFor(async () => (await chat.status()).phase === 'running');
    await chat.append({ messages: [{ role: 'user', content: 'hi' }], checkpoint: true });
    await chat.append({ messages: [{ role: 'assistant', content: 'hello' }], checkpoint: true });
    await chat.rewind({ messageIndex: 1 });
    await chat.stop({ checkpoint: false });
    write(server.address, out, `${label}-conversation.json`, sessionWorkflowId(chat.sessionId));

    // A workspace process that exits by itself.
    const w = await sessions.start({
      sessionId: `replay-exit-${crypto.randomUUID().slice(0, 8)}`,
      runtime: { kind: 'workspace', command: ['sh', '-c', 'sleep 0.5; exit 2'] },
    });
    await w.result().catch(() => undefined);
    write(server.address, out, `${label}-workspace-exit.json`, sessionWorkflowId(w.sessionId));

    // A drain: the session's worker shuts down, the session moves to another worker.
    const d = await sessions.start({
      sessionId: `replay-drain-${crypto.randomUUID().slice(0, 8)}`,
      runtime: { kind: 'memory' },
    });
    await waitFor(async () => (await d.status()).phase === 'running');
    const secondNative = await NativeConnection.connect({ address: server.address });
    const second = await createWorkers({
      connection: secondNative,
      client,
      namespace: 'default',
      taskQueue,
      hostTaskQueue: `${taskQueue}@host-2`,
      deps: {
        store,
        runtimes: { memory, workspace, conversation },
        hostTaskQueue: `${taskQueue}@host-2`,
        watchHeartbeatMs: 500,
      },
    });
    const secondRunning = second.run();
    await workers.drain();
    await waitFor(async () => (await d.status()).runtime?.hostTaskQueue === `${taskQueue}@host-2`);
    await d.stop();
    write(server.address, out, `${label}-drain.json`, sessionWorkflowId(d.sessionId));
    // The first host's monitor: attachments, exits passed on, the drain's releases (it runs on; this is its history so far).
    write(server.address, out, `${label}-host-monitor.json`, hostWorkflowId(`${taskQueue}@host`));
    // The fleet directory: both hosts' load reports and every placement above (it runs on; this is its history so far).
    write(server.address, out, `${label}-fleet.json`, fleetWorkflowId(taskQueue));
    second.shutdown();
    await secondRunning;
    await secondNative.close();
  } finally {
    workers.shutdown();
    await running;
    await workspace.stopAll();
    await native.close();
    await connection.close();
    await server.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

/** The history as `temporal workflow show -o json` prints it: the same JSON the Web UI downloads. */
function write(address: string, dir: string, file: string, workflowId: string): void {
  const json = execFileSync(DEFAULT_TEMPORAL_BIN, [
    'workflow',
    'show',
    '--address',
    address,
    '--workflow-id',
    workflowId,
    '--output',
    'json',
  ]);
  fs.writeFileSync(path.join(dir, file), json);
  const events = (JSON.parse(json.toString('utf8')) as { events: unknown[] }).events.length;
  console.log(`wrote ${file} (${events} events)`);
}

async function waitFor(fn: () => Promise<boolean>): Promise<void> {
  for (let i = 0; i < 200; i++) {
    if (await fn()) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error('timed out');
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
