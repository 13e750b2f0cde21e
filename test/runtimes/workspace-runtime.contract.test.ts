import * as fsp from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import { WorkspaceRuntime } from '../../src/runtimes';
import { runSessionRuntimeContract } from './runtime.contract';

let tmp: string;
let roots = 0;

beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'workspace-contract-'));
});

afterAll(async () => {
  await fsp.rm(tmp, { recursive: true, force: true });
});

runSessionRuntimeContract({
  name: 'WorkspaceRuntime',
  newRuntime: () => {
    const rootDir = path.join(tmp, `root-${++roots}`);
    return new WorkspaceRuntime({ rootDir, stateDir: `${rootDir}.run`, defaultStopGraceMs: 2_000 });
  },
  release: (runtime) => runtime.stopAll(),
  runningSpec: () => ({ kind: 'workspace', command: ['sleep', '30'], files: { 'state.txt': 'state' } }),
  capabilities: {
    captureState: true,
    endsBySelf: () => ({ kind: 'workspace', command: ['sh', '-c', 'sleep 0.1; exit 3'] }),
  },
});
