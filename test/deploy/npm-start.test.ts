import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { SessionClient } from '../../src/client';
import { loadConfig } from '../../src/config';
import { dataConverterFromConfig } from '../../src/payloads';
import { freePort } from '../../src/dev-server';
import { alive } from '../helpers/processes';
import { eventually, runningStatus } from '../helpers/temporal';

/**
 * `npm start` as an operator runs it: its embedded dev server, its worker, a workspace session without a checkpoint.
 * Stopping it — SIGINT to the npm process alone, or SIGTERM to its whole process group — drains the session: the
 * next `npm start` on the same data directory brings it back running, with its files, and nothing is left running.
 */
const root = path.resolve(__dirname, '..', '..');
let dataDir: string;
let port: number;
let uiPort: number;
let gatewayPort: number;
let npm: ChildProcess | undefined;
let output = '';

beforeAll(async () => {
  dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'ds-npm-start-'));
  [port, uiPort, gatewayPort] = [await freePort(), await freePort(), await freePort()];
});
afterAll(() => {
  if (npm?.pid && npm.exitCode === null) process.kill(-npm.pid, 'SIGKILL');
  fs.rmSync(dataDir, { recursive: true, force: true });
});

async function npmStart(): Promise<ChildProcess> {
  output = '';
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    DS_DATA_DIR: dataDir,
    DS_DEV_SERVER_PORT: String(port),
    DS_DEV_UI_PORT: String(uiPort),
    DS_GATEWAY_PORT: String(gatewayPort),
    LOG_LEVEL: 'WARN',
  };
  delete env.TEMPORAL_ADDRESS;
  // Its own process group, as a terminal or a supervisor gives it.
  const child = spawn('npm', ['start'], { cwd: root, env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  child.stdout.on('data', (d: Buffer) => (output += d.toString()));
  child.stderr.on('data', (d: Buffer) => (output += d.toString()));
  await eventually(() => output.includes(' polling '), 90_000);
  npm = child;
  return child;
}

function exited(child: ChildProcess): Promise<number | null> {
  if (child.exitCode !== null) return Promise.resolve(child.exitCode);
  return new Promise((resolve) => child.once('exit', (code) => resolve(code)));
}

async function withSessions<T>(fn: (sessions: SessionClient) => Promise<T>): Promise<T> {
  const connection = await Connection.connect({ address: `127.0.0.1:${port}` });
  // The payload key npm start made on its first start: without it, no session of the embedded default can be read.
  const dataConverter = await dataConverterFromConfig(loadConfig({ DS_DATA_DIR: dataDir }));
  try {
    return await fn(new SessionClient({ client: new Client({ connection, dataConverter }) }));
  } finally {
    await connection.close();
  }
}

const counter = (location: string) => Number(fs.readFileSync(path.join(location, 'n'), 'utf8').trim() || 0);

test('SIGINT to npm, then SIGTERM to its group: the session comes back with its files, nothing is left running', async () => {
  let child = await npmStart();
  const first = await withSessions(async (sessions) => {
    const session = await sessions.start({
      sessionId: 'counter',
      runtime: {
        kind: 'workspace',
        command: [
          'sh',
          '-c',
          'n=$(cat n 2>/dev/null || echo 0); while :; do n=$((n+1)); echo $n > n.tmp; mv n.tmp n; sleep 0.1; done',
        ],
      },
    });
    const { runtime } = await runningStatus(session);
    await eventually(() => counter(runtime.location) > 5);
    return runtime;
  });
  // Payload encryption is on by default: what Temporal keeps of the session is ciphertext under the dev payload key.
  expect(output).toContain('payloads are encrypted (AES-256-GCM) under payload key dev-1');
  const raw = await Connection.connect({ address: `127.0.0.1:${port}` });
  try {
    const { history } = await raw.workflowService.getWorkflowExecutionHistory({
      namespace: 'default',
      execution: { workflowId: 'session-counter' },
    });
    const input = history!.events![0]!.workflowExecutionStartedEventAttributes!.input!.payloads![0]!;
    expect(Buffer.from(input.metadata!.encoding!).toString()).toBe('binary/encrypted');
    expect(Buffer.from(input.data!).includes('n.tmp')).toBe(false);
  } finally {
    await raw.close();
  }
  // The gateway beside it, with the dev key it printed and keeps under the data directory.
  const key = fs.readFileSync(path.join(dataDir, 'gateway-dev-key'), 'utf8').trim();
  expect(output).toContain(`Gateway dev key  ${key} (in ${path.join(dataDir, 'gateway-dev-key')},`);
  const res = await fetch(`http://127.0.0.1:${gatewayPort}/v1/sessions/counter`, {
    headers: { authorization: `Bearer ${key}` },
  });
  expect(res.status).toBe(200);
  expect(await res.json()).toMatchObject({ sessionId: 'counter', phase: 'running' });

  // SIGINT to the npm process alone (what a supervisor that knows one pid sends).
  const counted = counter(first.location);
  process.kill(child.pid!, 'SIGINT');
  expect(await exited(child)).toBe(0);
  expect(output).toContain('drained 1 of 1 session(s)');
  expect(alive(first.pid!)).toBe(false);

  child = await npmStart();
  const second = await withSessions(async (sessions) => {
    const session = sessions.get('counter');
    const { runtime, head } = await runningStatus(session, 60_000);
    expect(head).toMatchObject({ trigger: 'drain' });
    expect(counter(runtime.location)).toBeGreaterThanOrEqual(counted);
    return runtime;
  });

  // SIGTERM to the whole group (Ctrl-C in a terminal, `kill -- -pgid`): every process gets it at once.
  process.kill(-child.pid!, 'SIGTERM');
  expect(await exited(child)).toBe(0);
  expect(output).toContain('drained 1 of 1 session(s)');
  expect(alive(second.pid!)).toBe(false);
  await eventually(() => {
    try {
      process.kill(-child.pid!, 0);
      return false;
    } catch {
      return true; // no process of the group is left: not the server, not a session
    }
  }, 20_000);
});
