import { createHash } from 'node:crypto';
import os from 'node:os';
import path from 'node:path';
import { z } from 'zod';
import { closestName } from './domain/names';
import { WorkerLabels } from './domain/placement';
import { runtimeLabel } from './domain/schemas';
import { DEFAULT_FAILED_RETENTION_MS, DEFAULT_START_SETTLE_MS } from './domain/records';
import { DurableSessionsError } from './errors';

const bool = z
  .enum(['true', 'false', '1', '0', 'yes', 'no'], { message: 'expected true or false' })
  .transform((v) => v === 'true' || v === '1' || v === 'yes');

const port = z.coerce
  .number({ message: 'expected a port number' })
  .int('expected a port number')
  .min(1, 'expected a port number from 1 to 65535')
  .max(65535, 'expected a port number from 1 to 65535');

/**
 * Variables whose value is a secret or says where one lies. A session's processes never receive them: they receive
 * no `DS_*` or `TEMPORAL_*` variable at all, and this list is the second fence beside that rule.
 */
export const SECRET_VARIABLES = [
  'DS_MASTER_KEYS',
  'DS_MASTER_KEY_DIR',
  'DS_PAYLOAD_KEYS',
  'DS_PAYLOAD_KEY_DIR',
  'TEMPORAL_API_KEY',
  'TEMPORAL_TLS_KEY_PATH',
  'DS_GATEWAY_TLS_KEY',
  'DS_GATEWAY_CURSOR_KEY',
  // The S3 store's credentials, as the standard AWS chain reads them.
  'AWS_ACCESS_KEY_ID',
  'AWS_SECRET_ACCESS_KEY',
  'AWS_SESSION_TOKEN',
] as const;

/** The prefixes of the worker's own variables: a session's environment holds none of them. */
export const WORKER_VARIABLE_PREFIXES = ['DS_', 'TEMPORAL_'] as const;

/** Whether `name` is one of the worker's own variables (or a secret), which a session's environment never holds. */
export function isWorkerVariable(name: string): boolean {
  return (
    WORKER_VARIABLE_PREFIXES.some((prefix) => name.startsWith(prefix)) ||
    (SECRET_VARIABLES as readonly string[]).includes(name)
  );
}

/**
 * Why `pattern` cannot be an entry of a session environment's allow-list, or undefined when it can. An entry is a
 * variable name, or a prefix ending in `*` (`LC_*`); one that could match a worker variable is refused, not ignored.
 */
export function envAllowProblem(pattern: string): string | undefined {
  if (!/^[A-Za-z_][A-Za-z0-9_]*\*?$|^\*$/.test(pattern)) {
    return `${JSON.stringify(pattern)} is not a variable name or a prefix ending in *`;
  }
  const reaches = pattern.endsWith('*')
    ? (prefix: string) => prefix.startsWith(pattern.slice(0, -1)) || pattern.startsWith(prefix)
    : (prefix: string) => pattern.startsWith(prefix);
  if (WORKER_VARIABLE_PREFIXES.some(reaches) || isWorkerVariable(pattern)) {
    return `${pattern} would pass the worker's own variables (DS_*, TEMPORAL_*) to sessions`;
  }
  const secret = SECRET_VARIABLES.find((name) =>
    pattern.endsWith('*') ? name.startsWith(pattern.slice(0, -1)) : name === pattern,
  );
  if (secret !== undefined) return `${pattern} would pass the worker's secret ${secret} to sessions`;
  return undefined;
}

/** `scheme://host[:port]` exactly, as a browser sends it in `Origin`. */
function isOrigin(value: string): boolean {
  try {
    const url = new URL(value);
    return /^https?:$/.test(url.protocol) && url.origin === value;
  } catch {
    return false;
  }
}

/** S3's bucket naming rules (3–63 lowercase letters, digits, dots and hyphens, a letter or digit at each end). */
const S3_BUCKET = /^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/;
const STORE_PREFIX_SEGMENT = /^[A-Za-z0-9._-]+$/;

/** Why `value` is not a snapshot store location (`s3://bucket[/prefix]` or a directory), or undefined when it is. */
function snapshotStoreProblem(value: string): string | undefined {
  const scheme = /^([A-Za-z][A-Za-z0-9+.-]*):\/\//.exec(value)?.[1];
  if (scheme === undefined) return undefined;
  if (scheme !== 's3')
    return `${scheme}:// is not a store this worker knows: expected s3://bucket/prefix or a directory`;
  const [bucket = '', ...segments] = value.slice('s3://'.length).replace(/\/+$/, '').split('/');
  if (!S3_BUCKET.test(bucket) || bucket.includes('..')) return `${JSON.stringify(bucket)} is not an S3 bucket name`;
  const bad = segments.find((s) => !STORE_PREFIX_SEGMENT.test(s) || /^\.+$/.test(s));
  if (bad !== undefined)
    return `the prefix has a segment ${JSON.stringify(bad)}: expected letters, digits, ".", "_" or "-"`;
  return undefined;
}

/** Where snapshots are kept: a directory, or a bucket (and a prefix in it) on an S3-compatible server. */
export type SnapshotStoreConfig =
  | { kind: 'fs'; dir: string }
  | { kind: 's3'; bucket: string; prefix: string; endpoint?: string; region?: string; forcePathStyle: boolean };

/** Where the store is, as operators write it: `s3://bucket/prefix` (as the S3 backend names itself) or the directory. */
export function storeLocation(store: SnapshotStoreConfig): string {
  return store.kind === 's3' ? `s3://${store.bucket}${store.prefix ? `/${store.prefix}` : ''}` : store.dir;
}

function snapshotStoreOf(e: EnvConfig, snapshotDir: string): SnapshotStoreConfig {
  const store = e.DS_SNAPSHOT_STORE;
  if (store === undefined || !store.startsWith('s3://')) return { kind: 'fs', dir: snapshotDir };
  const [bucket = '', ...segments] = store.slice('s3://'.length).replace(/\/+$/, '').split('/');
  return {
    kind: 's3',
    bucket,
    prefix: segments.join('/'),
    ...(e.DS_S3_ENDPOINT !== undefined ? { endpoint: e.DS_S3_ENDPOINT } : {}),
    ...(e.DS_S3_REGION !== undefined ? { region: e.DS_S3_REGION } : {}),
    forcePathStyle: e.DS_S3_FORCE_PATH_STYLE ?? false,
  };
}

/**
 * One store location, said once: DS_SNAPSHOT_STORE and DS_SNAPSHOT_DIR together are refused, and the DS_S3_* settings
 * mean nothing without an `s3://` store (set alone, they are a mistake, not something to ignore).
 */
function snapshotStoreIssues(env: Record<string, string | undefined>): z.core.$ZodIssue[] {
  const issues: z.core.$ZodIssue[] = [];
  const store = env.DS_SNAPSHOT_STORE;
  if (store !== undefined && env.DS_SNAPSHOT_DIR !== undefined) {
    const message = 'set DS_SNAPSHOT_STORE or DS_SNAPSHOT_DIR, not both';
    issues.push({ code: 'custom', path: ['DS_SNAPSHOT_STORE'], message, input: undefined });
  }
  if (store === undefined || !store.startsWith('s3://')) {
    for (const name of ['DS_S3_ENDPOINT', 'DS_S3_REGION', 'DS_S3_FORCE_PATH_STYLE']) {
      if (env[name] === undefined) continue;
      const message = 'only with an S3 store (DS_SNAPSHOT_STORE=s3://bucket/prefix)';
      issues.push({ code: 'custom', path: [name], message, input: undefined });
    }
  }
  return issues;
}

/** A master or payload key's id. */
const keyId = z.string().regex(/^[A-Za-z0-9._-]{1,64}$/, 'expected a key id');

/** A workspace user: a name looked up on the host, or `uid:gid`. Root is refused: it would undo the point. */
const workspaceUser = z
  .string()
  .regex(/^(?:[a-z_][a-z0-9_.-]*\$?|\d+:\d+)$/, 'expected a user name or uid:gid')
  .refine((v) => v !== 'root' && !/^0:/.test(v), 'expected an unprivileged user, not root')
  .transform((v) => {
    const ids = /^(\d+):(\d+)$/.exec(v);
    return ids ? { uid: Number(ids[1]), gid: Number(ids[2]) } : v;
  });

const envAllowList = z
  .string()
  .transform((v) => v.split(',').map((name) => name.trim()))
  .check((ctx) => {
    for (const pattern of ctx.value) {
      const problem = envAllowProblem(pattern);
      if (problem) ctx.issues.push({ code: 'custom', message: problem, input: ctx.value });
    }
  });

const duration = z.coerce.number({ message: 'expected milliseconds' }).int().min(0, 'expected milliseconds ≥ 0');

/**
 * Every setting of the worker and of `npm start`, read from the environment by this one schema.
 * The keys are the variable names: the README's configuration table and docker-compose.yml use them.
 */
export const EnvConfig = z.object({
  /** host:port of a Temporal frontend. Unset: `npm start` runs the embedded dev server. */
  TEMPORAL_ADDRESS: z
    .string()
    .regex(/^[^\s:]+:\d{1,5}$/, 'expected host:port, e.g. localhost:7233')
    .optional(),
  TEMPORAL_NAMESPACE: z.string().min(1).default('default'),
  /** API key for Temporal Cloud or a server with API-key auth; implies TLS. */
  TEMPORAL_API_KEY: z.string().min(1).optional(),
  TEMPORAL_TLS: bool.optional(),
  TEMPORAL_TLS_CERT_PATH: z.string().min(1).optional(),
  TEMPORAL_TLS_KEY_PATH: z.string().min(1).optional(),
  TEMPORAL_TLS_CA_PATH: z.string().min(1).optional(),
  TEMPORAL_TLS_SERVER_NAME: z.string().min(1).optional(),
  /** Shared task queue: workflows and activities any worker can run. */
  DS_TASK_QUEUE: z
    .string()
    .regex(/^[A-Za-z0-9._-]{1,200}$/, 'expected letters, digits, ".", "_" or "-"')
    .default('durable-sessions'),
  /**
   * This worker's identity; its host-specific task queue is `<DS_TASK_QUEUE>@<DS_WORKER_ID>`. Default: the hostname
   * and a digest of the data directory, the same across restarts of one worker on one host.
   */
  DS_WORKER_ID: z
    .string()
    .regex(/^[A-Za-z0-9._-]{1,100}$/, 'expected letters, digits, ".", "_" or "-"')
    .optional(),
  /**
   * This worker's labels, comma-separated (`zone=eu-1,gpu`): a session whose placement requires labels runs only on a
   * worker that has them all. Shown to operators in the fleet directory: never a secret.
   */
  DS_WORKER_LABELS: z
    .string()
    .transform((v) =>
      v
        .split(',')
        .map((l) => l.trim())
        .filter((l) => l.length > 0),
    )
    .pipe(WorkerLabels)
    .optional(),
  /** Root for everything kept on disk by default. */
  DS_DATA_DIR: z.string().min(1).default('data'),
  /** Filesystem snapshot store (share it between workers that restore each other's sessions). */
  DS_SNAPSHOT_DIR: z.string().min(1).optional(),
  /**
   * Where snapshots are kept: `s3://bucket/prefix` (an S3-compatible object store the workers share; credentials from
   * the standard AWS chain), or a directory (the filesystem store, as DS_SNAPSHOT_DIR). Unset: DS_SNAPSHOT_DIR.
   */
  DS_SNAPSHOT_STORE: z
    .string()
    .check((ctx) => {
      const problem = snapshotStoreProblem(ctx.value);
      if (problem) ctx.issues.push({ code: 'custom', message: problem, input: ctx.value });
    })
    .optional(),
  /** The S3 server's URL (`https://s3.example.com:9000`) when it is not AWS's; only with an `s3://` store. */
  DS_S3_ENDPOINT: z
    .string()
    .refine((v) => /^https?:\/\/[^\s/?#]+(\/[^\s?#]*)?$/.test(v) && URL.canParse(v), {
      message: 'expected an http(s) URL, e.g. http://127.0.0.1:7070',
    })
    .optional(),
  /** The bucket's region; unset: the AWS chain's (AWS_REGION, ~/.aws/config), else us-east-1 with DS_S3_ENDPOINT. */
  DS_S3_REGION: z
    .string()
    .regex(/^[a-z0-9][a-z0-9-]{0,62}$/, 'expected a region name, e.g. us-east-1')
    .optional(),
  /** `true`: address the bucket in the path (`endpoint/bucket/key`), as most self-hosted S3 servers need. */
  DS_S3_FORCE_PATH_STYLE: bool.optional(),
  /**
   * `aes-256-gcm` (default): every chunk and manifest is sealed under a per-lineage data key wrapped by a master
   * key. `none` stores plaintext (still integrity-checked): only when set explicitly.
   */
  DS_SNAPSHOT_ENCRYPTION: z
    .enum(['aes-256-gcm', 'none'], { message: 'expected aes-256-gcm or none' })
    .default('aes-256-gcm'),
  /**
   * The manifest format new checkpoints are written in: `3` (default), or `2` while workers that read only format 2
   * share the store (they take a format-3 manifest for tampered). Both are read.
   */
  DS_SNAPSHOT_FORMAT: z.enum(['2', '3'], { message: 'expected 2 or 3' }).default('3'),
  /**
   * Average chunk size in KiB (a power of two from 16 to 256; minimum a quarter of it, maximum four times). Smaller
   * chunks make checkpoints after small scattered changes store less, for more per-chunk work and larger manifests
   * (`npm run bench:engine` prints both sizes' rows). Changing it costs deduplication once per session:
   * new chunks are cut at the new size, reused ones keep theirs.
   */
  DS_CHUNK_KIB: z.enum(['16', '32', '64', '128', '256'], { message: 'expected 16, 32, 64, 128 or 256' }).default('32'),
  /**
   * How new chunks are compressed: `auto` (zstd where the optional zstd-napi binding is installed, Brotli otherwise),
   * `zstd` (the worker refuses to start without the binding) or `brotli` (for a store shared with workers that lack
   * it: they cannot read zstd chunks). Reading handles every codec the machine has.
   */
  DS_SNAPSHOT_CODEC: z.enum(['auto', 'zstd', 'brotli'], { message: 'expected auto, zstd or brotli' }).default('auto'),
  /**
   * Whether chunk ids and AES-GCM seals go through the native sealer (`auto`: when built and its self-check passes).
   * Each sealing thread reads it from the environment itself; it is here so that a wrong value stops the worker.
   */
  DS_NATIVE_SEALER: z.enum(['auto', 'on', 'off'], { message: 'expected auto, on or off' }).default('auto'),
  /** Master keys as `id:base64,id:base64` (the last is the primary unless DS_MASTER_KEY_PRIMARY names one). */
  DS_MASTER_KEYS: z.string().min(1).optional(),
  /** A directory of `<id>.key` files (mode 0600), instead of DS_MASTER_KEYS. */
  DS_MASTER_KEY_DIR: z.string().min(1).optional(),
  /** Which master key wraps new data keys; the others stay readable. */
  DS_MASTER_KEY_PRIMARY: keyId.optional(),
  /**
   * `aes-256-gcm` (default): every Temporal payload (workflow inputs, controls and their results, memo, summaries,
   * failure messages) is sealed under a payload key before it leaves the process. `none`: new payloads are plaintext
   * in Temporal's history (those already encrypted are still read with the keys configured).
   */
  DS_PAYLOAD_ENCRYPTION: z
    .enum(['aes-256-gcm', 'none'], { message: 'expected aes-256-gcm or none' })
    .default('aes-256-gcm'),
  /** Payload keys as `id:base64,id:base64`, apart from the master keys (the last is the primary). */
  DS_PAYLOAD_KEYS: z.string().min(1).optional(),
  /** A directory of `<id>.key` payload key files (mode 0600), instead of DS_PAYLOAD_KEYS. */
  DS_PAYLOAD_KEY_DIR: z.string().min(1).optional(),
  /** Which payload key seals new payloads; the others stay readable (roll a new key out before making it primary). */
  DS_PAYLOAD_KEY_PRIMARY: keyId.optional(),
  /**
   * Origins allowed to call the codec server (`/v1/codec/encode`, `/decode`) from a browser, comma-separated: the
   * Temporal Web UI's. `npm start` adds its embedded UI's.
   */
  DS_CODEC_CORS_ORIGINS: z
    .string()
    .transform((v) => v.split(',').map((o) => o.trim()))
    .check((ctx) => {
      for (const origin of ctx.value) {
        if (!isOrigin(origin)) {
          const message = `${JSON.stringify(origin)} is not an origin (scheme://host[:port], e.g. http://localhost:8233)`;
          ctx.issues.push({ code: 'custom', message, input: ctx.value });
        }
      }
    })
    .optional(),
  /** Bound into every snapshot object: objects of one tenant never verify for another. */
  DS_TENANT: z
    .string()
    .regex(/^[A-Za-z0-9._-]{1,100}$/, 'expected letters, digits, ".", "_" or "-"')
    .default('default'),
  /** Where workspace runtimes keep their working directories on this host. */
  DS_WORKSPACE_DIR: z.string().min(1).optional(),
  /**
   * The worker's variables a workspace command inherits, comma-separated (`PATH,HOME,LC_*`); replaces the default
   * list (`DEFAULT_WORKSPACE_ENV_ALLOW`). The spec's `env` comes on top. `DS_*` and `TEMPORAL_*` are refused.
   */
  DS_WORKSPACE_ENV_ALLOW: envAllowList.optional(),
  /**
   * Run workspace commands as this unprivileged user (a name, or `uid:gid`); the worker must run as root. Unset:
   * commands run as the worker's user.
   */
  DS_WORKSPACE_USER: workspaceUser.optional(),
  /**
   * Sandbox hosts that serve the provider protocol (docs/providers.md), comma-separated base URLs: with them, this
   * worker offers the `remote` runtime (and carries the worker label `runtime:remote`, which remote sessions require).
   */
  DS_SANDBOX_HOSTS: z
    .string()
    .transform((v) =>
      v
        .split(',')
        .map((u) => u.trim())
        .filter((u) => u.length > 0),
    )
    .pipe(
      z
        .array(z.url({ protocol: /^https?$/, error: 'expected an http:// or https:// URL' }))
        .min(1, 'expected at least one URL')
        .max(64),
    )
    .optional(),
  /** The sandbox hosts' bearer token (at least 16 characters); required with DS_SANDBOX_HOSTS. */
  DS_SANDBOX_TOKEN: z.string().min(16, 'expected a secret of at least 16 characters').optional(),
  /**
   * How long a sandbox's host may stay out of reach before its session gives the sandbox up as lost and is restored on
   * another host from its newest checkpoint.
   */
  DS_SANDBOX_LOST_MS: duration.min(1_000, 'expected at least 1000 ms').default(30_000),
  /** Grace period between SIGTERM and SIGKILL when a workspace process is stopped. */
  DS_STOP_GRACE_MS: duration.default(10_000),
  /**
   * How long a workspace start waits for its command to stay alive before it answers: one that exits with a failure
   * within it fails the start (RuntimeFailed, with its exit code and last lines of output). A spec's `settleMs` wins.
   */
  DS_START_SETTLE_MS: duration.max(60_000, 'expected at most 60000 ms').default(DEFAULT_START_SETTLE_MS),
  /**
   * How long the directory and log of a workspace command that failed stay on its host (status shows where); a worker
   * that starts removes those whose time is over.
   */
  DS_FAILED_RETENTION_MS: duration.default(DEFAULT_FAILED_RETENTION_MS),
  /** How long a worker that is asked to stop (SIGINT, SIGTERM) spends moving its sessions to other workers. */
  DS_DRAIN_TIMEOUT_MS: duration.default(30_000),
  /** Sessions one worker hosts at most; placement passes a full worker by. */
  DS_MAX_SESSIONS: z.coerce.number({ message: 'expected a number' }).int().min(1).max(100_000).default(1_000),
  /**
   * Session workflows a worker keeps in memory (their cost: bench/README.md, Scale); one evicted replays its history at
   * its next task. Unset: the worker's default (DEFAULT_MAX_CACHED_WORKFLOWS in src/worker.ts).
   */
  DS_MAX_CACHED_WORKFLOWS: z.coerce.number({ message: 'expected a number' }).int().min(0).max(1_000_000).optional(),
  /** Embedded dev server (only when TEMPORAL_ADDRESS is unset). */
  DS_DEV_SERVER_PORT: port.default(7233),
  DS_DEV_UI_PORT: port.default(8233),
  DS_DEV_SERVER_IP: z.string().min(1).default('127.0.0.1'),
  DS_TEMPORAL_BIN: z.string().min(1).optional(),
  /** The HTTP gateway (`npm start`, `npm run gateway`): where it listens. */
  DS_GATEWAY_PORT: port.default(7280),
  DS_GATEWAY_HOST: z.string().min(1).default('127.0.0.1'),
  /**
   * PEM files of a certificate (its chain after it) and its private key: set both and the gateway serves HTTPS,
   * reading them again when they change. Unset: plain HTTP, for TLS terminated in front of it (a proxy).
   */
  DS_GATEWAY_TLS_CERT: z.string().min(1).optional(),
  DS_GATEWAY_TLS_KEY: z.string().min(1).optional(),
  /**
   * API keys (`{ keys: [{ id, sha256, tenant, role }] }`), read again when the file changes. Unset with the embedded
   * default: a dev key is made under the data folder and printed.
   */
  DS_API_KEYS_FILE: z.string().min(1).optional(),
  /** Instead of a file: the same JSON in the variable (fixed for the process's life: rotating means a restart). */
  DS_API_KEYS: z.string().min(1).optional(),
  /**
   * `on`: the gateway serves export and import (`/v1/sessions/{id}/export`, `/v1/imports`), for which it opens the
   * snapshot store with the master keys, as a worker does. `off` (default): it holds no store key and answers 501.
   */
  DS_GATEWAY_ARCHIVES: z.enum(['on', 'off']).default('off'),
  /** Requests a second one API key may send the gateway (bursts of twice that); over it: 429 with Retry-After. */
  DS_GATEWAY_RATE_PER_KEY: z.coerce.number({ message: 'expected a number' }).positive().max(1_000_000).default(100),
  /**
   * How long a client may take to send a request's headers, and the whole request with its body; and how long a
   * kept-alive connection may wait for its next request. Past them the gateway answers 408 or closes the connection:
   * a slow or endless request holds nothing for long (an answer that takes long, such as a large pause, is not idle).
   */
  DS_GATEWAY_HEADERS_TIMEOUT_MS: z.coerce.number({ message: 'expected a number' }).int().min(100).default(10_000),
  DS_GATEWAY_BODY_TIMEOUT_MS: z.coerce.number({ message: 'expected a number' }).int().min(100).default(30_000),
  DS_GATEWAY_IDLE_TIMEOUT_MS: z.coerce.number({ message: 'expected a number' }).int().min(100).default(60_000),
  /** Requests with a missing or wrong API key one client address may send a second (bursts of twice that). */
  DS_GATEWAY_AUTH_FAILURES_PER_SECOND: z.coerce
    .number({ message: 'expected a number' })
    .positive()
    .max(1_000_000)
    .default(5),
  /**
   * The secret list cursors are sealed with (HMAC-SHA256), base64 of at least 32 bytes. Gateways that hand each
   * other's cursors on (behind one load balancer) need the same one; unset: random per process.
   */
  DS_GATEWAY_CURSOR_KEY: z
    .string()
    .refine((v) => /^[A-Za-z0-9+/]+=*$/.test(v) && Buffer.from(v, 'base64').length >= 32, {
      message: 'expected base64 of at least 32 bytes (openssl rand -base64 32)',
    })
    .optional(),
  /**
   * Where the worker serves Prometheus metrics (`/metrics`): Temporal's own and the worker's. Unset: no endpoint
   * (`npm start`'s embedded default serves them on 9464).
   */
  DS_METRICS_PORT: port.optional(),
  /** The address the metrics endpoint listens on; `0.0.0.0` to let a scraper on another machine reach it. */
  DS_METRICS_HOST: z.string().min(1).default('127.0.0.1'),
  LOG_LEVEL: z.enum(['TRACE', 'DEBUG', 'INFO', 'WARN', 'ERROR']).default('INFO'),
});
export type EnvConfig = z.infer<typeof EnvConfig>;

/** Resolved configuration: defaults filled in, paths absolute. */
export interface Config {
  temporal: {
    address?: string;
    namespace: string;
    apiKey?: string;
    tls?: { certPath?: string; keyPath?: string; caPath?: string; serverName?: string };
  };
  taskQueue: string;
  workerId: string;
  hostTaskQueue: string;
  /** DS_WORKER_LABELS: what placements may require of this worker. */
  workerLabels: string[];
  dataDir: string;
  /** The filesystem store's directory (DS_SNAPSHOT_STORE as a path, DS_SNAPSHOT_DIR, or the default). */
  snapshotDir: string;
  /** Where snapshots are kept: that directory, or an S3 bucket. */
  snapshotStore: SnapshotStoreConfig;
  workspaceDir: string;
  /** The worker's variables a workspace command inherits; undefined: the runtime's default list. */
  workspaceEnvAllow?: string[];
  /** Who workspace commands run as; undefined: the worker's user. */
  workspaceUser?: string | { uid: number; gid: number };
  /** DS_SANDBOX_HOSTS and DS_SANDBOX_TOKEN: where `remote` sessions live; undefined: no `remote` runtime. */
  sandboxHosts?: { urls: string[]; token: string; lostAfterMs: number };
  stopGraceMs: number;
  startSettleMs: number;
  failedRetentionMs: number;
  drainTimeoutMs: number;
  maxSessions: number;
  maxCachedWorkflows?: number;
  snapshots: {
    encryption: 'aes-256-gcm' | 'none';
    formatVersion: 2 | 3;
    codec: 'auto' | 'zstd' | 'brotli';
    /** Average chunk size in bytes. */
    chunkBytes: number;
    masterKeys?: string;
    masterKeyDir?: string;
    /** The master key that wraps new data keys; default: the last of DS_MASTER_KEYS, the greatest file id. */
    masterKeyPrimary?: string;
    tenant: string;
  };
  /** Temporal payload encryption (the payload codec) and its keys. */
  payloads: {
    encryption: 'aes-256-gcm' | 'none';
    keys?: string;
    keyDir?: string;
    /** The key new payloads are sealed under; default: the last of DS_PAYLOAD_KEYS, the greatest file id. */
    primary?: string;
  };
  /** Browser origins the codec server answers (CORS). */
  codecCorsOrigins: string[];
  devServer: { port: number; uiPort: number; ip: string; temporalBin?: string };
  gateway: {
    port: number;
    host: string;
    keysFile?: string;
    /** The keys as JSON, from DS_API_KEYS. */
    keysJson?: string;
    ratePerKey: number;
    /** Failed authentications a second per client address (bursts of twice that); over it: 429. */
    authFailuresPerSecond: number;
    timeouts: GatewayTimeouts;
    /** The secret list cursors are sealed with; undefined: random per process. */
    cursorKey?: Buffer;
    /** Absolute paths of the PEM certificate and key; undefined: plain HTTP. */
    tls?: { certFile: string; keyFile: string };
    /** Serve export and import (DS_GATEWAY_ARCHIVES=on): the gateway then opens the store with its keys. */
    archives: boolean;
  };
  /** The Prometheus endpoint; no port: none (unless `npm start`'s embedded default turns it on). */
  metrics: { host: string; port?: number };
  logLevel: EnvConfig['LOG_LEVEL'];
}

/** How long the gateway waits for a request's headers, for the whole request, and on a silent connection. */
export interface GatewayTimeouts {
  headersMs: number;
  bodyMs: number;
  idleMs: number;
}

/**
 * Thrown when an environment variable has a value the schema refuses, or a `DS_` variable is not one the worker
 * knows. The message names each variable.
 */
export class ConfigError extends DurableSessionsError {
  readonly code = 'InvalidConfig';
  constructor(readonly issues: z.core.$ZodIssue[]) {
    super(
      'invalid configuration:\n' +
        issues.map((i) => `  ${i.path.join('.') || '(environment)'}: ${i.message}`).join('\n'),
    );
  }
}

/** The `DS_` variables the worker reads. */
const KNOWN_DS_VARIABLES = Object.keys(EnvConfig.shape).filter((name) => name.startsWith('DS_'));

/**
 * A `DS_` variable the worker does not know is a mistake to report, not to ignore: `DS_SNAPSHOT_DRI` would otherwise
 * put the snapshots in the default directory. Other variables are the environment's business. `DS_TEST_*` are the
 * test suite's own.
 */
function unknownVariableIssues(env: Record<string, string | undefined>): z.core.$ZodIssue[] {
  return Object.keys(env)
    .filter((name) => name.startsWith('DS_') && !name.startsWith('DS_TEST_') && !KNOWN_DS_VARIABLES.includes(name))
    .sort()
    .map((name) => {
      const near = closestName(name, KNOWN_DS_VARIABLES);
      const message = `unknown variable${near ? ` (did you mean ${near}?)` : ''}`;
      return { code: 'custom', path: [name], message, input: undefined };
    });
}

/**
 * Variables that only mean something together (the gateway's certificate and key, the sandbox hosts and their token):
 * one without the other is refused, naming both.
 */
function pairIssues(env: Record<string, string | undefined>, a: string, b: string): z.core.$ZodIssue[] {
  const hasA = env[a] !== undefined;
  if (hasA === (env[b] !== undefined)) return [];
  const [unset, set] = hasA ? [b, a] : [a, b];
  return [{ code: 'custom', path: [unset], message: `required with ${set}: set both or neither`, input: undefined }];
}

export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  // Empty strings mean "unset", as in most shells and compose files.
  const present = Object.fromEntries(Object.entries(env).filter(([, v]) => v !== undefined && v !== ''));
  const parsed = EnvConfig.safeParse(present);
  const issues = [
    ...unknownVariableIssues(present),
    ...(parsed.success ? [] : parsed.error.issues),
    ...pairIssues(present, 'DS_GATEWAY_TLS_CERT', 'DS_GATEWAY_TLS_KEY'),
    ...pairIssues(present, 'DS_SANDBOX_HOSTS', 'DS_SANDBOX_TOKEN'),
    ...snapshotStoreIssues(present),
    ...(present.DS_API_KEYS !== undefined && present.DS_API_KEYS_FILE !== undefined
      ? [
          {
            code: 'custom' as const,
            path: ['DS_API_KEYS'],
            message: 'set DS_API_KEYS or DS_API_KEYS_FILE, not both',
            input: undefined,
          },
        ]
      : []),
  ];
  if (!parsed.success || issues.length > 0) throw new ConfigError(issues);
  const e = parsed.data;
  const dataDir = path.resolve(e.DS_DATA_DIR);
  const workerId = e.DS_WORKER_ID ?? defaultWorkerId(dataDir);
  const snapshotDir = path.resolve(
    e.DS_SNAPSHOT_STORE !== undefined && !e.DS_SNAPSHOT_STORE.startsWith('s3://')
      ? e.DS_SNAPSHOT_STORE
      : (e.DS_SNAPSHOT_DIR ?? path.join(dataDir, 'snapshots')),
  );
  const wantsTls = e.TEMPORAL_TLS ?? (e.TEMPORAL_API_KEY !== undefined || e.TEMPORAL_TLS_CERT_PATH !== undefined);
  return {
    temporal: {
      address: e.TEMPORAL_ADDRESS,
      namespace: e.TEMPORAL_NAMESPACE,
      apiKey: e.TEMPORAL_API_KEY,
      tls: wantsTls
        ? {
            certPath: e.TEMPORAL_TLS_CERT_PATH,
            keyPath: e.TEMPORAL_TLS_KEY_PATH,
            caPath: e.TEMPORAL_TLS_CA_PATH,
            serverName: e.TEMPORAL_TLS_SERVER_NAME,
          }
        : undefined,
    },
    taskQueue: e.DS_TASK_QUEUE,
    workerId,
    hostTaskQueue: `${e.DS_TASK_QUEUE}@${workerId}`,
    workerLabels: [...(e.DS_WORKER_LABELS ?? []), ...(e.DS_SANDBOX_HOSTS ? [runtimeLabel('remote')!] : [])],
    dataDir,
    snapshotDir,
    snapshotStore: snapshotStoreOf(e, snapshotDir),
    workspaceDir: path.resolve(e.DS_WORKSPACE_DIR ?? path.join(dataDir, 'workspaces')),
    workspaceEnvAllow: e.DS_WORKSPACE_ENV_ALLOW,
    workspaceUser: e.DS_WORKSPACE_USER,
    ...(e.DS_SANDBOX_HOSTS && e.DS_SANDBOX_TOKEN
      ? { sandboxHosts: { urls: e.DS_SANDBOX_HOSTS, token: e.DS_SANDBOX_TOKEN, lostAfterMs: e.DS_SANDBOX_LOST_MS } }
      : {}),
    stopGraceMs: e.DS_STOP_GRACE_MS,
    startSettleMs: e.DS_START_SETTLE_MS,
    failedRetentionMs: e.DS_FAILED_RETENTION_MS,
    drainTimeoutMs: e.DS_DRAIN_TIMEOUT_MS,
    maxSessions: e.DS_MAX_SESSIONS,
    ...(e.DS_MAX_CACHED_WORKFLOWS !== undefined ? { maxCachedWorkflows: e.DS_MAX_CACHED_WORKFLOWS } : {}),
    snapshots: {
      encryption: e.DS_SNAPSHOT_ENCRYPTION,
      formatVersion: e.DS_SNAPSHOT_FORMAT === '2' ? 2 : 3,
      codec: e.DS_SNAPSHOT_CODEC,
      chunkBytes: Number(e.DS_CHUNK_KIB) * 1024,
      masterKeys: e.DS_MASTER_KEYS,
      masterKeyDir: e.DS_MASTER_KEY_DIR ? path.resolve(e.DS_MASTER_KEY_DIR) : undefined,
      ...(e.DS_MASTER_KEY_PRIMARY !== undefined ? { masterKeyPrimary: e.DS_MASTER_KEY_PRIMARY } : {}),
      tenant: e.DS_TENANT,
    },
    payloads: {
      encryption: e.DS_PAYLOAD_ENCRYPTION,
      ...(e.DS_PAYLOAD_KEYS !== undefined ? { keys: e.DS_PAYLOAD_KEYS } : {}),
      ...(e.DS_PAYLOAD_KEY_DIR !== undefined ? { keyDir: path.resolve(e.DS_PAYLOAD_KEY_DIR) } : {}),
      ...(e.DS_PAYLOAD_KEY_PRIMARY !== undefined ? { primary: e.DS_PAYLOAD_KEY_PRIMARY } : {}),
    },
    codecCorsOrigins: e.DS_CODEC_CORS_ORIGINS ?? [],
    devServer: {
      port: e.DS_DEV_SERVER_PORT,
      uiPort: e.DS_DEV_UI_PORT,
      ip: e.DS_DEV_SERVER_IP,
      temporalBin: e.DS_TEMPORAL_BIN,
    },
    gateway: {
      port: e.DS_GATEWAY_PORT,
      host: e.DS_GATEWAY_HOST,
      keysFile: e.DS_API_KEYS_FILE ? path.resolve(e.DS_API_KEYS_FILE) : undefined,
      ...(e.DS_API_KEYS !== undefined ? { keysJson: e.DS_API_KEYS } : {}),
      ratePerKey: e.DS_GATEWAY_RATE_PER_KEY,
      archives: e.DS_GATEWAY_ARCHIVES === 'on',
      authFailuresPerSecond: e.DS_GATEWAY_AUTH_FAILURES_PER_SECOND,
      timeouts: {
        headersMs: e.DS_GATEWAY_HEADERS_TIMEOUT_MS,
        bodyMs: e.DS_GATEWAY_BODY_TIMEOUT_MS,
        idleMs: e.DS_GATEWAY_IDLE_TIMEOUT_MS,
      },
      ...(e.DS_GATEWAY_CURSOR_KEY !== undefined ? { cursorKey: Buffer.from(e.DS_GATEWAY_CURSOR_KEY, 'base64') } : {}),
      ...(e.DS_GATEWAY_TLS_CERT !== undefined && e.DS_GATEWAY_TLS_KEY !== undefined
        ? { tls: { certFile: path.resolve(e.DS_GATEWAY_TLS_CERT), keyFile: path.resolve(e.DS_GATEWAY_TLS_KEY) } }
        : {}),
    },
    metrics: { host: e.DS_METRICS_HOST, ...(e.DS_METRICS_PORT !== undefined ? { port: e.DS_METRICS_PORT } : {}) },
    logLevel: e.LOG_LEVEL,
  };
}

/**
 * A worker's identity outlives its process: a restarted worker on the same host and data directory polls the same
 * host queue, so it is the same host to its sessions (not a lost one).
 */
export function defaultWorkerId(dataDir: string): string {
  const host =
    os
      .hostname()
      .replace(/[^A-Za-z0-9._-]/g, '-')
      .slice(0, 80) || 'host';
  return `${host}-${createHash('sha256').update(path.resolve(dataDir)).digest('hex').slice(0, 8)}`;
}
