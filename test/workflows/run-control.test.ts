import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { forkedFromKey, sessionStateKey } from '../../src/api/search-attributes';
import { sessionWorkflowId, type TimelineEntry } from '../../src/api';
import {
  ConflictError,
  InvalidInputError,
  InvalidTransitionError,
  SnapshotNotFoundError,
  type SessionHandle,
} from '../../src/client';
import { eventually, runningStatus, startTestSystem, type TestSystem } from '../helpers/temporal';

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

async function memorySession(prefix: string, extra: Record<string, unknown> = {}) {
  const sessionId = newId(prefix);
  const session = await sys.sessions.start({ sessionId, runtime: { kind: 'memory', initialState: 'v0' }, ...extra });
  const { runtime } = await runningStatus(session);
  return { session, sessionId, runtime };
}

async function memoryState(session: SessionHandle): Promise<string> {
  const { runtime } = await runningStatus(session);
  return sys.memory.read(runtime.instanceId).toString('utf8');
}

function kinds(entries: TimelineEntry[]) {
  return entries.map((e) => e.kind);
}

describe('rewind', () => {
  test('a running workspace goes back in place: files as they were, process running, a safety checkpoint first', async () => {
    const sessionId = newId('rewind-ws');
    const session = await sys.sessions.start({
      sessionId,
      runtime: {
        kind: 'workspace',
        command: ['sh', '-c', 'while true; do sleep 0.1; done'],
        files: { 'notes.txt': 'one' },
      },
    });
    const first = await runningStatus(session);
    const a = await session.checkpoint({ label: 'a' });
    fs.writeFileSync(path.join(first.runtime.location, 'notes.txt'), 'two');
    const b = await session.checkpoint({ label: 'b' });
    fs.writeFileSync(path.join(first.runtime.location, 'notes.txt'), 'three (not checkpointed)');
    expect(a.index).toBeDefined();

    const rewound = await session.rewind({ to: a.index!, reason: 'try again' });
    expect(rewound.restoredFrom.checkpointId).toBe(a.checkpointId);
    expect(rewound.safetyCheckpoint?.trigger).toBe('rewind-safety');
    expect(rewound.branch).toBe(1);
    const now = await runningStatus(session);
    expect(now.runtime.instanceId).not.toBe(first.runtime.instanceId);
    expect(fs.readFileSync(path.join(now.runtime.location, 'notes.txt'), 'utf8')).toBe('one');
    expect(() => process.kill(now.runtime.pid!, 0)).not.toThrow();
    expect(now).toMatchObject({ head: { checkpointId: a.checkpointId }, branch: 1 });
    // The old branch keeps its tip: the safety checkpoint, after b.
    expect(now.tips).toEqual(
      expect.arrayContaining([
        { branch: 0, checkpointId: rewound.safetyCheckpoint!.checkpointId },
        { branch: 1, checkpointId: a.checkpointId },
      ]),
    );

    // A mistaken rewind loses nothing: back to the safety checkpoint, the newest state is there again.
    const back = await session.rewind({ to: rewound.safetyCheckpoint!.checkpointId });
    const after = await runningStatus(session);
    expect(back.restoredFrom.checkpointId).toBe(rewound.safetyCheckpoint!.checkpointId);
    expect(fs.readFileSync(path.join(after.runtime.location, 'notes.txt'), 'utf8')).toBe('three (not checkpointed)');

    const timeline = await session.timeline();
    const rewinds = timeline.filter((e) => e.kind === 'rewound');
    expect(rewinds).toHaveLength(2);
    expect(rewinds[0]).toMatchObject({ to: a.checkpointId, toIndex: a.index, fromBranch: 0, reason: 'try again' });
    // Indices are stable and dense: 1, 2, 3…
    expect(timeline.map((e) => e.index)).toEqual(timeline.map((_, i) => i + 1));
    // Checkpoints after the rewind point are kept: b can still be rewound to.
    expect(timeline.some((e) => e.kind === 'checkpoint' && e.checkpoint.checkpointId === b.checkpointId)).toBe(true);
    await session.stop({ checkpoint: false });
  }, 60_000);

  test('a paused session moves its head; resume restores the rewound state', async () => {
    const { session, runtime } = await memorySession('rewind-paused');
    sys.memory.write(runtime.instanceId, 'first');
    const a = await session.checkpoint();
    sys.memory.write(runtime.instanceId, 'second');
    await session.pause();
    const r = await session.rewind({ to: a.checkpointId });
    expect(r).toMatchObject({ safetyCheckpoint: null, runtime: null, branch: 1 });
    expect(await session.status()).toMatchObject({ phase: 'paused', head: { checkpointId: a.checkpointId } });
    await session.resume();
    expect(await memoryState(session)).toBe('first');
    await session.stop({ checkpoint: false });
  });

  test('rewind to what is not a checkpoint is refused with a typed error, and nothing changes', async () => {
    const { session } = await memorySession('rewind-bad');
    await session.checkpoint();
    await expect(session.rewind({ to: 999 })).rejects.toBeInstanceOf(SnapshotNotFoundError);
    await expect(session.rewind({ to: '../x' })).rejects.toBeInstanceOf(InvalidInputError);
    await expect(session.rewind({ to: 1, messageIndex: 2 })).rejects.toBeInstanceOf(InvalidInputError);
    await expect(session.rewind({ to_checkpoint: 1 } as never)).rejects.toBeInstanceOf(InvalidInputError);
    expect(await session.status()).toMatchObject({ phase: 'running', branch: 0 });
    await session.stop({ checkpoint: false });
  });
  test('rewind or fork to an index that is not a checkpoint says what is there and the nearest checkpoint', async () => {
    const { session, sessionId } = await memorySession('rewind-restore');
    const paused = await session.pause();
    await session.resume();
    const restore = (await session.timeline()).find((e) => e.kind === 'restored')!;
    expect(restore.index).toBe(paused.index! + 1);

    for (const refused of [
      await session.rewind({ to: restore.index! }).catch((e: unknown) => e),
      await session.fork({ from: restore.index! }).catch((e: unknown) => e),
    ]) {
      expect(refused).toBeInstanceOf(InvalidInputError);
      expect(refused).toMatchObject({
        message:
          `index ${restore.index} of session ${sessionId} is a restore of the checkpoint at index ${paused.index}, ` +
          `not a checkpoint; the nearest checkpoint is at index ${paused.index}`,
        issues: [expect.objectContaining({ params: { nearest: paused.index, kind: 'restored' } })],
      });
    }
    await expect(session.rewind({ to: 999 })).rejects.toThrow(
      `session ${sessionId} has no checkpoint at index 999; the nearest checkpoint is at index ${paused.index}`,
    );
    expect(await session.status()).toMatchObject({ phase: 'running', branch: 0, head: paused });
    await session.stop({ checkpoint: false });
  });
});

describe('fork and branch', () => {
  test('a fork is a new session from a checkpoint; the source is untouched and keeps running', async () => {
    const { session, sessionId, runtime } = await memorySession('fork-src');
    sys.memory.write(runtime.instanceId, 'at the fork');
    const c = await session.checkpoint({ label: 'fork point' });
    sys.memory.write(runtime.instanceId, 'source went on');
    const forkId = newId('fork-child');
    const result = await session.fork({ from: c.index!, newSessionId: forkId });
    expect(result.from.checkpointId).toBe(c.checkpointId);
    expect(result.forks).toEqual([{ sessionId: forkId, checkpoint: expect.objectContaining({ trigger: 'fork' }) }]);

    const fork = sys.sessions.get(forkId);
    expect(await memoryState(fork)).toBe('at the fork');
    expect(await memoryState(session)).toBe('source went on');
    const forkStatus = await fork.status();
    expect(forkStatus.forkedFrom).toEqual({ sessionId, checkpointId: c.checkpointId, index: c.index });
    expect((await session.status()).forks).toEqual([expect.objectContaining({ sessionId: forkId })]);

    // Lineage in both timelines, and in search attributes for the Web UI.
    expect(kinds(await fork.timeline()).slice(0, 3)).toEqual(['forked-from', 'checkpoint', 'restored']);
    expect((await session.timeline()).find((e) => e.kind === 'forked')).toMatchObject({
      checkpointId: c.checkpointId,
      forks: [{ sessionId: forkId }],
    });
    const described = await sys.client.workflow.getHandle(sessionWorkflowId(forkId)).describe();
    expect(described.typedSearchAttributes.get(forkedFromKey)).toBe(`${sessionId}/${c.checkpointId}`);
    await eventually(async () => {
      const d = await sys.client.workflow.getHandle(sessionWorkflowId(forkId)).describe();
      return d.typedSearchAttributes.get(sessionStateKey) === 'running';
    });
    // An operator finds the family with a visibility query (the Web UI's filter takes the same).
    await eventually(async () => {
      const family: string[] = [];
      for await (const wf of sys.client.workflow.list({ query: `ForkedFrom STARTS_WITH '${sessionId}/'` })) {
        family.push(wf.workflowId);
      }
      return family.length === 1 && family[0] === sessionWorkflowId(forkId);
    });

    // Forks of forks.
    const grandchild = newId('fork-grandchild');
    await fork.fork({ newSessionId: grandchild });
    expect(await memoryState(sys.sessions.get(grandchild))).toBe('at the fork');
    expect((await sys.sessions.get(grandchild).status()).forkedFrom?.sessionId).toBe(forkId);

    for (const id of [sessionId, forkId, grandchild]) await sys.sessions.get(id).stop({ checkpoint: false });
  }, 60_000);

  test('branch into three: three sessions with the current state, paused when asked', async () => {
    const { session, runtime } = await memorySession('branch-n');
    sys.memory.write(runtime.instanceId, 'now');
    const base = newId('branch-copy');
    const result = await session.branch({ count: 3, newSessionId: base, paused: true });
    expect(result.forks.map((f) => f.sessionId)).toEqual([`${base}-1`, `${base}-2`, `${base}-3`]);
    expect(result.from.trigger).toBe('fork');
    for (const f of result.forks) {
      const h = sys.sessions.get(f.sessionId);
      await eventually(async () => (await h.status()).phase === 'paused');
      await h.resume();
      expect(await memoryState(h)).toBe('now');
      await h.stop({ checkpoint: false });
    }
    expect((await session.status()).forkCount).toBe(3);
    await session.stop({ checkpoint: false });
  }, 60_000);

  test('two forks of one checkpoint take fresh identities: their own session ids, seeds and random values', async () => {
    // The command says who it is each time it starts: what a fork restored from the source's checkpoint must not copy.
    const say =
      'printf "%s %s %s %s %s\\n" "$DS_SESSION_ID" "$DS_SEED" "${DS_FORKED_FROM_SESSION:--}" ' +
      '"${DS_FORKED_FROM_CHECKPOINT:--}" "$(od -An -N8 -tx8 /dev/urandom | tr -d " ")" > identity.txt';
    const sessionId = newId('fork-identity');
    const session = await sys.sessions.start({
      sessionId,
      runtime: { kind: 'workspace', command: ['sh', '-c', `${say}; while true; do sleep 0.2; done`] },
    });
    const identityOf = async (id: string) => {
      const { runtime } = await runningStatus(sys.sessions.get(id));
      const file = path.join(runtime.location, 'identity.txt');
      // Written as the command starts: wait for this instance's line, not the one restored from the checkpoint.
      await eventually(async () => fs.existsSync(file) && fs.readFileSync(file, 'utf8').startsWith(`${id} `));
      const [who, seed, fromSession, fromCheckpoint, random] = fs.readFileSync(file, 'utf8').trim().split(' ');
      return { who, seed, fromSession, fromCheckpoint, random };
    };
    const source = await identityOf(sessionId);
    expect(source).toMatchObject({ who: sessionId, fromSession: '-', fromCheckpoint: '-' });
    expect(source.seed).toMatch(/^[0-9a-f]{64}$/);

    const base = newId('fork-identity-copy');
    const { from, forks } = await session.branch({ count: 2, newSessionId: base });
    const [a, b] = await Promise.all(forks.map((f) => identityOf(f.sessionId)));
    expect(a).toMatchObject({ who: `${base}-1`, fromSession: sessionId, fromCheckpoint: from.checkpointId });
    expect(b).toMatchObject({ who: `${base}-2`, fromSession: sessionId, fromCheckpoint: from.checkpointId });
    expect(new Set([source.seed, a!.seed, b!.seed]).size).toBe(3);
    expect(new Set([source.random, a!.random, b!.random]).size).toBe(3);

    for (const id of [sessionId, ...forks.map((f) => f.sessionId)]) {
      await sys.sessions.get(id).stop({ checkpoint: false });
    }
  }, 90_000);

  test('a fork under an id in use is refused and the source is unchanged', async () => {
    const { session, sessionId } = await memorySession('fork-taken');
    const other = await memorySession('fork-taken-other');
    await session.checkpoint();
    await expect(session.fork({ newSessionId: other.sessionId })).rejects.toMatchObject({
      code: 'SessionAlreadyExists',
    });
    await expect(session.fork({ newSessionId: sessionId })).rejects.toBeInstanceOf(InvalidInputError);
    expect(await session.status()).toMatchObject({ phase: 'running', forkCount: 0 });
    await session.stop({ checkpoint: false });
    await other.session.stop({ checkpoint: false });
  });
});

describe('ordered, idempotent control', () => {
  test('a stale ifHead or ifIndex is a Conflict and changes nothing', async () => {
    const { session } = await memorySession('conflict');
    const a = await session.checkpoint();
    const b = await session.checkpoint();
    await expect(session.checkpoint({ ifHead: a.checkpointId })).rejects.toBeInstanceOf(ConflictError);
    await expect(session.rewind({ to: a.index!, ifIndex: a.index })).rejects.toBeInstanceOf(ConflictError);
    expect(await session.status()).toMatchObject({ head: { checkpointId: b.checkpointId }, checkpointCount: 2 });
    await expect(session.rewind({ to: a.index!, ifHead: b.checkpointId })).resolves.toMatchObject({ branch: 1 });
    await session.stop({ checkpoint: false });
  });

  test('a repeated key is answered with the first result, once', async () => {
    const { session } = await memorySession('dedupe');
    const a = await session.checkpoint();
    await session.checkpoint();
    const first = await session.rewind({ to: a.index!, idempotencyKey: 'go-back' });
    const again = await session.rewind({ to: a.index!, idempotencyKey: 'go-back' });
    expect(again).toEqual(first);
    expect((await session.timeline()).filter((e) => e.kind === 'rewound')).toHaveLength(1);
    await expect(session.fork({ idempotencyKey: 'go-back' })).rejects.toBeInstanceOf(InvalidInputError);
    await session.stop({ checkpoint: false });
  });

  test('run-control verbs follow the phase rules', async () => {
    const { session } = await memorySession('phases');
    await session.stop({ checkpoint: true });
    await expect(session.rewind({ to: 1 })).rejects.toMatchObject({ code: 'SessionClosed' });
    const { session: s2 } = await memorySession('phases-2');
    await s2.pause();
    await expect(s2.pause()).rejects.toBeInstanceOf(InvalidTransitionError);
    await s2.stop();
  });
});

describe('policies', () => {
  test('automatic checkpoints every period of running, until configure turns them off', async () => {
    const { session } = await memorySession('auto', { policies: { checkpointEveryMs: 1_000 } });
    await eventually(async () => (await session.status()).checkpointCount >= 2, 15_000);
    const triggers = (await session.timeline()).flatMap((e) => (e.kind === 'checkpoint' ? [e.checkpoint.trigger] : []));
    expect(triggers.every((t) => t === 'automatic')).toBe(true);
    const configured = await session.configure({ policies: {} });
    expect(configured.policies).toEqual({});
    const count = configured.checkpointCount;
    await new Promise((r) => setTimeout(r, 2_500));
    expect((await session.status()).checkpointCount).toBeLessThanOrEqual(count + 1);
    await session.stop({ checkpoint: false });
  }, 30_000);

  test('checkpointOnlyIfActive: no automatic checkpoint of a state nothing changed', async () => {
    const { session, runtime } = await memorySession('only-active', {
      policies: { checkpointEveryMs: 1_000, checkpointOnlyIfActive: true },
    });
    await eventually(async () => (await session.status()).checkpointCount >= 1, 15_000);
    const idle = (await session.status()).checkpointCount;
    await new Promise((r) => setTimeout(r, 3_000));
    expect((await session.status()).checkpointCount).toBe(idle);
    sys.memory.write(runtime.instanceId, 'something happened');
    await eventually(async () => (await session.status()).checkpointCount === idle + 1, 15_000);
    await session.stop({ checkpoint: false });
  }, 40_000);

  test('an idle session pauses itself; a paused one stops after its time', async () => {
    const { session } = await memorySession('idle', {
      policies: { idlePauseAfterMs: 1_500, stopPausedAfterMs: 1_500 },
    });
    await eventually(async () => (await session.status()).phase === 'paused', 15_000);
    const pausedEntry = (await session.timeline()).find((e) => e.kind === 'policy');
    expect(pausedEntry).toMatchObject({ action: 'pause' });
    await expect(session.result()).resolves.toMatchObject({ phase: 'completed' });
    const timeline = await session.timeline();
    expect(timeline.filter((e) => e.kind === 'policy').map((e) => (e as { action: string }).action)).toEqual([
      'pause',
      'stop',
    ]);
  }, 30_000);

  test('touch and writes keep an idle timer from firing', async () => {
    const { session, runtime } = await memorySession('touch', { policies: { idlePauseAfterMs: 2_000 } });
    for (let i = 0; i < 6; i++) {
      await new Promise((r) => setTimeout(r, 500));
      if (i % 2) await session.touch();
      else sys.memory.write(runtime.instanceId, `write ${i}`);
    }
    expect((await session.status()).phase).toBe('running');
    await session.stop({ checkpoint: false });
  }, 30_000);
});

test('the timeline pages from the store with stable indices, also after the session ended', async () => {
  const { session, sessionId } = await memorySession('paging');
  for (let i = 0; i < 90; i++) await session.checkpoint();
  await session.stop({ checkpoint: false });
  const all: TimelineEntry[] = [];
  let from: number | null = 1;
  while (from !== null) {
    const page = await sys.sessions.get(sessionId).timelinePage({ from, limit: 25 });
    all.push(...page.entries);
    from = page.next;
  }
  expect(all.map((e) => e.index)).toEqual(all.map((_, i) => i + 1));
  expect(all.filter((e) => e.kind === 'checkpoint')).toHaveLength(90);
  const stored = await sys.store.readTimeline(sessionId, { from: 1, limit: 1000 });
  expect(stored.entries.map((e) => e.index)).toEqual(all.map((e) => e.index));
}, 120_000);

describe('a fork family in the store', () => {
  test('gc never breaks a fork: its first checkpoint keeps the chunks its source deleted', async () => {
    const { session, runtime } = await memorySession('family-gc', { retention: { keepLast: 1, keepLabelled: false } });
    sys.memory.write(runtime.instanceId, 'the state the fork starts from '.repeat(5_000));
    const c = await session.checkpoint();
    const forkId = newId('family-gc-fork');
    await session.fork({ from: c.index!, newSessionId: forkId, paused: true });
    // The source moves on: retention deletes the checkpoint the fork was made from, and gc runs.
    sys.memory.write(runtime.instanceId, 'something else entirely');
    await session.checkpoint();
    await session.checkpoint();
    await eventually(async () => (await session.timeline()).some((e) => e.kind === 'checkpoint-deleted'));
    await session.stop({ checkpoint: false });
    await sys.store.gc({ now: Date.now() + 7 * 86_400_000 });
    const fork = sys.sessions.get(forkId);
    await fork.resume();
    expect(await memoryState(fork)).toBe('the state the fork starts from '.repeat(5_000));
    await fork.stop({ checkpoint: false });
  }, 60_000);

  test('shred destroys the family: the source and every fork become unreadable, and say so', async () => {
    const { session, sessionId } = await memorySession('family-shred');
    const c = await session.checkpoint();
    const forkId = newId('family-shred-fork');
    await session.fork({ from: c.index!, newSessionId: forkId, paused: true });
    await session.stop({ checkpoint: false });
    await sys.store.shred(sessionId);
    const fork = sys.sessions.get(forkId);
    // Never a fresh start: the fork stays paused with the reason.
    await expect(fork.resume()).rejects.toMatchObject({ code: 'RestoreFailed' });
    const status = await fork.status();
    expect(status.phase).toBe('paused');
    expect(status.failure?.message).toMatch(/KeyUnavailable/);
    await fork.stop({ checkpoint: false });
  }, 60_000);
});

test('a session that has ended can still be forked: from its head or an index, through the start path', async () => {
  const { session, sessionId, runtime } = await memorySession('ended-src');
  sys.memory.write(runtime.instanceId, 'kept at index');
  const c = await session.checkpoint();
  await session.verify({ checkpointId: c.checkpointId }); // an entry that is not a checkpoint, right after it
  sys.memory.write(runtime.instanceId, 'final');
  await session.stop(); // takes a final checkpoint: the head
  const fromHead = await session.fork({ newSessionId: newId('ended-head') });
  const fromIndex = await session.fork({ from: c.index!, newSessionId: newId('ended-index'), paused: true });
  expect(fromIndex.from.checkpointId).toBe(c.checkpointId);

  const head = sys.sessions.get(fromHead.forks[0]!.sessionId);
  expect(await memoryState(head)).toBe('final');
  expect((await head.status()).forkedFrom).toMatchObject({ sessionId, checkpointId: fromHead.from.checkpointId });
  const indexed = sys.sessions.get(fromIndex.forks[0]!.sessionId);
  expect((await indexed.status()).phase).toBe('paused');
  await indexed.resume();
  expect(await memoryState(indexed)).toBe('kept at index');
  const d = await sys.client.workflow.getHandle(sessionWorkflowId(indexed.sessionId)).describe();
  expect(d.typedSearchAttributes.get(forkedFromKey)).toBe(`${sessionId}/${c.checkpointId}`);

  // Its ids are checked like any start's.
  await expect(session.fork({ newSessionId: indexed.sessionId })).rejects.toMatchObject({
    code: 'SessionAlreadyExists',
  });
  await expect(session.fork({ from: 999 })).rejects.toBeInstanceOf(SnapshotNotFoundError);
  // An index that is not a checkpoint says what is there, as it does while the session runs.
  const verification = c.index! + 1;
  const refused = await session.fork({ from: verification }).catch((e: unknown) => e);
  expect(refused).toBeInstanceOf(InvalidInputError);
  expect(refused).toMatchObject({
    message:
      `index ${verification} of session ${sessionId} is a verification of the checkpoint at index ${c.index}, ` +
      `not a checkpoint; the nearest checkpoint is at index ${c.index}`,
    issues: [expect.objectContaining({ params: { nearest: c.index, kind: 'verified' } })],
  });
  for (const h of [head, indexed]) await h.stop({ checkpoint: false });
}, 60_000);

test('a tampered timeline record is a typed refusal: the rewind that needs it changes nothing', async () => {
  const sessionId = newId('tampered-log');
  const session = await sys.sessions.start({ sessionId, runtime: { kind: 'conversation' } });
  await runningStatus(session);
  await session.append({ messages: [{ role: 'user', content: 'long ago' }], checkpoint: true });
  // Enough entries after that turn that it has left the session's recent window: only the store's log knows which
  // checkpoint holds the first message. Refused signals are entries that cost no activity, so this takes a moment
  // however loaded the machine (135 checkpoints, the state's window, took ~12 s alone and over a minute in full runs).
  const { timelineLength } = await session.status();
  for (let i = 0; i < 70; i++) await session.signal('resume');
  await eventually(async () => (await session.status()).timelineLength >= timelineLength + 70);
  // The next turn's checkpoint takes what waited to the store.
  await session.append({ messages: [{ role: 'assistant', content: 'later' }], checkpoint: true });
  const first = '1'.padStart(16, '0');
  const record = path.join(sys.dir, 'snapshots', sessionId, 'timeline-entries', first, first);
  const bytes = fs.readFileSync(record);
  bytes[40] = bytes[40]! ^ 0xff; // inside the first record's sealed body
  fs.writeFileSync(record, bytes);

  const before = await session.status();
  await expect(session.rewind({ messageIndex: 1 })).rejects.toMatchObject({ code: 'SnapshotTampered' });
  const after = await session.status();
  expect(after).toMatchObject({ phase: 'running', branch: 0, head: before.head, messageCount: 2 });
  await expect(session.timeline({ from: 1, limit: 5 })).rejects.toMatchObject({ code: 'SnapshotTampered' });
  await session.stop({ checkpoint: false });
});
