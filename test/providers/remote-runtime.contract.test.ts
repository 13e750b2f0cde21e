import * as fsp from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import { runSessionRuntimeContract } from '../runtimes/runtime.contract';
import { CaseRuntime, startSandboxHost, type SandboxHostProcess } from '../helpers/sandbox-host';

let tmp: string;
let host: SandboxHostProcess;

beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'remote-contract-'));
  host = await startSandboxHost(path.join(tmp, 'root'));
});

afterAll(async () => {
  await host?.stop();
  await fsp.rm(tmp, { recursive: true, force: true });
});

runSessionRuntimeContract({
  name: 'RemoteRuntime over the reference sandbox host',
  newRuntime: () => new CaseRuntime({ url: host.url, token: host.token }),
  release: (runtime) => runtime.release(),
  runningSpec: () => ({
    kind: 'remote',
    command: ['sleep', '30'],
    files: { 'state.txt': 'state' },
    stopGraceMs: 2_000,
  }),
  capabilities: {
    captureState: false,
    endsBySelf: () => ({ kind: 'remote', command: ['sh', '-c', 'sleep 0.1; exit 3'] }),
  },
});
