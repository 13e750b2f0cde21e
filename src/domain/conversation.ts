import { z } from 'zod';
import { strictObject } from './strict';

/**
 * The messages of a `conversation` session and the one rule that makes a place in it safe to rewind to: a cut never
 * separates an assistant's tool call from its result. Pure (no Node APIs): workflow code imports it too.
 *
 * A cut, or message index, `N` is the state after the first `N` messages. It is pair-safe when no tool call made in
 * `messages[0, N)` has its result at or after `N`. A call still unanswered splits nothing (the agent runs it again
 * after a rewind), so the newest state is always safe; once its result arrives, the cuts between call and result
 * become unsafe. That is why a cut's safety is known only from everything appended since, and why the workflow,
 * which holds counts and not messages, is handed the {@link UnsafeSpan}s each append closes.
 */

/** Characters of one message's content (or one tool call's arguments): messages travel in activity payloads. */
export const MAX_CONTENT_CHARS = 256 * 1024;

/** Messages one append may carry. */
export const MAX_APPEND_MESSAGES = 1000;

export const Role = z.enum(['system', 'user', 'assistant', 'tool']);
export type Role = z.infer<typeof Role>;

/** Tool call ids are made by model APIs (`call_…`, `toolu_…`): printable ASCII, no spaces. */
export const ToolCallId = z
  .string()
  .min(1, 'tool call id must not be empty')
  .max(200, 'tool call id must be at most 200 characters')
  .regex(/^[\x21-\x7e]+$/, 'tool call id must be printable ASCII without spaces');

export const ToolCall = strictObject({
  id: ToolCallId,
  name: z.string().min(1, 'tool name must not be empty').max(200, 'tool name must be at most 200 characters'),
  /** The arguments as the model wrote them (usually JSON text): kept as they are, not parsed. */
  arguments: z.string().max(MAX_CONTENT_CHARS, `tool call arguments must be at most ${MAX_CONTENT_CHARS} characters`),
});
export type ToolCall = z.infer<typeof ToolCall>;

/**
 * One message. `toolCalls` only on an assistant message; `toolCallId`, the call it answers, on a tool message and only
 * there. Whether that call was made and is still unanswered depends on the messages before: {@link checkAppend}.
 */
export const Message = strictObject({
  role: Role,
  content: z.string().max(MAX_CONTENT_CHARS, `content must be at most ${MAX_CONTENT_CHARS} characters`),
  toolCalls: z.array(ToolCall).min(1).max(128).optional(),
  toolCallId: ToolCallId.optional(),
}).superRefine((m, ctx) => {
  if (m.role === 'tool' && m.toolCallId === undefined) {
    ctx.addIssue({ code: 'custom', path: ['toolCallId'], message: 'a tool message must name the call it answers' });
  }
  if (m.role !== 'tool' && m.toolCallId !== undefined) {
    ctx.addIssue({ code: 'custom', path: ['toolCallId'], message: `a ${m.role} message has no toolCallId` });
  }
  if (m.toolCalls && m.role !== 'assistant') {
    ctx.addIssue({ code: 'custom', path: ['toolCalls'], message: 'only an assistant message makes tool calls' });
  }
  const ids = new Set<string>();
  for (const [i, call] of (m.toolCalls ?? []).entries()) {
    if (ids.has(call.id)) {
      ctx.addIssue({ code: 'custom', path: ['toolCalls', i, 'id'], message: `tool call id "${call.id}" is repeated` });
    }
    ids.add(call.id);
  }
});
export type Message = z.infer<typeof Message>;

/**
 * The cuts `from` to `to` (both included) split call `callId`: it was made by message `from - 1` and answered by
 * message `to`. One per tool result; cuts outside every span are safe.
 */
export interface UnsafeSpan {
  callId: string;
  from: number;
  to: number;
}

/**
 * What the workflow keeps to judge cuts without the messages: the count, and the spans every append so far closed
 * (the `unsafeCuts` of each {@link AppendResult}, gathered with {@link addToSummary}). It grows by one entry per tool
 * result, never by message bytes.
 */
export interface PairSummary {
  messageCount: number;
  unsafeCuts: readonly UnsafeSpan[];
}

/** What an append answers: the new count, the index of the first message appended, and the spans it closed. */
export interface AppendResult {
  messageCount: number;
  firstIndex: number;
  /** Spans whose result this append holds. A span may start before `firstIndex`: a late result makes older cuts unsafe. */
  unsafeCuts: UnsafeSpan[];
}

export type CutCheck = { ok: true } | { ok: false; nearestSafe: number; reason: string; callId?: string };

/** A call the conversation made: the message that made it, and the one that answered it once it is answered. */
export interface CallRecord {
  index: number;
  answeredAt?: number;
}

export type AppendCheck =
  | { ok: true; calls: Array<[string, CallRecord]>; unsafeCuts: UnsafeSpan[] }
  | { ok: false; messageIndex: number; reason: string };

/**
 * Whether `messages` may follow `messageCount` messages whose calls are `calls`: every tool message answers a call an
 * earlier assistant message made and nothing answered yet, and no call id is made twice. On success, `calls` are the
 * records to set (new calls and newly answered ones) and `unsafeCuts` the spans the append closes. `calls` is not
 * changed: an append refused keeps nothing.
 */
export function checkAppend(
  calls: ReadonlyMap<string, CallRecord>,
  messageCount: number,
  messages: readonly Message[],
): AppendCheck {
  const changed = new Map<string, CallRecord>();
  const unsafeCuts: UnsafeSpan[] = [];
  const lookup = (id: string) => changed.get(id) ?? calls.get(id);
  for (const [i, message] of messages.entries()) {
    const index = messageCount + i;
    if (message.toolCallId !== undefined) {
      const id = message.toolCallId;
      const call = lookup(id);
      if (!call) return refused(index, `message ${index} answers tool call "${id}", which no earlier message made`);
      if (call.answeredAt !== undefined) {
        return refused(
          index,
          `message ${index} answers tool call "${id}", already answered by message ${call.answeredAt}`,
        );
      }
      changed.set(id, { index: call.index, answeredAt: index });
      unsafeCuts.push({ callId: id, from: call.index + 1, to: index });
    }
    for (const { id } of message.toolCalls ?? []) {
      const made = lookup(id);
      if (made)
        return refused(index, `message ${index} makes tool call "${id}", already made by message ${made.index}`);
      changed.set(id, { index });
    }
  }
  return { ok: true, calls: [...changed], unsafeCuts };
}

function refused(messageIndex: number, reason: string): AppendCheck {
  return { ok: false, messageIndex, reason };
}

/**
 * The summary of `messages`, as the appends that made them would have built it. Lenient: a result for a call not made
 * before it spans nothing (stored conversations were checked when they were appended).
 */
export function summarize(messages: readonly Message[]): PairSummary {
  const madeAt = new Map<string, number>();
  const unsafeCuts: UnsafeSpan[] = [];
  for (const [index, message] of messages.entries()) {
    const made = message.toolCallId === undefined ? undefined : madeAt.get(message.toolCallId);
    if (made !== undefined) unsafeCuts.push({ callId: message.toolCallId!, from: made + 1, to: index });
    for (const { id } of message.toolCalls ?? []) if (!madeAt.has(id)) madeAt.set(id, index);
  }
  return { messageCount: messages.length, unsafeCuts };
}

/** `summary` after the append that answered `result`. */
export function addToSummary(summary: PairSummary, result: AppendResult): PairSummary {
  return { messageCount: result.messageCount, unsafeCuts: [...summary.unsafeCuts, ...result.unsafeCuts] };
}

/**
 * Whether cutting at `messageIndex` (keeping the first `messageIndex` messages) keeps every tool call with its result.
 * When it does not, `nearestSafe` is the largest safe index at or below it and `callId` the call the cut would split.
 * An index past the end is refused with the nearest safe one below the end. Not an integer ≥ 0: RangeError.
 */
export function safeCut(conversation: readonly Message[] | PairSummary, messageIndex: number): CutCheck {
  if (!Number.isSafeInteger(messageIndex) || messageIndex < 0) {
    throw new RangeError(`a message index is an integer of at least 0, got ${messageIndex}`);
  }
  const summary = isSummary(conversation) ? conversation : summarize(conversation);
  if (messageIndex > summary.messageCount) {
    return {
      ok: false,
      nearestSafe: nearestSafe(summary.unsafeCuts, summary.messageCount).index,
      reason: `the conversation has ${summary.messageCount} messages: there is no message index ${messageIndex}`,
    };
  }
  const { index, split } = nearestSafe(summary.unsafeCuts, messageIndex);
  if (!split) return { ok: true };
  return {
    ok: false,
    nearestSafe: index,
    callId: split.callId,
    reason:
      `message index ${messageIndex} splits tool call "${split.callId}" (made by message ${split.from - 1}, ` +
      `answered by message ${split.to}); the nearest safe index is ${index}`,
  };
}

/**
 * Where `regenerate` cuts: just before the last assistant message, moved down to a safe index (so a final answer that
 * follows tool results keeps them, and an assistant message whose calls were answered goes with its results).
 * Undefined when no assistant message exists.
 */
export function lastAssistantTurnStart(messages: readonly Message[]): number | undefined {
  const last = messages.findLastIndex((m) => m.role === 'assistant');
  if (last < 0) return undefined;
  return nearestSafe(summarize(messages).unsafeCuts, last).index;
}

/**
 * The largest index ≤ `at` outside every span, and the first span that moved it. Spans are visited by `to`, highest
 * first: once passed, a span lies wholly above the index (which only goes down), so one pass finds it.
 */
function nearestSafe(spans: readonly UnsafeSpan[], at: number): { index: number; split?: UnsafeSpan } {
  let index = at;
  let split: UnsafeSpan | undefined;
  for (const span of [...spans].sort((a, b) => b.to - a.to)) {
    if (span.from <= index && index <= span.to) {
      split ??= span;
      index = span.from - 1;
    }
  }
  return { index, split };
}

function isSummary(value: readonly Message[] | PairSummary): value is PairSummary {
  return !Array.isArray(value);
}
