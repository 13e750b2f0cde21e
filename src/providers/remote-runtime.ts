import { createHash } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import { pipeline, Readable, Transform } from 'node:stream';
import type { ReadableStream as WebReadableStream } from 'node:stream/web';
import type { z } from 'zod';
import type { RemoteRuntimeSpec } from '../domain/schemas';
import { currentFence } from '../runtimes/fence';
import { DurableSessionsError, isError, messageOf } from '../errors';
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
import { TarStreamCheck } from './tar-check';

export interface RemoteRuntimeOptions {
  /**
   * The sandbox hosts' base URLs, e.g. `http://127.0.0.1:7300`. A new sandbox goes to the first of them, in an order
   * drawn from its id, that takes it; one that refuses connections is passed over.
   */
  url: string | readonly string[];
  /** Their bearer token. */
  token: string;
  /** The fencing token each call carries: the session's generation (default: the activity's, see withFence; 1). */
  fence?: () => number;
  /**
   * How long a call may take (default 30 s): a JSON call as a whole; an export until the host answers, then while the
   * reader waits for a byte that does not come; an import while no byte moves (a slow state is no failure, a stalled
   * one is). `stop` adds its grace period.
   */
  timeoutMs?: number;
  /** The largest state an export may send (default 64 GiB, the reference host's own limit): more is no state. */
  maxExportBytes?: number;
  /** How long each long poll of `waitForExit` asks the host to wait (default 25 s; the host caps it). */
  exitPollMs?: number;
  /**
   * How long a sandbox's host may stay out of reach before `waitForExit` gives the sandbox up as lost (default 30 s):
   * its session is then restored on another host from its newest checkpoint.
   */
  lostAfterMs?: number;
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
export class RemoteRuntime implements SessionRuntime<RemoteRuntimeSpec> {
  readonly kind = 'remote';
  readonly placement = 'anywhere';
  readonly version = VERSION;

  private readonly urls: string[];
  private readonly token: string;
  /** Where each sandbox this worker has reached lives: a sandbox never moves between hosts. */
  private readonly where = new Map<string, string>();
  private readonly closing = new AbortController();
  private readonly fence: () => number;
  private readonly timeoutMs: number;
  private readonly exitPollMs: number;
  private readonly lostAfterMs: number;
  private readonly maxExportBytes: number;

  constructor(options: RemoteRuntimeOptions) {
    const urls = typeof options.url === 'string' ? [options.url] : [...options.url];
    if (urls.length === 0) throw new Error('RemoteRuntime needs at least one sandbox host');
    this.urls = urls.map((url) => url.replace(/\/+$/, ''));
    this.token = options.token;
    this.fence = options.fence ?? (() => currentFence() ?? 1);
    this.timeoutMs = options.timeoutMs ?? 30_000;
    this.exitPollMs = options.exitPollMs ?? 25_000;
    this.lostAfterMs = options.lostAfterMs ?? 30_000;
    this.maxExportBytes = options.maxExportBytes ?? 64 * 1024 ** 3;
  }

  canRestore(version: string): boolean {
    return version === VERSION;
  }

  async start(request: StartRequest<RemoteRuntimeSpec>): Promise<RuntimeInstanceInfo> {
    const body = { sandboxId: request.instanceId, sessionId: request.sessionId, spec: sandboxSpec(request.spec) };
    return this.onFirstHost(request.instanceId, async (url) => {
      const response = await this.call(url, 'POST', '/v1/sandboxes', { json: body, fenced: true });
      return this.info(url, read(response, Sandbox));
    });
  }

  /**
   * Takes over a live sandbox of the session (its worker died, or drains): the call's fence becomes the host's floor
   * for it, so the worker that drove it before is refused from now on. Makes nothing: a sandbox its host does not
   * know is RuntimeNotFoundError.
   */
  async takeOver(request: { instanceId: string; sessionId: string }): Promise<RuntimeInstanceInfo> {
    const url = await this.locate(request.instanceId);
    if (!url) throw new RuntimeNotFoundError(request.instanceId);
    try {
      const response = await this.call(url, 'POST', `${this.path(request.instanceId)}/adopt`, {
        fenced: true,
        json: { sessionId: request.sessionId },
      });
      return this.info(url, read(response, Sandbox));
    } catch (error) {
      // Its host is down (a takeover comes after the session's sandbox was given up or its worker lost): gone with it.
      if (error instanceof HostDownError) throw new RuntimeNotFoundError(request.instanceId);
      throw error;
    }
  }

  async restore(request: RestoreRequest<RemoteRuntimeSpec>): Promise<RuntimeInstanceInfo> {
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
    let url: string | undefined;
    try {
      // The stream can be sent once: it goes to the first host that answers at all.
      url = await this.firstAnswering(request.instanceId);
      arm();
      const response = await this.call(url, 'PUT', `${this.path(request.instanceId)}/import`, {
        fenced: true,
        body: Readable.toWeb(watched) as ReadableStream,
        headers: {
          'content-type': TAR_CONTENT_TYPE,
          [HEADERS.exportFormat]: EXPORT_FORMAT,
          [HEADERS.sandbox]: header,
        },
        signal: controller.signal,
      });
      const info = this.info(url, read(response, Sandbox));
      this.where.set(request.instanceId, url);
      return info;
    } catch (error) {
      // A state that failed (a digest mismatch) is the reason, whatever the host or the connection made of it.
      if (isError(stateError)) throw stateError;
      // A host that stalled is one that cannot be reached now, as for any other call.
      if (controller.signal.aborted) {
        const reason = messageOf(controller.signal.reason);
        throw new RuntimeBusyError(`the sandbox host ${url ?? ''} cannot be reached: ${reason}`, { cause: error });
      }
      throw error;
    } finally {
      clearTimeout(timer);
      // Adopted, refused or failed: the stream is released, not left half read.
      state.destroy();
      watched.destroy();
    }
  }

  async capture(instanceId: string): Promise<Readable> {
    const url = await this.known(instanceId);
    const { response } = await this.call(url, 'GET', `${this.path(instanceId)}/export`, { fenced: true, stream: true });
    const format = response.headers.get(HEADERS.exportFormat);
    if (format !== EXPORT_FORMAT || !response.body) {
      await response.body?.cancel();
      throw new RuntimeFailedError(`the sandbox host exported ${format ?? 'no format'}, not ${EXPORT_FORMAT}`);
    }
    const declared = Number(response.headers.get('content-length') ?? NaN);
    if (declared > this.maxExportBytes) {
      await response.body.cancel();
      throw new RuntimeFailedError(`the sandbox host exports ${declared} bytes, over ${this.maxExportBytes}`);
    }
    const body = exportStream(response.body as WebReadableStream<Uint8Array>, {
      idleMs: this.timeoutMs,
      maxBytes: this.maxExportBytes,
      what: `the export of ${instanceId} from ${url}`,
    });
    const state = gathering(PIECE_BYTES);
    // Either end's failure or release reaches the other: a cut export fails the state, a released state the body.
    pipeline(body, state, () => undefined);
    return state;
  }

  async stop(instanceId: string, options: { graceMs?: number } = {}): Promise<ExitInfo> {
    const url = await this.known(instanceId);
    const response = await this.call(url, 'POST', `${this.path(instanceId)}/stop`, {
      fenced: true,
      json: options.graceMs === undefined ? {} : { graceMs: options.graceMs },
      // The host waits out the grace period (the spec's, up to 10 min) before it answers.
      timeoutMs: this.timeoutMs + (options.graceMs ?? 600_000),
    });
    return read(response, Exit);
  }

  /**
   * The worker stops: its waits end, its sandboxes run on (another worker takes them over). A long poll left waiting
   * would keep the worker's process alive.
   */
  stopAll(): Promise<void> {
    this.closing.abort();
    return Promise.resolve();
  }

  async waitForExit(instanceId: string, asked?: AbortSignal): Promise<ExitInfo> {
    const signal = asked ? AbortSignal.any([asked, this.closing.signal]) : this.closing.signal;
    // A host that cannot be reached may be back soon (a restart, a network blip): only one that stays out of reach
    // for lostAfterMs has lost the sandbox as far as the session can tell.
    let outOfReachSince: number | undefined;
    for (;;) {
      signal.throwIfAborted();
      try {
        const url = await this.known(instanceId);
        const response = await this.call(url, 'GET', `${this.path(instanceId)}/exit?timeoutMs=${this.exitPollMs}`, {
          timeoutMs: this.exitPollMs + this.timeoutMs,
          signal,
        });
        outOfReachSince = undefined;
        const answer = read(response, ExitWait);
        if (answer.exited) return answer.exit;
      } catch (error) {
        if (signal.aborted) throw new DOMException('waiting for the runtime instance was aborted', 'AbortError');
        if (!(error instanceof RuntimeBusyError)) throw error;
        outOfReachSince ??= Date.now();
        if (Date.now() - outOfReachSince >= this.lostAfterMs) throw new RuntimeNotFoundError(instanceId);
        await delay(Math.min(1_000, this.lostAfterMs), undefined, { signal }).catch(() => undefined);
      }
    }
  }

  async describe(instanceId: string): Promise<RuntimeInstanceInfo | undefined> {
    const url = await this.locate(instanceId);
    const sandbox = url && (await this.sandbox(url, instanceId));
    return sandbox ? this.info(url, sandbox) : undefined;
  }

  async lastActivity(instanceId: string): Promise<string | undefined> {
    const sandbox = await this.sandbox(await this.known(instanceId), instanceId, true);
    if (!sandbox) throw new RuntimeNotFoundError(instanceId);
    return sandbox.lastActivity;
  }

  async dispose(instanceId: string): Promise<void> {
    const url = await this.locate(instanceId);
    if (!url) return;
    await this.call(url, 'DELETE', this.path(instanceId), { fenced: true });
    this.where.delete(instanceId);
  }

  /**
   * The host of a sandbox: the one it was made on or found on before, else the one of the hosts that knows it. A host
   * that refuses connections is down and its sandboxes with it; one that fails otherwise may hold it, so the answer
   * waits for it (RuntimeBusyError), as it does when no host answers at all. Undefined when no host knows the sandbox.
   */
  private async locate(instanceId: string): Promise<string | undefined> {
    const cached = this.where.get(instanceId);
    if (cached) return cached;
    // With one host there is nowhere else to look: the call itself hears whether it knows the sandbox.
    if (this.urls.length === 1) return this.urls[0];
    const answers = await Promise.allSettled(this.urls.map((url) => this.sandbox(url, instanceId)));
    const found = answers.findIndex((a) => a.status === 'fulfilled' && a.value);
    if (found >= 0) {
      this.where.set(instanceId, this.urls[found]!);
      return this.urls[found];
    }
    const failed = answers.filter((a): a is PromiseRejectedResult => a.status === 'rejected');
    // With no host answering at all, nothing can be told.
    const unsure =
      failed.find((a) => !(a.reason instanceof HostDownError)) ?? (failed.length === answers.length && failed[0]);
    if (unsure) throw unsure.reason;
    return undefined;
  }

  /** The host of a sandbox that must exist: RuntimeNotFoundError when none knows it. */
  private async known(instanceId: string): Promise<string> {
    const url = await this.locate(instanceId);
    if (!url) throw new RuntimeNotFoundError(instanceId);
    return url;
  }

  /**
   * Makes a sandbox on the first host, in the order drawn from its id, that takes it: a host that refused the
   * connection (nothing was sent) or is full is passed over. Any other answer is the call's.
   */
  private async onFirstHost(
    instanceId: string,
    make: (url: string) => Promise<RuntimeInstanceInfo>,
  ): Promise<RuntimeInstanceInfo> {
    let last: unknown;
    for (const url of this.ordered(instanceId)) {
      try {
        const info = await make(url);
        this.where.set(instanceId, url);
        return info;
      } catch (error) {
        if (!(error instanceof HostDownError || error instanceof HostFullError)) throw error;
        last = error;
      }
    }
    throw last;
  }

  /** The hosts in the order a new sandbox tries them: drawn from its id, so a retry tries them in the same order. */
  private ordered(instanceId: string): string[] {
    const rank = (url: string) => createHash('sha256').update(`${url}\n${instanceId}`).digest('hex');
    return this.urls
      .map((url) => ({ url, rank: rank(url) }))
      .sort((a, b) => (a.rank < b.rank ? -1 : 1))
      .map(({ url }) => url);
  }

  /** The first host, in the sandbox's order, that takes a connection (asked its capabilities). */
  private async firstAnswering(instanceId: string): Promise<string> {
    const order = this.ordered(instanceId);
    if (order.length === 1) return order[0]!;
    let last: unknown;
    for (const url of order) {
      try {
        await this.call(url, 'GET', '/v1/capabilities', {});
        return url;
      } catch (error) {
        if (!(error instanceof HostDownError)) throw error;
        last = error;
      }
    }
    throw last;
  }

  private async sandbox(url: string, instanceId: string, activity = false): Promise<Sandbox | undefined> {
    try {
      const response = await this.call(url, 'GET', `${this.path(instanceId)}${activity ? '?activity=true' : ''}`, {});
      return read(response, Sandbox);
    } catch (error) {
      if (error instanceof RuntimeNotFoundError) {
        if (this.where.get(instanceId) === url) this.where.delete(instanceId);
        return undefined;
      }
      throw error;
    }
  }

  private path(instanceId: string): string {
    return `/v1/sandboxes/${encodeURIComponent(instanceId)}`;
  }

  private info(url: string, sandbox: Sandbox): RuntimeInstanceInfo {
    return {
      instanceId: sandbox.sandboxId,
      sessionId: sandbox.sessionId,
      kind: this.kind,
      version: this.version,
      location: `${url}${this.path(sandbox.sandboxId)}`,
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
    url: string,
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
      response = await fetch(`${url}${path}`, {
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
      const what = `the sandbox host ${url} cannot be reached: ${reason}`;
      // Refused: the request never reached the host. Any other failure may have reached it.
      if (!timeout.signal.aborted && refused(error)) throw new HostDownError(what, { cause: error });
      throw new RuntimeBusyError(what, { cause: error });
    } finally {
      clearTimeout(timer);
    }
    if (text === undefined) return { response, text: '' };
    if (!response.ok) throw errorOf(response.status, text, path);
    return { response, text };
  }
}

/**
 * An export's body, read at the consumer's pace: it is pulled only when asked for, so nothing is held beyond the
 * stream's buffer. Every failure is typed, so the store that consumes it publishes nothing and the caller knows
 * whether to try again: a host that sends nothing for `idleMs` while the consumer waits, or whose connection breaks
 * off, is RuntimeBusyError; a body over `maxBytes`, one that is not a tar, or one that ends without the
 * end-of-archive marker (cut short), is RuntimeFailedError.
 */
function exportStream(
  body: WebReadableStream<Uint8Array>,
  { idleMs, maxBytes, what }: { idleMs: number; maxBytes: number; what: string },
): Readable {
  const reader = body.getReader();
  const check = new TarStreamCheck();
  let seen = 0;
  return new Readable({
    read() {
      let timer: NodeJS.Timeout | undefined;
      const stalled = new Promise<never>((_resolve, reject) => {
        timer = setTimeout(() => reject(new RuntimeBusyError(`${what} sent nothing for ${idleMs} ms`)), idleMs);
      });
      void Promise.race([reader.read(), stalled])
        .then(
          (next) => {
            if (next.done) {
              if (check.ended) this.push(null);
              else this.destroy(new RuntimeFailedError(`${what} ended without the end-of-archive marker (cut short)`));
              return;
            }
            const chunk = Buffer.from(next.value.buffer, next.value.byteOffset, next.value.byteLength);
            seen += chunk.length;
            if (seen > maxBytes) return void this.destroy(new RuntimeFailedError(`${what} is over ${maxBytes} bytes`));
            const problem = check.update(chunk);
            if (problem) return void this.destroy(new RuntimeFailedError(`${what} is not a tar/1 archive: ${problem}`));
            this.push(chunk);
          },
          (error: unknown) => {
            const typed =
              error instanceof DurableSessionsError
                ? error
                : new RuntimeBusyError(`${what} broke off: ${messageOf(error)}`, { cause: error });
            this.destroy(typed);
          },
        )
        .finally(() => clearTimeout(timer));
    },
    destroy(error, callback) {
      // Closes the connection: a host still sending stops at once.
      reader.cancel(error ?? undefined).catch(() => undefined);
      callback(error);
    },
  });
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
    case 'CapacityExceeded':
      return new HostFullError(what);
    case 'SandboxBusy':
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

/** A host that refused the connection: nothing was sent to it (retryable, and another host may take the call). */
class HostDownError extends RuntimeBusyError {}

/** A host that holds as many sandboxes as it may (retryable, and another host may take the call). */
class HostFullError extends RuntimeBusyError {}

function refused(error: unknown): boolean {
  const code = (error as { cause?: { code?: unknown } } | undefined)?.cause?.code;
  return code === 'ECONNREFUSED' || code === 'ENOTFOUND' || code === 'EAI_AGAIN';
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

function sandboxSpec({ kind: _kind, files, ...rest }: RemoteRuntimeSpec): SandboxSpec {
  return files === undefined ? rest : { ...rest, files };
}
