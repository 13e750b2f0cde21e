import * as fsp from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import type { RemoteRuntimeSpec } from '../../src/domain/schemas';
import { RemoteRuntime } from '../../src/providers/remote-runtime';
import { RuntimeBusyError, type RestoreRequest, type StartRequest } from '../../src/runtimes';
import { eventually } from '../helpers/temporal';
import { runSessionRuntimeContract } from '../runtimes/runtime.contract';
import { startSandboxHost, type SandboxHostProcess } from '../helpers/sandbox-host';

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

/** Remembers the sandboxes a case made, so that the case can delete them on the host when it ends. */
class CaseRuntime extends RemoteRuntime {
  readonly made = new Set<string>();

  override start(request: StartRequest<RemoteRuntimeSpec>) {
    this.made.add(request.instanceId);
    return super.start(request);
  }

  override restore(request: RestoreRequest<RemoteRuntimeSpec>) {
    this.made.add(request.instanceId);
    return super.restore(request);
  }
}

runSessionRuntimeContract({
  name: 'RemoteRuntime over the reference sandbox host',
  newRuntime: () => new CaseRuntime({ url: host.url, token: host.token }),
  release: async (runtime) => {
    // An import the host is still discarding (its upload failed) is busy until it is gone.
    const dispose = (id: string) =>
      eventually(() =>
        runtime.dispose(id).then(
          () => true,
          (error: unknown) => {
            if (error instanceof RuntimeBusyError) return false;
            throw error;
          },
        ),
      );
    await Promise.all([...runtime.made].map(dispose));
  },
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
