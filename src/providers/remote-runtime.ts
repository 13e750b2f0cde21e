import { pipeline, Readable, Transform } from 'node:stream';
import type { ReadableStream as WebReadableStream } from 'node:stream/web';
import type { z } from 'zod';
import type { WorkspaceRuntimeSpec } from '../domain/schemas';
import { isError, messageOf } from '../errors';
import {
  RuntimeBusyError,
  RuntimeExitedError,
  RuntimeFailedError,
  RuntimeNotFoundError,
  type ExitInfo,
  type RestoreRequest,
  type RuntimeInstanceInfo,
  type SessionRuntime,
  type StartRequest,
} from '../runtimes/session-runtime';
import type { RuntimeExitDetails } from '../domain/records';
import {
  encodeSandboxHeader,
  ErrorBody,
  Exit,
  EXPORT_FORMAT,
  ExitWait,
  HEADERS,
  isProviderErrorCode,
  PROVIDER_ERRORS,
  Sandbox,
  TAR_CONTENT_TYPE,
  type SandboxSpec,
} from './protocol';

export interface RemoteRuntimeOptions {
  /** The sandbox host's base URL, e.g. `http://127.0.0.1:7300`. */
  url: string;
  /** Its bearer token. */
  token: string;
  /** The fencing token each call carries: the session's generation (default 1). */
  fence?: () => number;
  /**
   * How long a call may take (default 30 s): a JSON call as a whole; an export until the host answers; an import while
   * no byte moves (a slow state is no failure, a stalled one is). `stop` adds its grace period.
   */
  timeoutMs?: number;
  /** How long each long poll of `waitForExit` asks the host to wait (default 25 s; the host caps it). */
  exitPollMs?: number;
}

/**
 * Thrown when the sandbox host refuses a call's fencing token: it has seen a higher one (`seen`) for the sandbox or its
 * session, so another worker drives the session now. Nothing was changed.
 */
export class StaleFenceError extends RuntimeFailedError {
  constructor(
    message: string,
    readonly seen: number | undefined,
  ) {
    super(message);
  }
}

/**
 * The pieces a state crosses the wire in, gathered from the socket's 64 KiB reads (and the store's chunk-sized
 * pieces): each piece costs the chunker, the Readables and the host's extractor a little, whatever its size
 * (bench/README.md, "Provider protocol").
 */
const PIECE_BYTES = 1024 * 1024;

/** A Transform that passes its bytes on in pieces of at least `bytes` (the last one shorter); `moved` on each input. */
function gathering(bytes: number, moved: () => void = () => undefined): Transform {
  let held: Buffer[] = [];
  let size = 0;
  return new Transform({
    transform(chunk: Buffer, _encoding, done) {
      moved();
      held.push(chunk);
      size += chunk.length;
      if (size < bytes) return done();
      const piece = held.length === 1 ? held[0]! : Buffer.concat(held, size);
      held = [];
      size = 0;
      done(null, piece);
    },
    flush(done) {
      moved();
      done(null, size > 0 ? Buffer.concat(held, size) : undefined);
    },
  });
}

/** The export format is the workspace runtime's capture, so a remote instance restores its checkpoints too. */
const VERSION = '1';

/**
 * A session runtime whose instances are sandboxes on a sandbox host, spoken to over the provider protocol
 * (docs/providers.md). Instances live on the host, not in this process: any worker reaches them, and they outlive
 * the worker that made them. Capture streams the host's export, restore streams an import; nothing is held whole.
 */
export class RemoteRuntime implements SessionRuntime<WorkspaceRuntimeSpec> {
  readonly kind = 'workspace';
  readonly placement = 'anywhere';
  readonly version = VERSION;

  private readonly url: string;
  private readonly token: string;
  private readonly fence: () => number;
  private readonly timeoutMs: number;
  private readonly exitPollMs: number;

  constructor(options: RemoteRuntimeOptions) {
    this.url = options.url.replace(/\/+$/, '');
    this.token = options.token;
    this.fence = options.fence ?? (() => 1);
    this.timeoutMs = options.timeoutMs ?? 30_000;
    this.exitPollMs = options.exitPollMs ?? 25_000;
  }

  canRestore(version: string): boolean {
    return version === VERSION;
  }

  async start(request: StartRequest<WorkspaceRuntimeSpec>): Promise<RuntimeInstanceInfo> {
    const body = { sandboxId: request.instanceId, sessionId: request.sessionId, spec: sandboxSpec(request.spec) };
    const response = await this.call('POST', '/v1/sandboxes', { json: body, fenced: true });
    return this.info(read(response, Sandbox));
  }

  async restore(request: RestoreRequest<WorkspaceRuntimeSpec>): Promise<RuntimeInstanceInfo> {
    const { state } = request;
    let stateError: unknown;
    state.once('error', (error) => (stateError ??= error));
    const controller = new AbortController();
    // A stalled upload or answer aborts the call: armed again by every chunk, and once the body is sent.
    let timer: NodeJS.Timeout | undefined;
    const arm = (): void => {
      clearTimeout(timer);
      timer = setTimeout(
        () => controller.abort(new Error(`the sandbox host did not move for ${this.timeoutMs} ms`)),
        this.timeoutMs,
      );
    };
    const watched = gathering(PIECE_BYTES, arm);
    state.once('error', (error) => watched.destroy(error));
    state.pipe(watched);
    const header = encodeSandboxHeader({
      sessionId: request.sessionId,
      spec: sandboxSpec({ ...request.spec, files: undefined }),
      ...(request.forkedFrom ? { forkedFrom: request.forkedFrom } : {}),
    });
    arm();
    try {
      const response = await this.call('PUT', `/v1/sandboxes/${encodeURIComponent(request.instanceId)}/import`, {
        fenced: true,
        body: Readable.toWeb(watched) as ReadableStream,
        headers: { 'content-type': TAR_CONTENT_TYPE, [HEADERS.exportFormat]: EXPORT_FORMAT, [HEADERS.sandbox]: header },
        signal: controller.signal,
      });
      return this.info(read(response, Sandbox));
    } catch (error) {
      // A state that failed (a digest mismatch) is the reason, whatever the host or the connection made of it.
      if (isError(stateError)) throw stateError;
      throw error;
    } finally {
      clearTimeout(timer);
      // Adopted, refused or failed: the stream is released, not left half read.
      state.destroy();
      watched.destroy();
    }
  }

  async capture(instanceId: string): Promise<Readable> {
    const { response } = await this.call('GET', `${this.path(instanceId)}/export`, { fenced: true, stream: true });
    const format = response.headers.get(HEADERS.exportFormat);
    if (format !== EXPORT_FORMAT || !response.body) {
      await response.body?.cancel();
      throw new RuntimeFailedError(`the sandbox host exported ${format ?? 'no format'}, not ${EXPORT_FORMAT}`);
    }
    const body = Readable.fromWeb(response.body as WebReadableStream<Uint8Array>);
    const state = gathering(PIECE_BYTES);
    // Either end's failure or release reaches the other: a cut export fails the state, a released state the body.
    pipeline(body, state, () => undefined);
    return state;
  }

  async stop(instanceId: string, options: { graceMs?: number } = {}): Promise<ExitInfo> {
    const response = await this.call('POST', `${this.path(instanceId)}/stop`, {
      fenced: true,
      json: options.graceMs === undefined ? {} : { graceMs: options.graceMs },
      // The host waits out the grace period (the spec's, up to 10 min) before it answers.
      timeoutMs: this.timeoutMs + (options.graceMs ?? 600_000),
    });
    return read(response, Exit);
  }

  async waitForExit(instanceId: string, signal?: AbortSignal): Promise<ExitInfo> {
    for (;;) {
      signal?.throwIfAborted();
      const response = await this.call('GET', `${this.path(instanceId)}/exit?timeoutMs=${this.exitPollMs}`, {
        timeoutMs: this.exitPollMs + this.timeoutMs,
        ...(signal ? { signal } : {}),
      }).catch((error: unknown) => {
        if (signal?.aborted) throw new DOMException('waiting for the runtime instance was aborted', 'AbortError');
        throw error;
      });
      const answer = read(response, ExitWait);
      if (answer.exited) return answer.exit;
    }
  }

  async describe(instanceId: string): Promise<RuntimeInstanceInfo | undefined> {
    const sandbox = await this.sandbox(instanceId);
    return sandbox && this.info(sandbox);
  }

  async lastActivity(instanceId: string): Promise<string | undefined> {
    const sandbox = await this.sandbox(instanceId, true);
    if (!sandbox) throw new RuntimeNotFoundError(instanceId);
    return sandbox.lastActivity;
  }

  async dispose(instanceId: string): Promise<void> {
    await this.call('DELETE', this.path(instanceId), { fenced: true });
  }

  private async sandbox(instanceId: string, activity = false): Promise<Sandbox | undefined> {
    try {
      const response = await this.call('GET', `${this.path(instanceId)}${activity ? '?activity=true' : ''}`, {});
      return read(response, Sandbox);
    } catch (error) {
      if (error instanceof RuntimeNotFoundError) return undefined;
      throw error;
    }
  }

  private path(instanceId: string): string {
    return `/v1/sandboxes/${encodeURIComponent(instanceId)}`;
  }

  private info(sandbox: Sandbox): RuntimeInstanceInfo {
    return {
      instanceId: sandbox.sandboxId,
      sessionId: sandbox.sessionId,
      kind: this.kind,
      version: this.version,
      location: `${this.url}${this.path(sandbox.sandboxId)}`,
      ...(sandbox.pid === undefined ? {} : { pid: sandbox.pid }),
      startedAt: sandbox.startedAt,
      running: sandbox.running,
    };
  }

  /**
   * One call to the host, with its token, its fence when it changes or freezes a sandbox, and a timeout. An error
   * answer is thrown as the runtime error its code means; a call that could not reach the host is RuntimeBusyError
   * (retryable: the host may be back).
   */
  private async call(
    method: string,
    path: string,
    options: {
      fenced?: boolean;
      json?: unknown;
      body?: ReadableStream;
      headers?: Record<string, string>;
      signal?: AbortSignal;
      timeoutMs?: number;
      /** The timeout ends with the answer's headers: the body is the caller's to read at its own pace. */
      stream?: boolean;
    },
  ): Promise<Answer> {
    const headers: Record<string, string> = { authorization: `Bearer ${this.token}`, ...options.headers };
    if (options.fenced) headers[HEADERS.fence] = String(this.fence());
    if (options.json !== undefined) headers['content-type'] = 'application/json';
    const timeout = new AbortController();
    const timer = options.body
      ? undefined
      : setTimeout(
          () =>
            timeout.abort(
              new Error(`the sandbox host did not answer within ${options.timeoutMs ?? this.timeoutMs} ms`),
            ),
          options.timeoutMs ?? this.timeoutMs,
        );
    const signal = options.signal ? AbortSignal.any([timeout.signal, options.signal]) : timeout.signal;
    let response: Response;
    let text: string | undefined;
    try {
      response = await fetch(`${this.url}${path}`, {
        method,
        headers,
        signal,
        ...(options.json !== undefined ? { body: JSON.stringify(options.json) } : {}),
        // `redirect: 'error'`: to follow a redirect, fetch tees a streamed body so that it can send it again, and
        // holds every byte of it until the answer (a whole state in memory: bench/README.md, "Provider protocol").
        ...(options.body ? { body: options.body, duplex: 'half', redirect: 'error' } : {}),
      });
      // A JSON answer, or an error's, is read within the same timeout; a stream is the caller's to read.
      if (!(options.stream && response.ok)) text = await response.text();
    } catch (error) {
      if (options.signal?.aborted) throw error;
      const reason = messageOf(timeout.signal.aborted ? timeout.signal.reason : error);
      throw new RuntimeBusyError(`the sandbox host ${this.url} cannot be reached: ${reason}`, { cause: error });
    } finally {
      clearTimeout(timer);
    }
    if (text === undefined) return { response, text: '' };
    if (!response.ok) throw errorOf(response.status, text, path);
    return { response, text };
  }
}

/** The runtime error an error answer means (docs/providers.md, "Errors"). */
function errorOf(status: number, text: string, path: string): Error {
  let parsed: ErrorBody | undefined;
  try {
    parsed = ErrorBody.parse(JSON.parse(text));
  } catch {
    return new RuntimeFailedError(`the sandbox host answered ${status} to ${path} without a typed error`);
  }
  const { code, message, retryable, details } = parsed.error;
  const what = `the sandbox host: ${message} (${code})`;
  if (!isProviderErrorCode(code)) {
    return retryable ? new RuntimeBusyError(what) : new RuntimeFailedError(what);
  }
  switch (code) {
    case 'SandboxNotFound': {
      const id = decodeURIComponent(/^\/v1\/sandboxes\/([^/?]+)/.exec(path)?.[1] ?? '');
      return new RuntimeNotFoundError(id);
    }
    case 'SandboxBusy':
    case 'CapacityExceeded':
    case 'Internal':
      return new RuntimeBusyError(what);
    case 'StaleFence': {
      const seen = (details as { seen?: unknown } | undefined)?.seen;
      return new StaleFenceError(what, typeof seen === 'number' ? seen : undefined);
    }
    case 'RuntimeFailed':
      return isExitDetails(details) ? new RuntimeExitedError(what, details) : new RuntimeFailedError(what);
    default:
      return PROVIDER_ERRORS[code].retryable ? new RuntimeBusyError(what) : new RuntimeFailedError(what);
  }
}

function isExitDetails(details: unknown): details is RuntimeExitDetails {
  return typeof details === 'object' && details !== null && 'outputTail' in details && 'exitCode' in details;
}

/** A call's answer: the response, and its body read whole unless it is a stream. */
interface Answer {
  response: Response;
  text: string;
}

function read<T extends z.ZodType>({ text }: Answer, schema: T): z.infer<T> {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    value = undefined;
  }
  const parsed = schema.safeParse(value);
  if (!parsed.success) throw new RuntimeFailedError('the sandbox host answered what the protocol does not say');
  return parsed.data;
}

function sandboxSpec({ kind: _kind, files, ...rest }: WorkspaceRuntimeSpec): SandboxSpec {
  return files === undefined ? rest : { ...rest, files };
}
