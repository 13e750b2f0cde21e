export { ConversationRejectedError, ConversationRuntime } from './conversation-runtime';
