import crypto from 'node:crypto';
import { sessionWorkflowId, type TimelineEntry } from '../../src/api';
import type { CheckpointRef } from '../../src/domain/schemas';
import type { SessionHandle } from '../../src/client';
import { eventually, runningStatus, startTestSystem, type TestSystem } from '../helpers/temporal';

/** The conflict table of docs/design.md §2.5, pair by pair, and a storm of concurrent controls. */
let sys: TestSystem;
beforeAll(async () => {
  sys = await startTestSystem();
});
afterAll(async () => {
  await sys?.close();
});

function newId(prefix: string) {
  return `${prefix}-${crypto.randomUUID().slice(0, 8)}`;
}

/** A session whose captures take long enough (about a second) that a second control arrives while one runs. */
async function slowSession(prefix: string) {
  const sessionId = newId(prefix);
  const session = await sys.sessions.start({ sessionId, runtime: { kind: 'memory' } });
  const { runtime } = await runningStatus(session);
  sys.memory.write(runtime.instanceId, crypto.randomBytes(48 * 1024 * 1024));
  const base = await session.checkpoint();
  return { session, sessionId, base, runtime };
}

type Send = (s: SessionHandle, base: CheckpointRef) => Promise<unknown>;
const controls: Record<string, Send> = {
  checkpoint: (s) => s.checkpoint(),
  pause: (s) => s.pause(),
  resume: (s) => s.resume(),
  stop: (s) => s.stop(),
  rewind: (s, base) => s.rewind({ to: base.index! }),
  fork: (s, base) => s.fork({ from: base.index!, paused: true }),
  configure: (s) => s.configure({ policies: {} }),
  'checkpoint ifHead': (s, base) => s.checkpoint({ ifHead: base.checkpointId }),
};

// [in flight, arriving, outcome of the arriving one]
const table: [string, string, string][] = [
  ['checkpoint', 'checkpoint', 'ok'],
  ['checkpoint', 'pause', 'ok'],
  ['checkpoint', 'resume', 'InvalidTransition'],
  ['checkpoint', 'rewind', 'ok'],
  ['checkpoint', 'fork', 'ok'],
  ['checkpoint', 'configure', 'ok'],
  ['checkpoint', 'checkpoint ifHead', 'Conflict'],
  ['pause', 'pause', 'InvalidTransition'],
  ['pause', 'checkpoint', 'InvalidTransition'],
  ['pause', 'resume', 'ok'],
  ['pause', 'stop', 'ok'],
  ['rewind', 'checkpoint', 'ok'],
  ['stop', 'checkpoint', 'SessionClosed'],
  ['stop', 'rewind', 'SessionClosed'],
];

test.each(table)(
  '%s in flight, %s arriving: %s',
  async (first, second, outcome) => {
    const { session, base, runtime } = await slowSession('order');
    // New bytes to capture: the control in flight reads and seals them for about a second.
    sys.memory.write(runtime.instanceId, crypto.randomBytes(48 * 1024 * 1024));
    const running = controls[first]!(session, base);
    await eventually(async () => (await session.status()).pendingControls >= 1, 10_000);
    const result = await controls[second]!(session, base).then(
      () => 'ok',
      (e: { code?: string }) => e.code ?? String(e),
    );
    await running;
    expect(result).toBe(outcome);
    // Whatever happened, the session settles in a stable phase with no workflow-task failure.
    await eventually(async () => (await session.status()).pendingControls === 0, 20_000);
    const status = await session.status();
    expect(['running', 'paused', 'completed']).toContain(status.phase);
    if (status.phase !== 'completed') await session.stop({ checkpoint: false });
  },
  60_000,
);

test('a storm of concurrent controls ends consistent with one serial order', async () => {
  const sessionId = newId('storm');
  const session = await sys.sessions.start({ sessionId, runtime: { kind: 'memory', initialState: 'x' } });
  await runningStatus(session);
  const first = await session.checkpoint();
  const results = new Map<string, unknown[]>();
  const kinds = ['checkpoint', 'pause', 'resume', 'rewind', 'fork', 'checkpoint-stale'] as const;
  const send = async (client: number, i: number) => {
    const kind = kinds[(client * 7 + i) % kinds.length]!;
    // Every fifth control is sent again with the same key: it must be answered with the first outcome.
    const key = `c${client}-${i % 5 === 0 ? 'dup' + i : i}`;
    const call = () => {
      switch (kind) {
        case 'checkpoint':
          return session.checkpoint({ idempotencyKey: key });
        case 'pause':
          return session.pause({ idempotencyKey: key });
        case 'resume':
          return session.resume({ idempotencyKey: key });
        case 'rewind':
          return session.rewind({ to: first.index!, idempotencyKey: key });
        case 'fork':
          return session.fork({ from: first.index!, paused: true, idempotencyKey: key });
        case 'checkpoint-stale':
          return session.checkpoint({ ifHead: first.checkpointId, idempotencyKey: key });
      }
    };
    const settle = (p: Promise<unknown>) =>
      p.then(
        (v) => ({ ok: v }),
        (e: { code?: string }) => ({ err: e.code }),
      );
    const outcomes = [await settle(call())];
    if (i % 5 === 0) outcomes.push(await settle(call()));
    results.set(key, outcomes);
  };
  await Promise.all(
    Array.from({ length: 4 }, async (_, client) => {
      for (let i = 0; i < 40; i++) await send(client, i);
    }),
  );
  // Duplicates of an accepted control got its first result. (A control its validator refused left no trace, so its
  // key is unused and a repeat is a new attempt: Temporal's rule for rejected updates, see docs/design.md §2.3.)
  let repeated = 0;
  for (const outcomes of results.values()) {
    if (outcomes.length === 2 && 'ok' in (outcomes[0] as object)) {
      expect(outcomes[1]).toEqual(outcomes[0]);
      repeated++;
    }
  }
  expect(repeated).toBeGreaterThan(5);
  // Every error is a typed refusal, never an untyped failure.
  const errors = [...results.values()].flatMap((o) =>
    o.flatMap((x) => ('err' in (x as object) ? [(x as { err: string }).err] : [])),
  );
  for (const e of errors) expect(['InvalidTransition', 'Conflict', 'SessionClosed']).toContain(e);

  await eventually(async () => (await session.status()).pendingControls === 0, 60_000);
  const status = await session.status();
  expect(['running', 'paused']).toContain(status.phase);
  // The timeline replays to the final state: phases alternate as one serial order would have them.
  const timeline: TimelineEntry[] = await session.timeline({ limit: 1000 });
  expect(timeline.map((e) => e.index)).toEqual(timeline.map((_, i) => i + 1));
  // Each control that succeeded left exactly its own entries, and nothing else did.
  const succeeded = (prefix: string) =>
    [...results.entries()]
      .filter(([, o]) => o.some((x) => 'ok' in (x as object)))
      .map(([k]) => k)
      .filter((k) => kindOf(k) === prefix);
  const kindOf = (key: string) => {
    const [c, rest] = key.split('-');
    const i = Number(rest!.replace('dup', ''));
    return kinds[(Number(c!.slice(1)) * 7 + i) % kinds.length];
  };
  const checkpointIds = (trigger: string) =>
    timeline.flatMap((e) =>
      e.kind === 'checkpoint' && e.checkpoint.trigger === trigger ? [e.checkpoint.checkpointId] : [],
    );
  const returned = (kind: string) =>
    succeeded(kind).map(
      (k) => (results.get(k)!.find((x) => 'ok' in (x as object)) as { ok: { checkpointId: string } }).ok.checkpointId,
    );
  expect(checkpointIds('manual').sort()).toEqual(
    [first.checkpointId, ...returned('checkpoint'), ...returned('checkpoint-stale')].sort(),
  );
  expect(checkpointIds('pause').sort()).toEqual(returned('pause').sort());
  expect(timeline.filter((e) => e.kind === 'rewound')).toHaveLength(succeeded('rewind').length);
  expect(timeline.filter((e) => e.kind === 'forked')).toHaveLength(succeeded('fork').length);
  expect(timeline.filter((e) => e.kind === 'restored' && e.cause === 'resume')).toHaveLength(
    succeeded('resume').length,
  );
  // No workflow task failed.
  const history = await sys.client.workflow.getHandle(sessionWorkflowId(sessionId)).fetchHistory();
  expect((history.events ?? []).filter((e) => e.workflowTaskFailedEventAttributes)).toEqual([]);
  await session.stop({ checkpoint: false });
}, 300_000);
