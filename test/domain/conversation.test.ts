import {
  addToSummary,
  AppendInput,
  checkAppend,
  lastAssistantTurnStart,
  Message,
  RuntimeSpec,
  safeCut,
  summarize,
  type CallRecord,
} from '../../src/domain';

const user = (content: string): Message => ({ role: 'user', content });
const answer = (content: string): Message => ({ role: 'assistant', content });
const calling = (...ids: string[]): Message => ({
  role: 'assistant',
  content: '',
  toolCalls: ids.map((id) => ({ id, name: 'search', arguments: '{}' })),
});
const result = (id: string): Message => ({ role: 'tool', content: `result of ${id}`, toolCallId: id });

// 0 user, 1 assistant calls a+b, 2 result a, 3 result b, 4 answer, 5 user, 6 assistant calls c, 7 result c, 8 answer
const conversation: Message[] = [
  user('hi'),
  calling('a', 'b'),
  result('a'),
  result('b'),
  answer('done'),
  user('again'),
  calling('c'),
  result('c'),
  answer('done again'),
];

describe('Message schema', () => {
  test('a tool message needs toolCallId; other roles may not carry one; only assistants call tools', () => {
    expect(Message.safeParse({ role: 'tool', content: 'x' }).error?.issues).toMatchObject([
      { path: ['toolCallId'], message: 'a tool message must name the call it answers' },
    ]);
    expect(Message.safeParse({ role: 'user', content: 'x', toolCallId: 'a' }).error?.issues).toMatchObject([
      { path: ['toolCallId'], message: 'a user message has no toolCallId' },
    ]);
    expect(
      Message.safeParse({ role: 'user', content: 'x', toolCalls: [{ id: 'a', name: 'n', arguments: '' }] }).success,
    ).toBe(false);
    expect(Message.safeParse(calling('a', 'a')).error?.issues[0]?.message).toBe('tool call id "a" is repeated');
    expect(Message.safeParse(result('a')).success).toBe(true);
  });

  test('unknown keys are refused with the field they probably meant; content is bounded', () => {
    expect(Message.safeParse({ role: 'tool', content: 'x', tool_call_id: 'a' }).error?.issues[0]?.message).toMatch(
      'unknown field "tool_call_id" (did you mean "toolCallId"?)',
    );
    expect(Message.safeParse({ role: 'user', content: 'x'.repeat(256 * 1024 + 1) }).success).toBe(false);
  });

  test('AppendInput takes 1 to 1000 messages, a label and an idempotency key', () => {
    expect(AppendInput.safeParse({ messages: [user('hi')], checkpoint: true, label: 'turn 1' }).success).toBe(true);
    expect(AppendInput.safeParse({ messages: [] }).success).toBe(false);
    expect(AppendInput.safeParse({ messages: Array.from({ length: 1001 }, () => user('x')) }).success).toBe(false);
    expect(AppendInput.safeParse({ messages: [user('x')], idempotencyKey: 'has space' }).success).toBe(false);
  });

  test('a conversation spec is a runtime spec; its seed must keep the pair rules', () => {
    expect(RuntimeSpec.safeParse({ kind: 'conversation', messages: conversation }).success).toBe(true);
    expect(RuntimeSpec.safeParse({ kind: 'conversation' }).success).toBe(true);
    expect(
      RuntimeSpec.safeParse({ kind: 'conversation', messages: [user('hi'), result('nope')] }).error?.issues,
    ).toMatchObject([{ path: ['messages', 1], message: expect.stringContaining('"nope", which no earlier message') }]);
  });
});

describe('checkAppend', () => {
  test('a result for a call never made, or answered already, is refused at its index; nothing is kept', () => {
    const calls = new Map<string, CallRecord>();
    const first = checkAppend(calls, 0, [user('hi'), calling('a')]);
    expect(first).toEqual({ ok: true, calls: [['a', { index: 1 }]], unsafeCuts: [] });
    for (const [id, call] of first.ok ? first.calls : []) calls.set(id, call);

    expect(checkAppend(calls, 2, [result('b')])).toEqual({
      ok: false,
      messageIndex: 2,
      reason: 'message 2 answers tool call "b", which no earlier message made',
    });
    expect(checkAppend(calls, 2, [result('a'), result('a')])).toEqual({
      ok: false,
      messageIndex: 3,
      reason: 'message 3 answers tool call "a", already answered by message 2',
    });
    expect(checkAppend(calls, 2, [calling('a')])).toMatchObject({ ok: false, messageIndex: 2 });
    expect(calls.get('a')).toEqual({ index: 1 });

    // A late result closes a span that starts before the append.
    expect(checkAppend(calls, 2, [user('meanwhile'), result('a')])).toEqual({
      ok: true,
      calls: [['a', { index: 1, answeredAt: 3 }]],
      unsafeCuts: [{ callId: 'a', from: 2, to: 3 }],
    });
  });
});

describe('safeCut', () => {
  test('a cut between a call and its result is refused and names the call and the nearest safe index', () => {
    const safe = [0, 1, 4, 5, 6, 8, 9];
    for (let n = 0; n <= conversation.length; n++) {
      expect(safeCut(conversation, n).ok).toBe(safe.includes(n));
    }
    expect(safeCut(conversation, 3)).toEqual({
      ok: false,
      nearestSafe: 1,
      callId: 'b',
      reason:
        'message index 3 splits tool call "b" (made by message 1, answered by message 3); the nearest safe index is 1',
    });
    expect(safeCut(conversation, 7)).toMatchObject({ ok: false, nearestSafe: 6, callId: 'c' });
  });

  test('the summary the appends built judges every cut as the messages do', () => {
    let summary = summarize([]);
    let calls = new Map<string, CallRecord>();
    for (const [start, end] of [
      [0, 2],
      [2, 3],
      [3, 7],
      [7, 9],
    ] as const) {
      const check = checkAppend(calls, start, conversation.slice(start, end));
      if (!check.ok) throw new Error(check.reason);
      calls = new Map([...calls, ...check.calls]);
      summary = addToSummary(summary, { messageCount: end, firstIndex: start, unsafeCuts: check.unsafeCuts });
    }
    expect(summary).toEqual(summarize(conversation));
    for (let n = 0; n <= conversation.length + 1; n++) expect(safeCut(summary, n)).toEqual(safeCut(conversation, n));
  });

  test('overlapping and chained spans move the cut below all of them', () => {
    // Call a (message 1) is answered after call b (message 3) was made and answered: a cut at 4 splits both.
    const messages = [user('x'), calling('a'), user('y'), calling('b'), result('b'), result('a'), answer('z')];
    expect(safeCut(messages, 4)).toMatchObject({ ok: false, nearestSafe: 1, callId: 'a' });
    // Moved below b's span, the cut still splits a: the nearest safe index is below both.
    expect(safeCut([user('x'), calling('a'), calling('b'), result('a'), user('y'), result('b')], 5)).toMatchObject({
      ok: false,
      nearestSafe: 1,
      callId: 'b',
    });
    expect(safeCut(messages, 6).ok).toBe(true);
  });

  test('an index past the end is refused with the nearest safe one; a negative one is a RangeError', () => {
    expect(safeCut(conversation, 12)).toMatchObject({ ok: false, nearestSafe: 9 });
    expect(() => safeCut(conversation, -1)).toThrow(RangeError);
    expect(() => safeCut(conversation, 1.5)).toThrow(RangeError);
  });

  test('an unanswered call splits nothing until its result arrives', () => {
    const pending = [user('x'), calling('a')];
    expect(safeCut(pending, 2).ok).toBe(true);
    expect(safeCut([...pending, result('a')], 2)).toMatchObject({ ok: false, nearestSafe: 1 });
  });
});

describe('lastAssistantTurnStart', () => {
  test('just before the last assistant message, moved down to a safe index', () => {
    expect(lastAssistantTurnStart(conversation)).toBe(8);
    expect(lastAssistantTurnStart(conversation.slice(0, 8))).toBe(6);
    // The last assistant message made a call that was answered: the cut before it keeps the earlier pair whole.
    expect(lastAssistantTurnStart([user('x'), calling('a'), result('a'), calling('b'), result('b')])).toBe(3);
    // A cut before the last assistant message would split a call made earlier and answered after it.
    expect(lastAssistantTurnStart([user('x'), calling('a'), answer('wait'), result('a')])).toBe(1);
    expect(lastAssistantTurnStart([user('x')])).toBeUndefined();
  });
});
