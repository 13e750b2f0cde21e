import crypto from 'node:crypto';
import type { Message } from '../../src/domain/conversation';
import { InvalidInputError, UnsafeMessageIndexError, type SessionHandle } from '../../src/client';
import { appendUpdate, type AppendResult } from '../../src/api';
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

function append(session: SessionHandle, messages: Message[], checkpoint = true): Promise<AppendResult> {
  return session.append({ messages, checkpoint });
}

async function messagesOf(session: SessionHandle): Promise<Message[]> {
  const { runtime } = await runningStatus(session);
  return sys.conversation.messages(runtime.instanceId, { limit: 1000 });
}

/** An agent loop: a user turn, a tool call and its result, and the answer, each checkpointed (trigger `turn`). */
async function agentSession() {
  const sessionId = newId('chat');
  const session = await sys.sessions.start({
    sessionId,
    runtime: { kind: 'conversation', messages: [{ role: 'system', content: 'be brief' }] },
  });
  await runningStatus(session);
  await append(session, [{ role: 'user', content: 'weather in Paris?' }]); // 2 messages
  await append(session, [
    { role: 'assistant', content: '', toolCalls: [{ id: 'call_1', name: 'weather', arguments: '{"city":"Paris"}' }] },
  ]); // 3
  await append(session, [{ role: 'tool', toolCallId: 'call_1', content: '18°C, sunny' }]); // 4
  await append(session, [{ role: 'assistant', content: 'Sunny, 18°C.' }]); // 5
  return { session, sessionId };
}

test('each turn is a checkpoint with its message index; a rewind by message index restores that state', async () => {
  const { session } = await agentSession();
  const timeline = await session.timeline();
  const turns = timeline.flatMap((e) => (e.kind === 'checkpoint' ? [[e.checkpoint.trigger, e.messageIndex]] : []));
  expect(turns).toEqual([
    ['turn', 2],
    ['turn', 3],
    ['turn', 4],
    ['turn', 5],
  ]);
  expect((await session.status()).messageCount).toBe(5);

  await session.rewind({ messageIndex: 2 });
  expect((await messagesOf(session)).map((m) => m.role)).toEqual(['system', 'user']);
  expect((await session.status()).messageCount).toBe(2);
  // The conversation goes on from there, on a new branch.
  await append(session, [{ role: 'assistant', content: 'Let me check.' }]);
  expect((await messagesOf(session)).map((m) => m.content)).toEqual(['be brief', 'weather in Paris?', 'Let me check.']);
  await session.stop({ checkpoint: false });
}, 60_000);

test('a cut between a tool call and its result is refused with the nearest safe index', async () => {
  const { session } = await agentSession();
  const err = await session.rewind({ messageIndex: 3 }).catch((e: unknown) => e);
  expect(err).toBeInstanceOf(UnsafeMessageIndexError);
  expect((err as UnsafeMessageIndexError).nearestSafe).toBe(2);
  expect((err as Error).message).toMatch(/call_1/);
  await expect(session.fork({ messageIndex: 3 })).rejects.toBeInstanceOf(UnsafeMessageIndexError);
  expect((await session.status()).messageCount).toBe(5);
  await expect(session.rewind({ messageIndex: 99 })).rejects.toBeInstanceOf(UnsafeMessageIndexError);
  await session.stop({ checkpoint: false });
}, 60_000);

test('fork by message index and regenerate: the source keeps its turn, marked and hidden by default', async () => {
  const { session, sessionId } = await agentSession();
  const forkId = newId('chat-fork');
  await session.fork({ messageIndex: 4, newSessionId: forkId });
  const fork = sys.sessions.get(forkId);
  expect((await messagesOf(fork)).map((m) => m.role)).toEqual(['system', 'user', 'assistant', 'tool']);
  expect((await fork.status()).messageCount).toBe(4);

  const retry = await session.regenerate();
  const regenerated = retry.forks[0]!.sessionId;
  // Just before the last assistant turn (which began with the tool call): the user's question.
  expect((await messagesOf(sys.sessions.get(regenerated))).map((m) => m.role)).toEqual(['system', 'user']);
  const visible = await session.timeline();
  const all = await session.timeline({ all: true });
  const marked = all.filter((e) => e.kind === 'checkpoint' && e.regenerated);
  expect(marked).toHaveLength(1);
  expect(visible.length).toBe(all.length - 1);
  expect(all.find((e) => e.kind === 'forked' && e.regenerate)).toBeDefined();
  for (const id of [sessionId, forkId, regenerated]) await sys.sessions.get(id).stop({ checkpoint: false });
}, 60_000);

test('bad appends are refused and change nothing', async () => {
  const { session } = await agentSession();
  // Checked where the messages are: the runtime refuses a result for a call nobody made.
  const refused = await session
    .append({ messages: [{ role: 'tool', toolCallId: 'call_nope', content: 'x' }] })
    .catch((e: unknown) => e);
  expect(refused).toBeInstanceOf(InvalidInputError);
  expect((refused as Error).message).toMatch(/call_nope/);
  await expect(
    session.workflow.executeUpdate(appendUpdate, { args: [{ messages: [{ role: 'user', text: 'hi' }] } as never] }),
  ).rejects.toMatchObject({ cause: { type: 'InvalidInput', message: expect.stringMatching(/unknown field "text"/) } });
  await eventually(async () => (await session.status()).messageCount === 5);
  await session.stop({ checkpoint: false });
}, 60_000);
