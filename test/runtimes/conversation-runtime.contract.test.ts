import { ConversationRuntime } from '../../src/runtimes';
import { runSessionRuntimeContract } from './runtime.contract';

runSessionRuntimeContract({
  name: 'ConversationRuntime',
  newRuntime: () => new ConversationRuntime(),
  runningSpec: () => ({ kind: 'conversation', messages: [{ role: 'system', content: 'You are terse.' }] }),
  // A conversation ends only when it is stopped.
  capabilities: { captureState: true },
});
