import * as fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import type { Message } from '../../src/domain';
import { ConversationRejectedError, ConversationRuntime, RuntimeFailedError } from '../../src/runtimes';
import { ChunkedSnapshotStore, chunkerFor, isUnchangedRange, sourceBytes } from '../../src/snapshots';
import { cp, packBytes, readAll } from '../helpers/checkpoints';

const user = (content: string): Message => ({ role: 'user', content });
const calling = (id: string): Message => ({
  role: 'assistant',
  content: '',
  toolCalls: [{ id, name: 'search', arguments: '{"q":"x"}' }],
});
const result = (id: string): Message => ({ role: 'tool', content: `result of ${id}`, toolCallId: id });

describe('ConversationRuntime', () => {
  let runtime: ConversationRuntime;
  beforeEach(() => {
    runtime = new ConversationRuntime();
  });
  const start = (messages?: Message[], instanceId = 'a') =>
    runtime.start({ sessionId: 's', instanceId, spec: { kind: 'conversation', ...(messages ? { messages } : {}) } });

  test('appends are numbered from the seed; the state is one JSON line per message; read back by range', async () => {
    await start([{ role: 'system', content: 'be brief' }]);
    expect(runtime.append('a', [user('hi'), calling('c1')])).toEqual({
      messageCount: 3,
      firstIndex: 1,
      unsafeCuts: [],
    });
    expect(runtime.append('a', [result('c1')])).toEqual({
      messageCount: 4,
      firstIndex: 3,
      unsafeCuts: [{ callId: 'c1', from: 3, to: 3 }],
    });
    const lines = (await readAll(await runtime.capture('a'))).toString('utf8').split('\n');
    expect(lines).toHaveLength(5);
    expect(lines[4]).toBe('');
    expect(JSON.parse(lines[3]!)).toEqual(result('c1'));
    expect(runtime.messages('a', { from: 1, limit: 2 })).toEqual([user('hi'), calling('c1')]);
    expect(runtime.messages('a')).toHaveLength(4);
    expect(runtime.summary('a')).toEqual({ messageCount: 4, unsafeCuts: [{ callId: 'c1', from: 3, to: 3 }] });
    expect(() => runtime.messages('a', { from: 5 })).toThrow(RangeError);
  });

  test('a tool result for an unknown or answered call is refused with InvalidInput; nothing of it is kept', async () => {
    await start([user('hi'), calling('c1')]);
    const refusal = (messages: Message[]) => {
      try {
        runtime.append('a', messages);
      } catch (error) {
        return error;
      }
      throw new Error('the append was accepted');
    };
    expect(refusal([result('c1'), result('nope')])).toMatchObject({
      name: 'ConversationRejectedError',
      code: 'InvalidInput',
      messageIndex: 3,
      message: 'message 3 answers tool call "nope", which no earlier message made',
    });
    expect(runtime.messageCount('a')).toBe(2);
    runtime.append('a', [result('c1')]);
    expect(refusal([result('c1')])).toMatchObject({
      messageIndex: 3,
      message: 'message 3 answers tool call "c1", already answered by message 2',
    });
    const unknownKey = refusal([{ role: 'user', content: 'x', tool_call_id: 'c1' } as unknown as Message]);
    expect(unknownKey).toBeInstanceOf(ConversationRejectedError);
    expect((unknownKey as ConversationRejectedError).issues?.[0]?.message).toMatch('unknown field "tool_call_id"');
    await expect(start([result('c9')], 'b')).rejects.toThrow(ConversationRejectedError);
    expect(await runtime.describe('b')).toBeUndefined();
  });

  test('an append at an index answers a retry as the first attempt did; elsewhere it is refused', async () => {
    await start([user('hi'), calling('c1')]);
    const first = runtime.append('a', [result('c1'), user('more')], { at: 2 });
    expect(runtime.append('a', [result('c1'), user('more')], { at: 2 })).toEqual(first);
    expect(runtime.messageCount('a')).toBe(4);
    expect(() => runtime.append('a', [user('other')], { at: 2 })).toThrow(ConversationRejectedError);
    expect(() => runtime.append('a', [user('later')], { at: 9 })).toThrow(ConversationRejectedError);
  });

  test('a stopped conversation refuses appends and can still be captured', async () => {
    await start([user('hi')]);
    await runtime.stop('a');
    expect(() => runtime.append('a', [user('x')])).toThrow(RuntimeFailedError);
    expect((await readAll(await runtime.capture('a'))).toString()).toBe('{"role":"user","content":"hi"}\n');
  });

  test('restore keeps the pair rules of the state it read; malformed state is SnapshotCorrupt', async () => {
    await start([user('hi'), calling('c1')]);
    const state = await readAll(await runtime.capture('a'));
    await runtime.restore({
      sessionId: 's',
      instanceId: 'b',
      spec: { kind: 'conversation' },
      state: Readable.from([state]),
    });
    // c1 is still open in the restored instance: its result is taken, a second one is not.
    runtime.append('b', [result('c1')]);
    expect(() => runtime.append('b', [result('c1')])).toThrow(ConversationRejectedError);

    const bad = [
      ['a cut last line', state.subarray(0, state.length - 3)],
      ['a line that is not JSON', Buffer.from('{"role":\n')],
      ['a line that is not a message', Buffer.from('{"role":"robot","content":""}\n')],
      ['a result without its call', Buffer.from(`${JSON.stringify(result('zz'))}\n`)],
    ] as const;
    for (const [, bytes] of bad) {
      const instanceId = `bad-${bytes.length}`;
      await expect(
        runtime.restore({
          sessionId: 's',
          instanceId,
          spec: { kind: 'conversation' },
          state: Readable.from([bytes]),
          checkpointId: 'cp-3',
        }),
      ).rejects.toMatchObject({ name: 'SnapshotCorruptError', code: 'SnapshotCorrupt', checkpointId: 'cp-3' });
      expect(await runtime.describe(instanceId)).toBeUndefined();
    }
  });

  test('captureState names everything the last stored checkpoint held as unchanged', async () => {
    await start([user('hi')]);
    const first = await runtime.captureState('a');
    const firstBytes = await readAll(sourceBytes(first));
    first.stored('cp-1');
    runtime.append('a', [user('turn')]);
    const second = await runtime.captureState('a');
    // An append while the capture is read does not reach it.
    runtime.append('a', [user('later')]);
    const pieces: Array<Buffer | [number, number]> = [];
    for await (const p of second.pieces) pieces.push(isUnchangedRange(p) ? [p.baseOffset, p.length] : Buffer.from(p));
    expect(pieces).toEqual([[0, firstBytes.length], Buffer.from('{"role":"user","content":"turn"}\n')]);
  });

  test('1,000 turns checkpointed after each store new bytes in proportion to the turns, not the history', async () => {
    // On tmpfs where there is one: a thousand checkpoints' fsyncs on a disk take longer than the test may.
    const dir = fs.mkdtempSync(path.join(fs.existsSync('/dev/shm') ? '/dev/shm' : os.tmpdir(), 'ds-conversation-'));
    try {
      // Small chunks: a checkpoint rewrites the conversation's last chunk, whose size is the constant per turn.
      const store = new ChunkedSnapshotStore({ rootDir: dir, keyring: null, chunker: chunkerFor(4096) });
      await start([{ role: 'system', content: 'You answer questions.' }]);
      let parent: string | null = null;
      let messageBytes = 0;
      let given = 0;
      // Pack bytes after every hundredth checkpoint (walking the store each time would cost more than the writes).
      const packsAt: number[] = [0];
      for (let turn = 1; turn <= 1000; turn++) {
        // Text that does not compress away: each turn has its own words.
        const words = (n: number) =>
          Array.from({ length: n }, (_, i) => ((turn * 7919 + i * 104729) % 1e6).toString(36));
        const messages: Message[] = [user(words(20).join(' ')), { role: 'assistant', content: words(60).join(' ') }];
        messageBytes += Buffer.byteLength(messages.map((m) => `${JSON.stringify(m)}\n`).join(''));
        runtime.append('a', messages);
        const state = await runtime.captureState('a');
        // Count the bytes the store is handed or reads back through unchanged runs.
        const counted = {
          ...state,
          pieces: (async function* () {
            for await (const p of state.pieces) {
              if (!isUnchangedRange(p)) {
                given += p.byteLength;
                yield p;
              } else {
                yield {
                  ...p,
                  read: async function* (from: number, to: number) {
                    given += to - from;
                    yield* p.read(from, to);
                  },
                };
              }
            }
          })(),
        };
        const checkpointId = `cp-${turn}`;
        await store.write({ ...cp(turn, parent, 's1'), runtime: { kind: 'conversation', version: '1' } }, counted);
        state.stored(checkpointId);
        parent = checkpointId;
        if (turn % 100 === 0) packsAt.push(packBytes(dir));
      }
      const stored = packsAt[packsAt.length - 1]!;
      // The history again at each checkpoint would be ~500 × messageBytes; a turn and about a chunk is a few times it.
      expect(stored).toBeLessThan(10 * messageBytes);
      expect(given).toBeLessThan(20 * messageBytes);
      // And the cost does not grow with the history: the last hundred checkpoints cost about what the first did.
      const hundred = (n: number) => packsAt[n]! - packsAt[n - 1]!;
      expect(hundred(10)).toBeLessThan(2 * hundred(2));
      const restored = await readAll((await store.open('s1', parent!)).stream);
      expect(restored.equals(await readAll(await runtime.capture('a')))).toBe(true);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  }, 180_000);
});
