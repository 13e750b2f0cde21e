import crypto from 'node:crypto';
import { sessionWorkflowId } from '../../src/api';
import { freePort, startDevServer, type DevServer } from '../../src/dev-server';
import { runningStatus, startTestSystem, type TestSystem } from '../helpers/temporal';

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
