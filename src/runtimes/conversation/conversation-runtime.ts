import { Readable } from 'node:stream';
import { z } from 'zod';
import {
  checkAppend,
  type AppendCheck,
  type AppendResult,
  type CallRecord,
  Message,
  type PairSummary,
  type UnsafeSpan,
} from '../../domain/conversation';
import { ERROR_CODES } from '../../domain/error-codes';
import { SnapshotCorruptError } from '../../domain/errors';
import type { ConversationRuntimeSpec } from '../../domain/schemas';
import { DurableSessionsError, messageOf } from '../../errors';
import type { UnchangedRange } from '../../snapshots';
import { InProcessInstances, type InProcessInstance } from '../in-process';
import type {
  CapturedState,
  ExitInfo,
  RestoreRequest,
  RuntimeInstanceInfo,
  SessionRuntime,
  StartRequest,
} from '../session-runtime';
import { adoptForRestore } from '../session-runtime';

/**
 * Thrown when messages cannot be appended: one does not match the message schema, a tool result answers a call that was
 * never made or is answered already, a call id is made twice, or `at` is not where the conversation stands. Nothing of
 * the append is kept.
 */
export class ConversationRejectedError extends DurableSessionsError {
  readonly code = ERROR_CODES.InvalidInput;
  constructor(
    message: string,
    readonly instanceId: string,
    /** The message (as an index of the conversation) that was refused, when one was. */
    readonly messageIndex?: number,
    readonly issues?: readonly z.core.$ZodIssue[],
  ) {
    super(message);
  }
}

interface ConversationInstance extends InProcessInstance {
  /**
   * The state is `buffer[0, length)`: JSON Lines, one message a line. Bytes below `length` are never written again
   * (an append writes past it, or into a new, larger buffer), so a capture keeps a view of them, no copy.
   */
  buffer: Buffer;
  length: number;
  /** Where each message's line starts. */
  readonly starts: number[];
  /** Every tool call made so far, by id: the pair rules of the next append. */
  readonly calls: Map<string, CallRecord>;
  /** The checkpoint the state was last stored as (or restored from), its size, and the appends it had seen. */
  base: { checkpointId: string; size: number; appends: number } | null;
  appends: number;
}

const VERSION = '1';

const Messages = z.array(Message);

/**
 * An agent's conversation, held in this worker's memory: an append-only list of messages, stored as JSON Lines. It is
 * never edited; a rewind restores an older checkpoint into a new instance. The pair rules of `src/domain/conversation.ts`
 * are kept on every append, so a stored conversation never holds a tool result without its call.
 *
 * Append-only makes `captureState` exact and cheap: everything the last stored checkpoint held is an unchanged run of
 * it, so a checkpoint after a turn reads and stores about the turn, never the history again.
 */
export class ConversationRuntime implements SessionRuntime<ConversationRuntimeSpec> {
  readonly kind = 'conversation';
  readonly version = VERSION;
  readonly placement = 'host';

  private readonly instances = new InProcessInstances<ConversationInstance>(this.kind, this.version);

  canRestore(version: string): boolean {
    return version === VERSION;
  }

  async start(request: StartRequest<ConversationRuntimeSpec>): Promise<RuntimeInstanceInfo> {
    const adopted = this.instances.adopt(request);
    if (adopted) return adopted;
    // Checked before the instance exists: a refused seed leaves nothing behind.
    const { messages, check } = checked(request.instanceId, request.spec.messages ?? [], new Map(), 0);
    const instance = this.create(request);
    this.store(instance, messages, check);
    return this.instances.info(instance);
  }

  async restore(request: RestoreRequest<ConversationRuntimeSpec>): Promise<RuntimeInstanceInfo> {
    const adopted = adoptForRestore(request, () => this.instances.adopt(request));
    if (adopted) return adopted;
    return this.instances.making(request.instanceId, () => this.restoreNew(request));
  }

  private async restoreNew(request: RestoreRequest<ConversationRuntimeSpec>): Promise<RuntimeInstanceInfo> {
    const chunks: Buffer[] = [];
    // A failing stream rejects here with its own error object, and nothing has been kept.
    for await (const chunk of request.state) chunks.push(Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk as string));
    const state = Buffer.concat(chunks);
    const corrupt = (why: string) =>
      new SnapshotCorruptError(
        `the conversation state is not valid: ${why}`,
        request.sessionId,
        request.checkpointId ?? '',
      );
    if (state.length > 0 && state[state.length - 1] !== NEWLINE) throw corrupt('its last line is cut short');
    const messages: Message[] = [];
    const starts: number[] = [];
    let at = 0;
    while (at < state.length) {
      starts.push(at);
      const end = state.indexOf(NEWLINE, at);
      let value: unknown;
      try {
        value = JSON.parse(state.toString('utf8', at, end));
      } catch (error) {
        throw corrupt(`line ${messages.length + 1} is not JSON (${messageOf(error)})`);
      }
      const parsed = Message.safeParse(value);
      if (!parsed.success) throw corrupt(`line ${messages.length + 1} is not a message (${parsed.error.message})`);
      messages.push(parsed.data);
      at = end + 1;
    }
    const check = checkAppend(new Map(), 0, messages);
    if (!check.ok) throw corrupt(check.reason);
    const instance = this.create(request);
    // The bytes are kept as they were read, not as this worker would write them: the next capture can be relative to
    // the checkpoint only if they are that checkpoint byte for byte.
    instance.buffer = state;
    instance.length = state.length;
    instance.starts.push(...starts);
    for (const [id, call] of check.calls) instance.calls.set(id, call);
    if (request.checkpointId !== undefined) {
      instance.base = { checkpointId: request.checkpointId, size: state.length, appends: instance.appends };
    }
    return this.instances.info(instance);
  }

  async capture(instanceId: string): Promise<Readable> {
    const { buffer, length } = this.instances.get(instanceId);
    return Readable.from(length > 0 ? [Buffer.from(buffer.subarray(0, length))] : [], { objectMode: false });
  }

  async captureState(instanceId: string): Promise<CapturedState> {
    const instance = this.instances.get(instanceId);
    const { buffer, length, base, appends } = instance;
    const unchanged = base?.size ?? 0;
    // Views of `buffer` below `length`, which no append touches.
    const view = (start: number, end: number): Buffer => buffer.subarray(start, end);
    async function* pieces(): AsyncGenerator<Uint8Array | UnchangedRange> {
      if (unchanged > 0) {
        yield {
          baseOffset: 0,
          length: unchanged,
          read: async function* (from: number, to: number) {
            yield view(from, to);
          },
        };
      }
      if (length > unchanged) yield view(unchanged, length);
    }
    return {
      base: base?.checkpointId ?? null,
      pieces: pieces(),
      close: () => undefined,
      stored: (checkpointId: string) => {
        // A capture older than the base (two captures stored out of order) would take the base back: ignored.
        if (instance.base && appends < instance.base.appends) return;
        instance.base = { checkpointId, size: length, appends };
      },
    };
  }

  stop(instanceId: string): Promise<ExitInfo> {
    return this.instances.stop(instanceId);
  }

  waitForExit(instanceId: string, signal?: AbortSignal): Promise<ExitInfo> {
    return this.instances.waitForExit(instanceId, signal);
  }

  async describe(instanceId: string): Promise<RuntimeInstanceInfo | undefined> {
    return this.instances.describe(instanceId);
  }

  /** Forgets the instance (stopping it first). Unknown ids are a no-op. */
  dispose(instanceId: string): Promise<void> {
    return this.instances.dispose(instanceId);
  }

  /**
   * Appends `messages` to a running instance, after checking them against the schema and the pair rules; a refused
   * append (ConversationRejectedError) keeps none of them. `at`, when given, is the index the first message must get:
   * a retried append whose messages already stand there answers as the first attempt did instead of adding them again.
   */
  append(instanceId: string, messages: readonly Message[], options: { at?: number } = {}): AppendResult {
    const instance = this.instances.running(instanceId);
    const count = instance.starts.length;
    const at = options.at ?? count;
    if (at !== count) return this.appended(instance, parsedMessages(instanceId, messages), at);
    const checkedAppend = checked(instanceId, messages, instance.calls, count);
    this.store(instance, checkedAppend.messages, checkedAppend.check);
    return { messageCount: instance.starts.length, firstIndex: count, unsafeCuts: checkedAppend.check.unsafeCuts };
  }

  /** `limit` messages (all by default) from index `from` (0 by default). */
  messages(instanceId: string, options: { from?: number; limit?: number } = {}): Message[] {
    const instance = this.instances.get(instanceId);
    const count = instance.starts.length;
    const from = options.from ?? 0;
    const limit = options.limit ?? count;
    if (!isCount(from) || from > count) throw new RangeError(`from must be an integer from 0 to ${count}, got ${from}`);
    if (!isCount(limit)) throw new RangeError(`limit must be a non-negative integer, got ${limit}`);
    const out: Message[] = [];
    for (let i = from; i < Math.min(count, from + limit); i++) out.push(lineAt(instance, i));
    return out;
  }

  /** How many messages the instance holds. */
  messageCount(instanceId: string): number {
    return this.instances.get(instanceId).starts.length;
  }

  /** The pair summary of the whole conversation, as the appends that made it answered it. */
  summary(instanceId: string): PairSummary {
    const instance = this.instances.get(instanceId);
    const unsafeCuts: UnsafeSpan[] = [];
    for (const [callId, call] of instance.calls) {
      if (call.answeredAt !== undefined) unsafeCuts.push({ callId, from: call.index + 1, to: call.answeredAt });
    }
    return { messageCount: instance.starts.length, unsafeCuts: unsafeCuts.sort((a, b) => a.to - b.to) };
  }

  /**
   * A retry of an append that stored `messages` at `at`: the result that append gave. Anything else — other messages
   * there, or `at` past the end — is a conflict: the caller's idea of the conversation is not this one.
   */
  private appended(instance: ConversationInstance, messages: Message[], at: number): AppendResult {
    const count = instance.starts.length;
    const stored = isCount(at) && at + messages.length <= count ? this.messages(instance.instanceId, { from: at }) : [];
    const same = stored.length > 0 && messages.every((m, i) => JSON.stringify(m) === JSON.stringify(stored[i]));
    if (!same) {
      throw new ConversationRejectedError(
        `the append was meant for message index ${at}, but the conversation holds ${count} messages`,
        instance.instanceId,
      );
    }
    const unsafeCuts = messages.flatMap((m, i): UnsafeSpan[] => {
      const call = m.toolCallId === undefined ? undefined : instance.calls.get(m.toolCallId);
      return call ? [{ callId: m.toolCallId!, from: call.index + 1, to: at + i }] : [];
    });
    return { messageCount: count, firstIndex: at, unsafeCuts };
  }

  /** Adds checked messages to the state: their lines, their starts and their calls. */
  private store(instance: ConversationInstance, messages: readonly Message[], check: AcceptedAppend): void {
    if (messages.length === 0) return;
    const lines = Buffer.from(messages.map((m) => `${JSON.stringify(m)}\n`).join(''), 'utf8');
    const end = instance.length + lines.length;
    if (end > instance.buffer.length) {
      // A new buffer: captures keep the old one, whose bytes stay as they were.
      const grown = Buffer.allocUnsafe(Math.max(end, instance.buffer.length * 2, 4096));
      instance.buffer.copy(grown, 0, 0, instance.length);
      instance.buffer = grown;
    }
    lines.copy(instance.buffer, instance.length);
    let at = instance.length;
    for (let i = 0; i < messages.length; i++) {
      instance.starts.push(at);
      at = instance.buffer.indexOf(NEWLINE, at) + 1;
    }
    instance.length = end;
    for (const [id, call] of check.calls) instance.calls.set(id, call);
    instance.appends++;
  }

  private create(request: StartRequest<ConversationRuntimeSpec>): ConversationInstance {
    return this.instances.add(request, {
      buffer: Buffer.alloc(0),
      length: 0,
      starts: [],
      calls: new Map(),
      base: null,
      appends: 0,
    });
  }
}

const NEWLINE = 0x0a;

type AcceptedAppend = Extract<AppendCheck, { ok: true }>;

/** `messages` as the schema parses them (unknown keys refused), or ConversationRejectedError with zod's issues. */
function parsedMessages(instanceId: string, messages: readonly Message[]): Message[] {
  const parsed = Messages.safeParse(messages);
  if (parsed.success) return parsed.data;
  throw new ConversationRejectedError(
    `messages do not match the message schema: ${parsed.error.message}`,
    instanceId,
    undefined,
    parsed.error.issues,
  );
}

/** `messages` parsed and checked against the pair rules after `count` messages that made `calls`. */
function checked(
  instanceId: string,
  messages: readonly Message[],
  calls: ReadonlyMap<string, CallRecord>,
  count: number,
): { messages: Message[]; check: AcceptedAppend } {
  const parsed = parsedMessages(instanceId, messages);
  const check = checkAppend(calls, count, parsed);
  if (!check.ok) throw new ConversationRejectedError(check.reason, instanceId, check.messageIndex);
  return { messages: parsed, check };
}

function isCount(n: number): boolean {
  return Number.isSafeInteger(n) && n >= 0;
}

/** Message `i`: its line parsed (it was checked when it was stored). */
function lineAt(instance: ConversationInstance, i: number): Message {
  const end = i + 1 < instance.starts.length ? instance.starts[i + 1]! - 1 : instance.length - 1;
  return JSON.parse(instance.buffer.toString('utf8', instance.starts[i], end)) as Message;
}
