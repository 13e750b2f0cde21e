/** The activities of the conversation runtime: appending messages and reading them back where the instance lives. */
import { ApplicationFailure } from '@temporalio/activity';
import type { RuntimeInstanceRef } from '../api/messages';
import { ERROR_CODES } from '../domain/error-codes';
import type { AppendResult } from '../domain/conversation';
import { MAX_APPEND_BYTES } from '../domain/schemas';
import type { ConversationRuntime } from '../runtimes';
import type { AppendMessagesInput, ReadMessagesInput, ReadMessagesResult } from './activity-inputs';
import { type ActivityContext, MAX_READ_MESSAGES, toFailure } from './activity-context';

export function conversationActivities(ctx: ActivityContext) {
  const { runtimeFor } = ctx;
  // The registry's runtime of the conversation kind is the one with messages (RuntimeRegistry is keyed by kind).
  const conversationOf = (ref: RuntimeInstanceRef): ConversationRuntime => {
    if (ref.kind !== 'conversation') {
      throw ApplicationFailure.nonRetryable(
        `runtime instance ${ref.instanceId} is a ${ref.kind} instance, not a conversation`,
        ERROR_CODES.RuntimeFailed,
      );
    }
    return runtimeFor(ref.kind) as ConversationRuntime;
  };
  return {
    /**
     * Appends messages to a conversation instance where it lives, keeping the pair rules (a refusal is InvalidInput);
     * the spans it closes let the workflow judge later cuts without the messages.
     */
    async appendMessages(input: AppendMessagesInput): Promise<AppendResult & { previousRole?: string }> {
      try {
        const runtime = conversationOf(input.instance);
        const result = runtime.append(input.instance.instanceId, input.messages, { at: input.at });
        // The role before the appended messages tells the workflow whether they start a new assistant turn.
        const before =
          result.firstIndex > 0
            ? runtime.messages(input.instance.instanceId, { from: result.firstIndex - 1, limit: 1 })
            : [];
        return { ...result, ...(before[0] ? { previousRole: before[0].role } : {}) };
      } catch (err) {
        throw toFailure(err);
      }
    },

    /** Reads messages back from a conversation instance, at most MAX_APPEND_BYTES of them as JSON (at least one). */
    async readMessages(input: ReadMessagesInput): Promise<ReadMessagesResult> {
      try {
        const runtime = conversationOf(input.instance);
        const limit = Math.min(input.limit ?? MAX_READ_MESSAGES, MAX_READ_MESSAGES);
        const messages = runtime.messages(input.instance.instanceId, { from: input.from, limit });
        let bytes = 0;
        const fit = messages.findIndex((m) => (bytes += Buffer.byteLength(JSON.stringify(m))) > MAX_APPEND_BYTES);
        return {
          messages: fit < 0 ? messages : messages.slice(0, Math.max(1, fit)),
          messageCount: runtime.messageCount(input.instance.instanceId),
        };
      } catch (err) {
        throw toFailure(
          err instanceof RangeError ? ApplicationFailure.nonRetryable(err.message, ERROR_CODES.InvalidInput) : err,
        );
      }
    },
  };
}
