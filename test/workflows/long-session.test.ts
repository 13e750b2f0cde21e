import crypto from 'node:crypto';
import fs from 'node:fs';
import { checkpointSignal, sessionWorkflowId, type TimelineEntry } from '../../src/api';
import { freePort, startDevServer, type DevServer } from '../../src/dev-server';
import { eventually, runningStatus, startTestSystem, type TestSystem } from '../helpers/temporal';

/**
 * A session that runs for months takes more checkpoints than one workflow run can hold. This server suggests
 * continue-as-new after 1,000 events instead of 4,096, so the hand-over happens dozens of times.
 */
const CHECKPOINTS = Number(process.env.DS_LONG_SESSION_CHECKPOINTS ?? 2_000);
const SUGGEST_AT = 1_000;

let server: DevServer;
let sys: TestSystem;
beforeAll(async () => {
  server = await startDevServer({
    port: await freePort(),
    uiPort: null,
    extraArgs: ['--dynamic-config-value', `limit.historyCount.suggestContinueAsNew=${SUGGEST_AT}`],
  });
  // In memory: the test is about history, not about the disk's fsync rate.
  sys = await startTestSystem({ address: server.address, baseDir: fs.existsSync('/dev/shm') ? '/dev/shm' : undefined });
}, 60_000);
afterAll(async () => {
  await sys?.close();
  await server?.stop();
});

test(`${CHECKPOINTS} checkpoints: every run's history stays small, keyed controls apply once across hand-overs, the timeline pages`, async () => {
  const sessionId = `months-${crypto.randomUUID().slice(0, 8)}`;
  const session = await sys.sessions.start({ sessionId, runtime: { kind: 'memory', initialState: 'x' } });
  await runningStatus(session);
  const handle = sys.client.workflow.getHandle(sessionWorkflowId(sessionId));

  // Fire-and-forget checkpoints from four senders at once, with a keyed update now and then: each key once.
  const keyed = new Map<string, string>();
  const senders = 4;
  const perSender = Math.ceil(CHECKPOINTS / senders);
  const started = Date.now();
  await Promise.all(
    Array.from({ length: senders }, async (_, s) => {
      for (let i = 0; i < perSender; i++) {
        const n = s * perSender + i;
        if (n >= CHECKPOINTS) return;
        if (n % 1000 === 7) {
          const key = `keyed-${n}`;
          // Sent twice: the second is answered with the first checkpoint, whatever run it reaches.
          const first = await session.checkpoint({ idempotencyKey: key });
          const again = await session.checkpoint({ idempotencyKey: key });
          expect(again.checkpointId).toBe(first.checkpointId);
          keyed.set(key, first.checkpointId);
        } else {
          await handle.signal(checkpointSignal, {});
        }
      }
    }),
  );
  await eventually(async () => (await session.status()).checkpointCount >= CHECKPOINTS, 600_000);
  const elapsed = Date.now() - started;

  const status = await session.status();
  const lengths: number[] = [];
  for await (const wf of sys.client.workflow.list({ query: `WorkflowId = '${sessionWorkflowId(sessionId)}'` })) {
    lengths.push(wf.historyLength);
  }
  console.log(`runs ${status.runs}: history lengths ${lengths.join(', ')}`);
  expect(status).toMatchObject({ phase: 'running', checkpointCount: CHECKPOINTS, rejectedSignals: [] });
  expect(status.runs).toBeGreaterThan(CHECKPOINTS / 200);

  // Every run's history stayed far below Temporal's limits (51,200 events): within a few handler rounds of the
  // suggestion.
  let runs = 0;
  let longest = 0;
  for await (const wf of sys.client.workflow.list({ query: `WorkflowId = '${sessionWorkflowId(sessionId)}'` })) {
    runs++;
    longest = Math.max(longest, wf.historyLength);
  }
  expect(runs).toBe(status.runs);
  expect(longest).toBeLessThan(SUGGEST_AT * 3);

  // The timeline pages through every checkpoint, indices dense and stable, each checkpoint once.
  const ids = new Set<string>();
  let from: number | null = 1;
  let expected = 1;
  while (from !== null) {
    const page: { entries: TimelineEntry[]; next: number | null } = await session.timelinePage({ from, limit: 1000 });
    for (const e of page.entries) {
      expect(e.index).toBe(expected++);
      if (e.kind === 'checkpoint') ids.add(e.checkpoint.checkpointId);
    }
    from = page.next;
  }
  expect(ids.size).toBe(CHECKPOINTS);
  for (const id of keyed.values()) expect(ids.has(id)).toBe(true);
  console.log(`${CHECKPOINTS} checkpoints in ${elapsed} ms over ${runs} runs; longest run ${longest} events`);
  await session.stop({ checkpoint: false });
}, 900_000);
