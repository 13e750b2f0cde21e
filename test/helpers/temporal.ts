import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { DefaultLogger, NativeConnection, Runtime, type LogEntry, type TelemetryOptions } from '@temporalio/worker';
import type { ActivityDeps } from '../../src/activities';
import type { RuntimeInstanceRef, SessionStatus } from '../../src/api';
import { SessionClient, type SessionHandle } from '../../src/client';
import { ConversationRuntime, MemoryRuntime, WorkspaceRuntime } from '../../src/runtimes';
import { randomBytes } from 'node:crypto';
import { sessionDataConverter, type PayloadEncryptionCodec } from '../../src/payloads';
import { ChunkedSnapshotStore, Keyring, type SnapshotStore } from '../../src/snapshots';
import { createWorkers, type DrainReport, type SessionWorkers } from '../../src/worker';

/** A worker host (shared + host-specific queue) and a client on the run's real Temporal dev server. */
export interface TestSystem {
  client: Client;
  sessions: SessionClient;
  store: ChunkedSnapshotStore;
  workspace: WorkspaceRuntime;
  memory: MemoryRuntime;
  conversation: ConversationRuntime;
  taskQueue: string;
  dir: string;
  firstHost: TestHost;
  /** The master key in DS_MASTER_KEYS form, for tools that open the store as a worker would. */
  masterKeys: string;
  /** Starts another worker host on the same shared queue (a second machine). */
  addHost(options?: HostOptions): Promise<TestHost>;
  close(): Promise<void>;
}

export interface HostOptions {
  store?: SnapshotStore;
  watchHeartbeatMs?: number;
  /**
   * The host places sessions on a queue nobody polls, like a machine that goes away right after it was chosen:
   * its placements succeed and the work sent to it is never picked up.
   */
  unreachable?: boolean;
  /** Placement passes this host by once it runs this many sessions. */
  maxSessions?: number;
  /** This host's worker labels (DS_WORKER_LABELS), which a session's placement may require. */
  labels?: string[];
  /** How long the host's lease activity holds on to the exits sessions asked for before it reports them. */
  leaseRoundMs?: number;
  /** How long the host's monitor waits between quiet lease rounds (ActivityDeps.leaseRestMs). */
  leaseRestMs?: number;
  /** This host's payload codec (a worker rolled out with other payload keys); the system's when omitted. */
  payloadCodec?: PayloadEncryptionCodec;
  /** Workflows the host's shared worker keeps cached (DS_MAX_CACHED_WORKFLOWS); the worker's default when omitted. */
  maxCachedWorkflows?: number;
  /** The workspace runtime's settle window for starts (200 ms when omitted). */
  startSettleMs?: number;
  /** How long what a failed workspace command left stays on this host (the runtime's default when omitted). */
  failedRetentionMs?: number;
}

export interface TestHost {
  hostTaskQueue: string;
  workspace: WorkspaceRuntime;
  memory: MemoryRuntime;
  conversation: ConversationRuntime;
  /** Stops polling and kills this host's processes, like a machine going away. */
  crash(): Promise<void>;
  /** A graceful stop, as on SIGTERM: drains this host's sessions, then stops polling and its processes. */
  stop(options?: { deadlineMs?: number }): Promise<DrainReport>;
  /** The drain of `stop` alone: the host moves its sessions away and refuses new ones, and keeps polling. */
  drain(options?: { deadlineMs?: number }): Promise<DrainReport>;
}

export interface TestSystemOptions {
  store?: (real: ChunkedSnapshotStore) => SnapshotStore;
  /** The server the workers poll; the run's dev server when omitted. */
  address?: string;
  /**
   * The client that SessionClient and the workers' drains use (e.g. a time-skipping environment's); the system then
   * does not close it. A client of its own on `address` when omitted.
   */
  client?: Client;
  firstHost?: HostOptions;
  /** Where the system's store and workspaces go (a temporary directory of os.tmpdir() when omitted). */
  baseDir?: string;
  /** The payload codec of the workers and the system's client (`npm start` encrypts); none when omitted. */
  payloadCodec?: PayloadEncryptionCodec;
}

export async function startTestSystem(options: TestSystemOptions = {}): Promise<TestSystem> {
  const address = options.address ?? process.env.DS_TEST_TEMPORAL_ADDRESS;
  const bundlePath = process.env.DS_TEST_WORKFLOW_BUNDLE;
  const encryptedBundlePath = process.env.DS_TEST_WORKFLOW_BUNDLE_ENCRYPTED;
  if (!address || !bundlePath) throw new Error('the jest global setup did not start a Temporal server');
  installQuietRuntime();
  const dir = fs.mkdtempSync(path.join(options.baseDir ?? os.tmpdir(), 'ds-system-'));
  const taskQueue = `test-${crypto.randomUUID()}`;
  // The lifecycle runs on the production engine: encrypted, chunked, deduplicated.
  const masterKey = randomBytes(32);
  const store = new ChunkedSnapshotStore({
    rootDir: path.join(dir, 'snapshots'),
    keyring: new Keyring([{ id: 'test-1', key: masterKey }]),
  });
  const dataConverter = options.payloadCodec ? sessionDataConverter(options.payloadCodec) : undefined;
  const connection = options.client ? undefined : await Connection.connect({ address });
  const client = options.client ?? new Client({ connection, ...(dataConverter ? { dataConverter } : {}) });
  const hosts: {
    workers: SessionWorkers;
    running: Promise<void>;
    workspace: WorkspaceRuntime;
    connection: NativeConnection;
  }[] = [];

  // Numbered for the life of the system: a crashed host's number is never reused, or two live workers would share
  // one host queue (and a runtime started by one would be watched by the other).
  let hostsAdded = 0;
  async function addHost(hostOptions: HostOptions = {}): Promise<TestHost> {
    const number = ++hostsAdded;
    const hostTaskQueue = `${taskQueue}@host-${number}`;
    const workspace = new WorkspaceRuntime({
      rootDir: path.join(dir, `workspaces-${number}`),
      defaultStopGraceMs: 2_000,
      // Short, so that the many starts of the suite stay quick; a test that needs a longer one sets the spec's settleMs.
      startSettleMs: hostOptions.startSettleMs ?? 200,
      ...(hostOptions.failedRetentionMs !== undefined ? { failedRetentionMs: hostOptions.failedRetentionMs } : {}),
    });
    const memory = new MemoryRuntime();
    const conversation = new ConversationRuntime();
    const deps: ActivityDeps = {
      store: hostOptions.store ?? (options.store ? options.store(store) : store),
      // A wrapped store (flaky, counting) still keeps its timeline in the real one.
      timeline: store,
      runtimes: { workspace, memory, conversation },
      hostTaskQueue: hostOptions.unreachable ? `${hostTaskQueue}-unreachable` : hostTaskQueue,
      watchHeartbeatMs: hostOptions.watchHeartbeatMs ?? 1_000,
      maxSessions: hostOptions.maxSessions,
      leaseRoundMs: hostOptions.leaseRoundMs,
      leaseRestMs: hostOptions.leaseRestMs,
    };
    // One connection per host, as separate machines have: the SDK allows one worker per queue per connection.
    const nativeConnection = await NativeConnection.connect({ address });
    const hostCodec = hostOptions.payloadCodec;
    const hostConverter = hostCodec ? sessionDataConverter(hostCodec) : dataConverter;
    const workers = await createWorkers({
      connection: nativeConnection,
      // What this host sends Temporal itself (its fleet reports) goes through its own codec, as a worker's does.
      client: hostCodec ? new Client({ connection: client.connection, dataConverter: hostConverter }) : client,
      namespace: 'default',
      taskQueue,
      hostTaskQueue,
      deps,
      ...(hostOptions.labels ? { fleet: { labels: hostOptions.labels } } : {}),
      ...(hostOptions.maxCachedWorkflows !== undefined ? { maxCachedWorkflows: hostOptions.maxCachedWorkflows } : {}),
      workflowBundle: { codePath: hostConverter?.failureConverterPath ? encryptedBundlePath! : bundlePath! },
      ...(hostConverter ? { dataConverter: hostConverter } : {}),
    });
    const running = workers.run();
    const entry = { workers, running, workspace, connection: nativeConnection };
    hosts.push(entry);
    return {
      hostTaskQueue,
      workspace,
      memory,
      conversation,
      drain: (drainOptions = {}) => workers.drain(drainOptions),
      async stop(stopOptions = {}) {
        const report = await workers.drain(stopOptions);
        workers.shutdown();
        await running;
        await workspace.stopAll();
        await nativeConnection.close();
        hosts.splice(hosts.indexOf(entry), 1);
        return report;
      },
      async crash() {
        // Polling stops first, so nothing of this host reaches the server any more; then its processes die.
        workers.shutdown();
        await running;
        await workspace.stopAll();
        await nativeConnection.close();
        hosts.splice(hosts.indexOf(entry), 1);
      },
    };
  }

  const first = await addHost(options.firstHost);
  return {
    client,
    sessions: new SessionClient({ client, taskQueue, timeline: store }),
    store,
    workspace: first.workspace,
    memory: first.memory,
    conversation: first.conversation,
    firstHost: first,
    masterKeys: `test-1:${masterKey.toString('base64')}`,
    taskQueue,
    dir,
    addHost,
    async close() {
      for (const h of hosts) h.workers.shutdown();
      await Promise.allSettled(hosts.map((h) => h.running));
      await Promise.allSettled(hosts.map((h) => h.workspace.stopAll()));
      await Promise.allSettled(hosts.map((h) => h.connection.close()));
      await connection?.close();
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

let runtimeInstalled = false;
/**
 * Worker logs at WARN and above only, so test output shows what matters. Before anything else uses the SDK's
 * runtime (a TestWorkflowEnvironment does): it can be installed only once, and only before its first use. A test file
 * that wants the runtime's telemetry (the metrics endpoint) calls this with it before it starts a system: jest gives
 * every test file its own modules, so its own runtime. One that reads the worker's log passes `logs`: it is given every
 * entry from INFO up, and nothing is printed.
 */
export function installQuietRuntime(telemetryOptions?: TelemetryOptions, logs?: (entry: LogEntry) => void): void {
  if (runtimeInstalled) {
    if (telemetryOptions || logs) throw new Error('the runtime is installed already: ask for its telemetry first');
    return;
  }
  runtimeInstalled = true;
  const logger = logs ? new DefaultLogger('INFO', logs) : new DefaultLogger('WARN');
  Runtime.install({ logger, ...(telemetryOptions ? { telemetryOptions } : {}) });
}

/** Polls `fn` until it returns a truthy value or the deadline passes. */
export async function eventually<T>(
  fn: () => Promise<T | undefined | false> | T | undefined | false,
  timeoutMs = 20_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const value = await fn();
      if (value) return value;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline)
      throw new Error(`condition not met within ${timeoutMs} ms${last ? `: ${String(last)}` : ''}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Waits until the session runs, and returns its status with the runtime it runs in. */
export async function runningStatus(
  session: SessionHandle,
  timeoutMs = 20_000,
): Promise<SessionStatus & { runtime: RuntimeInstanceRef }> {
  const s = await eventually(async () => {
    const s = await session.status();
    // A failed session never runs again: return it, to say why at once instead of waiting out the deadline.
    return (s.phase === 'running' && s.runtime) || s.phase === 'failed' ? s : undefined;
  }, timeoutMs);
  if (!s.runtime || s.phase !== 'running')
    throw new Error(`the session failed instead of running: ${s.failure?.message}`);
  return { ...s, runtime: s.runtime };
}
