import { MemoryRuntime } from '../../src/runtimes';
import { runSessionRuntimeContract } from './runtime.contract';

runSessionRuntimeContract({
  name: 'MemoryRuntime',
  newRuntime: () => new MemoryRuntime(),
  runningSpec: () => ({ kind: 'memory', initialState: 'state' }),
  // An instance in memory ends only when it is stopped.
  capabilities: { captureState: true },
});
