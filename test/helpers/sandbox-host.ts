import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { freePort } from '../../src/dev-server';
import type { RemoteRuntimeSpec } from '../../src/domain/schemas';
import { RemoteRuntime } from '../../src/providers/remote-runtime';
import { RuntimeBusyError, type RestoreRequest, type StartRequest } from '../../src/runtimes';
import { eventually } from './temporal';

const root = path.resolve(__dirname, '..', '..');

/** A reference sandbox host started as `npm run sandbox-host` starts it: its own process, root and token. */
export interface SandboxHostProcess {
  readonly url: string;
  readonly token: string;
  readonly rootDir: string;
  readonly child: ChildProcess;
  output(): string;
  /** SIGTERM (it stops its sandboxes), then SIGKILL if it has not exited; resolves once it has exited. */
  stop(): Promise<void>;
}

export async function startSandboxHost(rootDir: string, env: NodeJS.ProcessEnv = {}): Promise<SandboxHostProcess> {
  // A host started again on its port keeps its URL, which the workers were given.
  const port = env.DS_SANDBOX_HOST_PORT ? Number(env.DS_SANDBOX_HOST_PORT) : await freePort();
  const token = randomBytes(24).toString('base64url');
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/providers/sandbox-host.ts'], {
    cwd: root,
    env: {
      ...process.env,
      DS_SANDBOX_HOST_PORT: String(port),
      DS_SANDBOX_HOST_ROOT: rootDir,
      DS_SANDBOX_HOST_TOKEN: token,
      // Its stdin is this process's pipe: however the test process ends, the host and its sandboxes end with it.
      DS_SANDBOX_HOST_EXIT_WITH_STDIN: '1',
      ...env,
    },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout.on('data', (d: Buffer) => (output += d.toString()));
  child.stderr.on('data', (d: Buffer) => (output += d.toString()));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const host: SandboxHostProcess = {
    url: `http://127.0.0.1:${port}`,
    token,
    rootDir,
    child,
    output: () => output,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 20_000);
      await exited;
      clearTimeout(timer);
    },
  };
  try {
    await eventually(() => child.exitCode !== null || output.includes('listening on'), 60_000);
    if (!output.includes('listening on')) throw new Error(`the sandbox host exited before it listened:\n${output}`);
  } catch (error) {
    await host.stop();
    throw error;
  }
  return host;
}

/** A RemoteRuntime that remembers the sandboxes a test case made, so that the case can delete them when it ends. */
export class CaseRuntime extends RemoteRuntime {
  readonly made = new Set<string>();

  override start(request: StartRequest<RemoteRuntimeSpec>) {
    this.made.add(request.instanceId);
    return super.start(request);
  }

  override restore(request: RestoreRequest<RemoteRuntimeSpec>) {
    this.made.add(request.instanceId);
    return super.restore(request);
  }

  /** Deletes what the case made; an import the host is still discarding (its upload failed) is busy until it is gone. */
  async release(): Promise<void> {
    const dispose = (id: string) =>
      eventually(() =>
        this.dispose(id).then(
          () => true,
          (error: unknown) => {
            if (error instanceof RuntimeBusyError) return false;
            throw error;
          },
        ),
      );
    await Promise.all([...this.made].map(dispose));
  }
}
