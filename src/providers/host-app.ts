import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { pipeline, Readable, Transform } from 'node:stream';
import type { ReadableStream as WebReadableStream } from 'node:stream/web';
import { Hono, type Context } from 'hono';
import { bodyLimit } from 'hono/body-limit';
import type { z } from 'zod';
import { DurableSessionsError, messageOf } from '../errors';
import {
  RuntimeBusyError,
  RuntimeExitedError,
  RuntimeFailedError,
  RuntimeNotFoundError,
} from '../runtimes/session-runtime';
import { ArchiveRejectedError, WorkspaceRuntime } from '../runtimes/workspace';
import { openCapture } from '../runtimes/workspace/capture';
import { extractArchive } from '../runtimes/workspace/restore';
import { sourceStream } from '../snapshots';
import { raceAbort } from '../runtimes/race-abort';
import {
  AdoptSandbox,
  CreateSandbox,
  decodeSandboxHeader,
  EXPORT_FORMAT,
  HEADERS,
  ImportSandbox,
  PROTOCOL_VERSION,
  PROVIDER_ERRORS,
  SandboxId,
  StopSandbox,
  TAR_CONTENT_TYPE,
  type Capabilities,
  type ErrorBody,
  type ProviderErrorCode,
  type Sandbox,
  type SandboxSpec,
} from './protocol';
import { TarStreamCheck } from './tar-check';

export interface SandboxHostOptions {
  /** Sandboxes live in `<rootDir>/<sessionId>/<sandboxId>`; the host's records and lock in `<rootDir>/.run`. */
  rootDir: string;
  /** The bearer token every call must carry. */
  token: string;
  maxSandboxes?: number;
  /** The largest state the host exports or imports (default 64 GiB). */
  maxExportBytes?: number;
  /**
   * Keep sandboxes running while they are exported (`runsWhileExporting: true`): the sandbox is frozen only while its
   * files are copied aside on the host's disk, and runs while the copy streams out. Costs the copy's disk space for
   * as long as the export lasts. Default false: frozen for the whole export.
   */
  runsWhileExporting?: boolean;
  log?: (message: string) => void;
}

/** Copies set aside by exports of running sandboxes, under the root; a name no sandbox's session can have. */
export const EXPORTS_DIR = '.exports';

/** JSON bodies (a spec with its seed files and environment) are small: 1 MiB is four times the largest spec. */
export const MAX_REQUEST_BYTES = 1024 * 1024;
/** The `DS-Sandbox` header carries a spec without its seed files; Node's default of 16 KiB is too small for one. */
export const MAX_HEADER_BYTES = 256 * 1024;
export const MAX_EXIT_WAIT_MS = 60_000;
const DEFAULT_EXIT_WAIT_MS = 30_000;

export interface SandboxHost {
  app: Hono;
  runtime: WorkspaceRuntime;
  capabilities: Capabilities;
  /** Kills and removes what a previous host process on the root left: call once, before serving. */
  recover(): Promise<void>;
}

/** Thrown inside a handler to answer with a typed error. */
class ProviderError extends Error {
  constructor(
    readonly providerCode: ProviderErrorCode,
    message: string,
    readonly details?: unknown,
  ) {
    super(message);
  }
}

/**
 * The reference sandbox host's HTTP app: the provider protocol (docs/providers.md) over a {@link WorkspaceRuntime} on
 * its own root. Export is the runtime's capture stream and import its restore, streamed both ways.
 */
export function createSandboxHost(options: SandboxHostOptions): SandboxHost {
  const log = options.log ?? ((message) => console.log(message));
  const runtime = new WorkspaceRuntime({ rootDir: options.rootDir, log });
  const capabilities: Capabilities = {
    protocolVersion: PROTOCOL_VERSION,
    exportFormats: [EXPORT_FORMAT],
    captures: { filesystem: true, processMemory: false },
    // Either way the tar is one point in time: the group is stopped (SIGSTOP) for the whole export, or only while its
    // files are copied aside.
    runsWhileExporting: options.runsWhileExporting ?? false,
    limits: {
      maxSandboxes: options.maxSandboxes ?? 64,
      maxExportBytes: options.maxExportBytes ?? 64 * 1024 ** 3,
      maxRequestBytes: MAX_REQUEST_BYTES,
      maxHeaderBytes: MAX_HEADER_BYTES,
      maxExitWaitMs: MAX_EXIT_WAIT_MS,
    },
  };
  const fences = new Fences();
  /** The sandboxes made here and not deleted, for the capacity limit. */
  const live = new Set<string>();
  const tokenDigest = digest(options.token);

  const app = new Hono();

  app.onError((error, c) => {
    if (error instanceof ProviderError) return fail(error.providerCode, error.message, error.details);
    const mapped = mapRuntimeError(error);
    if (mapped) return fail(mapped.code, mapped.message, mapped.details);
    log(`sandbox host: ${c.req.method} ${c.req.path} failed: ${messageOf(error)}`);
    return fail('Internal', 'the sandbox host failed; see its log');
  });
  app.notFound((c) => fail('InvalidInput', `no route ${c.req.method} ${c.req.path}`));

  app.use('*', async (c, next) => {
    await next();
    // A refusal may leave the body unread (an import, a body over the limit): the connection cannot carry the next
    // request, and a client that reused it would see it closed under that request.
    const sent = c.req.header('content-length') ?? c.req.header('transfer-encoding');
    if (c.res.status >= 400 && sent !== undefined && sent !== '0') c.res.headers.set('connection', 'close');
  });

  app.use('*', async (c, next) => {
    const header = c.req.header('authorization') ?? '';
    const presented = /^Bearer (.+)$/.exec(header)?.[1];
    if (!presented || !timingSafeEqual(digest(presented), tokenDigest)) {
      return fail('Unauthorized', 'a valid bearer token is required', undefined, { 'WWW-Authenticate': 'Bearer' });
    }
    await next();
  });

  const jsonLimit = bodyLimit({
    maxSize: MAX_REQUEST_BYTES,
    onError: () => fail('TooLarge', `the request body is over ${MAX_REQUEST_BYTES} bytes`),
  });

  app.get('/v1/capabilities', (c) => c.json(capabilities));

  app.post('/v1/sandboxes', jsonLimit, async (c) => {
    const fence = fenceOf(c);
    const body = parse(CreateSandbox, await jsonOf(c), 'body');
    const { sandboxId, sessionId } = body;
    await refuseOtherSession(sandboxId, sessionId);
    fences.admit(fence, sandboxId, sessionId);
    reserve(sandboxId);
    await runtime.start({ sessionId, instanceId: sandboxId, spec: workspaceSpec(body.spec) });
    live.add(sandboxId);
    return c.json(await sandboxOf(sandboxId, false));
  });

  app.get('/v1/sandboxes/:id', async (c) => {
    const id = idOf(c);
    return c.json(await sandboxOf(id, c.req.query('activity') === 'true'));
  });

  app.get('/v1/sandboxes/:id/export', async (c) => {
    const id = idOf(c);
    await admitFor(c, id);
    const captured = capabilities.runsWhileExporting ? await copiedAside(id) : await runtime.capture(id);
    const state = limited(captured, capabilities.limits.maxExportBytes);
    return new Response(Readable.toWeb(state) as ReadableStream, {
      headers: { 'content-type': TAR_CONTENT_TYPE, [HEADERS.exportFormat]: EXPORT_FORMAT },
    });
  });

  app.put('/v1/sandboxes/:id/import', async (c) => {
    const id = idOf(c);
    const fence = fenceOf(c);
    const format = c.req.header(HEADERS.exportFormat);
    if (format !== EXPORT_FORMAT) {
      throw new ProviderError(
        'InvalidInput',
        `${HEADERS.exportFormat} must be ${EXPORT_FORMAT}, not ${format ?? 'absent'}`,
      );
    }
    if (!(c.req.header('content-type') ?? '').startsWith(TAR_CONTENT_TYPE)) {
      throw new ProviderError('InvalidInput', `the body must be ${TAR_CONTENT_TYPE}`);
    }
    const declared = Number(c.req.header('content-length') ?? NaN);
    if (declared > capabilities.limits.maxExportBytes) {
      throw new ProviderError('TooLarge', `the import is over ${capabilities.limits.maxExportBytes} bytes`);
    }
    const header = c.req.header(HEADERS.sandbox);
    const request = parse(
      ImportSandbox,
      header === undefined ? undefined : decodeSandboxHeader(header),
      HEADERS.sandbox,
    );
    await refuseOtherSession(id, request.sessionId);
    fences.admit(fence, id, request.sessionId);
    reserve(id);
    const raw = c.req.raw.body;
    const body = raw ? Readable.fromWeb(raw as WebReadableStream<Uint8Array>) : Readable.from([]);
    const state = limited(body, capabilities.limits.maxExportBytes, { wholeTar: true });
    try {
      await runtime.restore({
        sessionId: request.sessionId,
        instanceId: id,
        spec: workspaceSpec(request.spec),
        state,
        ...(request.forkedFrom ? { forkedFrom: request.forkedFrom } : {}),
      });
    } catch (error) {
      if (error instanceof TooLargeError) throw new ProviderError('TooLarge', error.message);
      if (error instanceof DurableSessionsError && !(error instanceof ArchiveRejectedError)) throw error;
      // Whatever the stream held that the extractor could not take: nothing of it was kept.
      throw new ProviderError('ImportRejected', `the import was not restored: ${messageOf(error)}`);
    }
    live.add(id);
    return c.json(await sandboxOf(id, false));
  });

  app.post('/v1/sandboxes/:id/adopt', jsonLimit, async (c) => {
    const id = idOf(c);
    const fence = fenceOf(c);
    const { sessionId } = parse(AdoptSandbox, await jsonOf(c), 'body');
    const existing = await runtime.describe(id);
    if (!existing) throw new ProviderError('SandboxNotFound', `no sandbox ${id} on this host`);
    if (existing.sessionId !== sessionId) {
      throw new ProviderError('SandboxConflict', `sandbox ${id} belongs to another session`);
    }
    fences.admit(fence, id, sessionId);
    return c.json(await sandboxOf(id, false));
  });

  app.post('/v1/sandboxes/:id/stop', jsonLimit, async (c) => {
    const id = idOf(c);
    const { graceMs } = parse(StopSandbox, await jsonOf(c, {}), 'body');
    await admitFor(c, id);
    return c.json(await runtime.stop(id, graceMs === undefined ? {} : { graceMs }));
  });

  app.delete('/v1/sandboxes/:id', async (c) => {
    const id = idOf(c);
    await admitFor(c, id, { known: false });
    await runtime.dispose(id);
    live.delete(id);
    return c.body(null, 204);
  });

  app.get('/v1/sandboxes/:id/exit', async (c) => {
    const id = idOf(c);
    const asked = Number(c.req.query('timeoutMs') ?? DEFAULT_EXIT_WAIT_MS);
    if (!Number.isInteger(asked) || asked < 0)
      throw new ProviderError('InvalidInput', 'timeoutMs must be an integer ≥ 0');
    const waited = runtime.waitForExit(id);
    try {
      const exit = await raceAbort(waited, AbortSignal.timeout(Math.min(asked, MAX_EXIT_WAIT_MS)));
      return c.json({ exited: true, exit });
    } catch (error) {
      if ((error as { name?: unknown }).name !== 'AbortError') throw error;
      return c.json({ exited: false });
    }
  });

  /**
   * An export of a sandbox that keeps running: its capture (the group frozen) is extracted into a directory of its
   * own, the group resumes, and the export is a capture of that copy, removed once the stream ends or fails. The
   * bytes are those a frozen export would have sent at the same moment.
   */
  async function copiedAside(id: string): Promise<Readable> {
    const staging = path.join(options.rootDir, EXPORTS_DIR, `${id}-${randomBytes(6).toString('hex')}`);
    const discard = () =>
      fs.promises
        .rm(staging, { recursive: true, force: true })
        .catch((error: unknown) => log(`sandbox host: ${staging} was not removed: ${messageOf(error)}`));
    await fs.promises.mkdir(staging, { recursive: true, mode: 0o700 });
    try {
      await extractArchive(await runtime.capture(id), staging);
    } catch (error) {
      await discard();
      throw error;
    }
    return sourceStream(openCapture(staging, () => void discard(), undefined, undefined));
  }

  /** Refuses an id live for another session before its fence is recorded: that call changes nothing. */
  async function refuseOtherSession(sandboxId: string, sessionId: string): Promise<void> {
    const existing = await runtime.describe(sandboxId);
    if (existing && existing.sessionId !== sessionId) {
      throw new ProviderError('SandboxConflict', `sandbox ${sandboxId} belongs to another session`);
    }
  }

  /** Checks the call's fence against the sandbox's and its session's, and remembers it. */
  async function admitFor(c: Context, id: string, { known = true } = {}): Promise<void> {
    const fence = fenceOf(c);
    const existing = await runtime.describe(id);
    if (!existing && known) throw new ProviderError('SandboxNotFound', `no sandbox ${id} on this host`);
    fences.admit(fence, id, existing?.sessionId);
  }

  function reserve(id: string): void {
    if (!live.has(id) && live.size >= capabilities.limits.maxSandboxes) {
      throw new ProviderError('CapacityExceeded', `the host runs ${live.size} sandboxes, its most`);
    }
  }

  async function sandboxOf(id: string, withActivity: boolean): Promise<Sandbox> {
    const info = await runtime.describe(id);
    if (!info) throw new ProviderError('SandboxNotFound', `no sandbox ${id} on this host`);
    const lastActivity = withActivity ? await runtime.lastActivity(id).catch(() => undefined) : undefined;
    const diskBytes = withActivity ? await bytesUnder(info.location) : undefined;
    return {
      sandboxId: info.instanceId,
      sessionId: info.sessionId,
      running: info.running,
      ...(info.pid === undefined ? {} : { pid: info.pid }),
      startedAt: info.startedAt,
      ...(lastActivity === undefined ? {} : { lastActivity }),
      ...(diskBytes === undefined ? {} : { resources: { diskBytes } }),
    };
  }

  /** At start, before any call: copies a previous host process left set aside by exports go. */
  async function recover(): Promise<void> {
    await runtime.recoverHost();
    await fs.promises.rm(path.join(options.rootDir, EXPORTS_DIR), { recursive: true, force: true });
  }

  return { app, runtime, capabilities, recover };
}

function fail(
  code: ProviderErrorCode,
  message: string,
  details?: unknown,
  headers: Record<string, string> = {},
): Response {
  const { status, retryable } = PROVIDER_ERRORS[code];
  const body: ErrorBody = { error: { code, message, retryable, ...(details === undefined ? {} : { details }) } };
  return new Response(JSON.stringify(body), { status, headers: { 'content-type': 'application/json', ...headers } });
}

function mapRuntimeError(error: unknown): { code: ProviderErrorCode; message: string; details?: unknown } | undefined {
  const message = messageOf(error);
  if (error instanceof RuntimeNotFoundError)
    return { code: 'SandboxNotFound', message: `no sandbox ${error.instanceId}` };
  if (error instanceof RuntimeBusyError) return { code: 'SandboxBusy', message };
  if (error instanceof RuntimeExitedError) return { code: 'RuntimeFailed', message, details: error.details };
  if (error instanceof RuntimeFailedError) return { code: 'RuntimeFailed', message };
  return undefined;
}

function digest(token: string): Buffer {
  return createHash('sha256').update(token).digest();
}

function parse<T extends z.ZodType>(schema: T, value: unknown, what: string): z.infer<T> {
  const parsed = schema.safeParse(value);
  if (!parsed.success) {
    const first = parsed.error.issues[0];
    const where = first && first.path.length > 0 ? ` at ${first.path.join('.')}` : '';
    throw new ProviderError('InvalidInput', `${what} is invalid${where}: ${first?.message ?? 'unreadable'}`, {
      issues: parsed.error.issues,
    });
  }
  return parsed.data;
}

/** The body as JSON; `empty`, when given, stands for an empty body. */
async function jsonOf(c: Context, empty?: unknown): Promise<unknown> {
  const text = await c.req.text();
  if (text === '' && empty !== undefined) return empty;
  try {
    return JSON.parse(text) as unknown;
  } catch {
    throw new ProviderError('InvalidInput', 'the body is not JSON');
  }
}

function idOf(c: Context): string {
  return parse(SandboxId, c.req.param('id'), 'the sandbox id');
}

/** The call's `DS-Fence`: a positive integer, required on every call that changes or freezes a sandbox. */
function fenceOf(c: Context): number {
  const raw = c.req.header(HEADERS.fence);
  const fence = raw !== undefined && /^[0-9]{1,15}$/.test(raw) ? Number(raw) : NaN;
  if (!(fence >= 1)) throw new ProviderError('InvalidInput', `${HEADERS.fence} must be a positive integer`);
  return fence;
}

/**
 * The highest fencing token seen per sandbox and per session. A call below either is stale: the session has moved
 * past the caller (another worker drives it now). Checked and recorded synchronously, so two calls cannot interleave
 * between the check and the record. Held in memory: a host that restarts has lost its sandboxes too.
 */
class Fences {
  private readonly bySandbox = new Map<string, number>();
  private readonly bySession = new Map<string, number>();

  admit(fence: number, sandboxId: string, sessionId: string | undefined): void {
    const seen = Math.max(this.bySandbox.get(sandboxId) ?? 0, sessionId ? (this.bySession.get(sessionId) ?? 0) : 0);
    if (fence < seen) {
      throw new ProviderError('StaleFence', `fencing token ${fence} is below ${seen}, which this host has seen`, {
        seen,
      });
    }
    this.bySandbox.set(sandboxId, fence);
    if (sessionId) this.bySession.set(sessionId, fence);
  }
}

class TooLargeError extends Error {}

/** Entries a walk for the disk use looks at, at most: a huge tree is reported as unknown rather than walked. */
const MAX_USAGE_ENTRIES = 100_000;

/** The apparent size of the files under `root` (symlinks as themselves); undefined when the walk is cut short. */
async function bytesUnder(root: string): Promise<number | undefined> {
  let bytes = 0;
  let seen = 0;
  const pending = [root];
  while (pending.length > 0) {
    const dir = pending.pop()!;
    let entries: fs.Dirent[];
    try {
      entries = await fs.promises.readdir(dir, { withFileTypes: true });
    } catch {
      continue; // removed meanwhile
    }
    for (const entry of entries) {
      if (++seen > MAX_USAGE_ENTRIES) return undefined;
      const full = path.join(dir, entry.name);
      if (entry.isDirectory()) pending.push(full);
      else
        bytes += await fs.promises.lstat(full).then(
          (stat) => stat.size,
          () => 0,
        );
    }
  }
  return bytes;
}

/**
 * `source`, failed with {@link TooLargeError} once more than `max` bytes have passed. Errors of `source` pass on.
 * With `wholeTar`, it also fails unless the stream is a whole tar ending with the end-of-archive marker: a tar cut off
 * between two entries is otherwise a valid, shorter archive, and an import has no digest to catch it.
 */
function limited(source: Readable, max: number, { wholeTar = false } = {}): Readable {
  let seen = 0;
  const check = new TarStreamCheck();
  const counter = new Transform({
    transform(chunk: Buffer, _encoding, done) {
      seen += chunk.length;
      if (seen > max) return done(new TooLargeError(`the state is over ${max} bytes`));
      const problem = wholeTar ? check.update(chunk) : undefined;
      if (problem) return done(new Error(`the import is not a tar/1 archive: ${problem}`));
      done(null, chunk);
    },
    flush(done) {
      done(wholeTar && !check.ended ? new Error('the tar stream is truncated: it has no end-of-archive marker') : null);
    },
  });
  pipeline(source, counter, () => undefined);
  return counter;
}

function workspaceSpec(spec: SandboxSpec) {
  return { kind: 'workspace' as const, ...spec };
}
