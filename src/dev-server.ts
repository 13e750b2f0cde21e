import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { Connection } from '@temporalio/client';
import { SEARCH_ATTRIBUTES } from './api/search-attributes';

/** Where scripts/install-temporal.sh puts the Temporal CLI. */
export const DEFAULT_TEMPORAL_BIN = path.resolve(__dirname, '..', '.tools', 'venv', 'bin', 'temporal');

/**
 * Dynamic config the server runs with: here, and in docker-compose.yml's `deploy/temporal-dynamic-config.yaml`. The
 * history service polls its store for new transfer and visibility tasks at most 20 times a second by default, and every
 * step of a control waits for one such task (an activity handed to its worker, the workflow task after it): up to
 * 50 ms a step (bench/README.md, Controls).
 */
export const SERVER_DYNAMIC_CONFIG: Readonly<Record<string, number>> = {
  'history.transferProcessorMaxPollRPS': 200,
  'history.visibilityProcessorMaxPollRPS': 200,
};

export interface DevServerOptions {
  temporalBin?: string;
  ip?: string;
  port: number;
  /** Web UI port; `null` runs headless. */
  uiPort: number | null;
  /** SQLite file for persistence across restarts; omitted: in memory. */
  dbFilename?: string;
  namespace?: string;
  /** Where the server's own output goes. */
  logFile?: string;
  startTimeoutMs?: number;
  /** More `temporal server start-dev` arguments, e.g. `--dynamic-config-value KEY=VALUE`. */
  extraArgs?: string[];
}

export interface DevServer {
  address: string;
  uiUrl: string | null;
  process: ChildProcess;
  stop(): Promise<void>;
}

/**
 * Starts the real Temporal dev server (`temporal server start-dev`) with this project's search attributes
 * registered, and resolves once its frontend accepts connections.
 */
export async function startDevServer(options: DevServerOptions): Promise<DevServer> {
  const bin = options.temporalBin ?? DEFAULT_TEMPORAL_BIN;
  if (!fs.existsSync(bin)) {
    throw new Error(`the Temporal CLI is not installed at ${bin}: run "npm run setup" (scripts/install-temporal.sh)`);
  }
  const ip = options.ip ?? '127.0.0.1';
  const args = ['server', 'start-dev', '--ip', ip, '--port', String(options.port), '--log-level', 'warn'];
  args.push('--namespace', options.namespace ?? 'default');
  if (options.uiPort === null) args.push('--headless');
  else args.push('--ui-port', String(options.uiPort));
  if (options.dbFilename) {
    fs.mkdirSync(path.dirname(options.dbFilename), { recursive: true });
    args.push('--db-filename', options.dbFilename);
  }
  for (const [name, type] of Object.entries(SEARCH_ATTRIBUTES)) args.push('--search-attribute', `${name}=${type}`);
  const extraArgs = options.extraArgs ?? [];
  for (const [key, value] of Object.entries(SERVER_DYNAMIC_CONFIG)) {
    // A value the caller sets is the caller's.
    if (!extraArgs.some((arg) => arg.startsWith(`${key}=`))) args.push('--dynamic-config-value', `${key}=${value}`);
  }
  args.push(...extraArgs);

  const out = options.logFile ? fs.openSync(options.logFile, 'a') : 'ignore';
  // Its own process group: a Ctrl-C aimed at `npm start` must not stop the server before the worker has drained its
  // sessions through it; the owner stops it afterwards, and it is killed if the owner exits without doing so. An owner
  // killed outright runs no exit handler: on Linux the kernel then kills the server too (a parent-death signal set by
  // setpriv, which execs the server in its place), so it never holds its port and database after its owner is gone.
  const [program, programArgs] = withParentDeathSignal(bin, args);
  const child = spawn(program, programArgs, { stdio: ['ignore', out, out], detached: true });
  const killOnExit = () => child.kill('SIGKILL');
  process.once('exit', killOnExit);
  child.once('exit', () => process.off('exit', killOnExit));
  const address = `${ip}:${options.port}`;
  const exited = new Promise<never>((_, reject) =>
    child.once('exit', (code, signal) =>
      reject(
        new Error(
          `temporal server exited early (code ${code}, signal ${signal})${lastLine(options.logFile)}; ` +
            `see ${options.logFile ?? 'its output'}`,
        ),
      ),
    ),
  );
  exited.catch(() => undefined);
  const timeoutMs = options.startTimeoutMs ?? 60_000;
  try {
    await Promise.race([waitUntilServing(address, options.namespace ?? 'default', timeoutMs), exited]);
  } catch (err) {
    await stopProcess(child);
    throw err;
  }
  return {
    address,
    uiUrl: options.uiPort === null ? null : `http://${ip}:${options.uiPort}`,
    process: child,
    stop: () => stopProcess(child),
  };
}

const SETPRIV = '/usr/bin/setpriv';

/** `setpriv --pdeathsig KILL` before the command where util-linux has it (Linux); the command alone elsewhere. */
function withParentDeathSignal(bin: string, args: string[]): [string, string[]] {
  if (process.platform !== 'linux' || !fs.existsSync(SETPRIV)) return [bin, args];
  return [SETPRIV, ['--pdeathsig', 'KILL', '--', bin, ...args]];
}

/** The last line the server wrote, which says why it stopped (a port in use, a locked database). */
function lastLine(logFile: string | undefined): string {
  if (!logFile) return '';
  try {
    const lines = fs.readFileSync(logFile, 'utf8').trimEnd().split('\n');
    return `: ${(lines[lines.length - 1] ?? '').slice(0, 500)}`;
  } catch {
    return '';
  }
}

/** Ready means the namespace answers, not merely that the port is open. */
async function waitUntilServing(address: string, namespace: string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  while (Date.now() < deadline) {
    try {
      const connection = await Connection.connect({ address, connectTimeout: 2_000 });
      try {
        await connection.workflowService.describeNamespace({ namespace });
        return;
      } finally {
        await connection.close();
      }
    } catch (err) {
      lastError = err;
      await new Promise((r) => setTimeout(r, 250));
    }
  }
  throw new Error(`temporal server at ${address} was not ready within ${timeoutMs} ms: ${String(lastError)}`);
}

function stopProcess(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const kill = setTimeout(() => child.kill('SIGKILL'), 10_000);
    child.once('exit', () => {
      clearTimeout(kill);
      resolve();
    });
    child.kill('SIGTERM');
  });
}

/**
 * A free TCP port on loopback (for tests and for running several dev servers side by side), drawn from below the
 * kernel's ephemeral range: the Temporal server picks its internal ports, and every `listen(0)` gets its port, from
 * that range, so a port handed out from inside it can be taken by another process before its owner binds it.
 */
export async function freePort(): Promise<number> {
  const [low, high] = portRangeBelowEphemeral();
  for (let attempt = 0; attempt < 50; attempt++) {
    const port = low + Math.floor(Math.random() * (high - low + 1));
    if (FETCH_BLOCKED_PORTS.has(port)) continue;
    if (await canListen(port)) return port;
  }
  throw new Error(`no free port on 127.0.0.1 between ${low} and ${high} after 50 tries`);
}

/** The Fetch standard's "bad ports" in the range: `fetch` refuses to connect to them ("bad port"), browsers too. */
const FETCH_BLOCKED_PORTS = new Set([10_080]);

function portRangeBelowEphemeral(): [number, number] {
  let ephemeralLow = 32_768;
  try {
    const [first] = fs.readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/);
    if (Number(first) > 12_000) ephemeralLow = Number(first);
  } catch {
    // not Linux: its default range starts at 49152 or 32768; 32768 is below both
  }
  return [10_000, ephemeralLow - 1];
}

function canListen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = net.createServer();
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}

/** The ports of an `npm start` beside others: its dev server, Web UI, gateway and metrics. */
export interface DevStackPorts {
  server: number;
  ui: number;
  gateway: number;
  metrics: number;
}

/**
 * The environment of an `npm start` that shares nothing with another: its own data directory, free ports, and no
 * `TEMPORAL_ADDRESS`, so it runs its embedded server (for tests and benches that start the whole system).
 */
export async function devStackEnv(
  dataDir: string,
  base: NodeJS.ProcessEnv = process.env,
): Promise<{ env: NodeJS.ProcessEnv; ports: DevStackPorts }> {
  const ports = {
    server: await freePort(),
    ui: await freePort(),
    gateway: await freePort(),
    metrics: await freePort(),
  };
  const env: NodeJS.ProcessEnv = {
    ...base,
    DS_DATA_DIR: dataDir,
    DS_DEV_SERVER_PORT: String(ports.server),
    DS_DEV_UI_PORT: String(ports.ui),
    DS_GATEWAY_PORT: String(ports.gateway),
    DS_METRICS_PORT: String(ports.metrics),
    LOG_LEVEL: 'WARN',
  };
  delete env.TEMPORAL_ADDRESS;
  return { env, ports };
}
