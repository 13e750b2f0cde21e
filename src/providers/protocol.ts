import { z } from 'zod';
import { ERROR_CODES, type ErrorCode } from '../domain/error-codes';
import { WorkspaceRuntimeSpec } from '../domain/schemas';
import { strictObject } from '../domain/strict';

/*
 * The sandbox provider protocol, version 1 (docs/providers.md, docs/providers.openapi.json): the wire names, bodies
 * and error codes that a sandbox host and its clients share. Nothing else passes between them.
 */

export const PROTOCOL_VERSION = 1;
/** The export format every provider offers: a tar of the sandbox's directory, as the workspace runtime captures it. */
export const EXPORT_FORMAT = 'tar/1';
export const TAR_CONTENT_TYPE = 'application/x-tar';

export const HEADERS = {
  /** The session's generation; every mutating call carries it (and export, which freezes the sandbox). */
  fence: 'DS-Fence',
  /** The format of an export or import body. */
  exportFormat: 'DS-Export-Format',
  /** Of an import: base64url of the JSON {@link ImportSandbox} (the body is the tar itself). */
  sandbox: 'DS-Sandbox',
} as const;

/** What the host's ids (sandbox and session) must be: one path segment of a plain alphabet, never `..`. */
export const SandboxId = z
  .string()
  .max(200)
  .regex(/^[A-Za-z0-9][A-Za-z0-9._-]*(@[A-Za-z0-9][A-Za-z0-9_-]*)?$/, 'ids are [A-Za-z0-9._-], starting alphanumeric')
  .refine((id) => !id.includes('..'), 'ids must not contain ".."');

/** A sandbox's spec: the workspace runtime's, without its kind (a host runs one kind of sandbox). */
export const SandboxSpec = WorkspaceRuntimeSpec.omit({ kind: true });
export type SandboxSpec = z.infer<typeof SandboxSpec>;

export const ForkOrigin = strictObject({
  sessionId: z.string().min(1).max(200),
  checkpointId: z.string().min(1).max(200),
});

/** `POST /v1/sandboxes`. */
export const CreateSandbox = strictObject({ sandboxId: SandboxId, sessionId: SandboxId, spec: SandboxSpec });
export type CreateSandbox = z.infer<typeof CreateSandbox>;

/** The `DS-Sandbox` header of `PUT /v1/sandboxes/{id}/import`: whose sandbox and what it runs (seed files unused). */
export const ImportSandbox = strictObject({
  sessionId: SandboxId,
  spec: SandboxSpec,
  forkedFrom: ForkOrigin.optional(),
});
export type ImportSandbox = z.infer<typeof ImportSandbox>;

/** `POST /v1/sandboxes/{id}/stop`. */
export const StopSandbox = strictObject({ graceMs: z.number().int().min(0).max(600_000).optional() });

export const Exit = strictObject({
  exitCode: z.number().int().nullable(),
  signal: z.string().nullable(),
  requested: z.boolean(),
});
export type Exit = z.infer<typeof Exit>;

/** `GET /v1/sandboxes/{id}` (and the answer of create and import). */
export const Sandbox = z.object({
  sandboxId: z.string(),
  sessionId: z.string(),
  running: z.boolean(),
  pid: z.number().int().optional(),
  startedAt: z.string(),
  /** Asked for with `?activity=true` (it may walk the sandbox's files): its newest change or output. */
  lastActivity: z.string().optional(),
  /** With `?activity=true`: what the sandbox uses, where the provider knows it (the reference host: disk only). */
  resources: z.object({ diskBytes: z.number().int().optional(), memoryBytes: z.number().int().optional() }).optional(),
});
export type Sandbox = z.infer<typeof Sandbox>;

/** `GET /v1/sandboxes/{id}/exit`: the exit, or `exited: false` when the long poll's timeout came first. */
export const ExitWait = z.union([
  z.object({ exited: z.literal(true), exit: Exit }),
  z.object({ exited: z.literal(false) }),
]);

export const Capabilities = z.object({
  protocolVersion: z.number().int(),
  exportFormats: z.array(z.string()),
  captures: z.object({ filesystem: z.boolean(), processMemory: z.boolean() }),
  runsWhileExporting: z.boolean(),
  limits: z.object({
    maxSandboxes: z.number().int(),
    maxExportBytes: z.number().int(),
    maxRequestBytes: z.number().int(),
    maxHeaderBytes: z.number().int(),
    maxExitWaitMs: z.number().int(),
  }),
});
export type Capabilities = z.infer<typeof Capabilities>;

/**
 * The closed set of error codes a host answers with, their HTTP status, whether a retry can help, and the session's
 * error code each one means for a session (src/domain/error-codes.ts). Wire names: never rename one.
 */
export const PROVIDER_ERRORS = {
  /** No bearer token, or not the host's. */
  Unauthorized: { status: 401, retryable: false, session: ERROR_CODES.RuntimeFailed },
  /** A body, header, id or parameter failed validation; `details` carries the issues. Nothing was changed. */
  InvalidInput: { status: 400, retryable: false, session: ERROR_CODES.InvalidInput },
  /** A body bigger than the host's limits (`maxRequestBytes`, `maxExportBytes`). Nothing was changed. */
  TooLarge: { status: 413, retryable: false, session: ERROR_CODES.InvalidInput },
  /** The host does not know the sandbox (never made, deleted, or the host lost it). */
  SandboxNotFound: { status: 404, retryable: false, session: ERROR_CODES.RuntimeLost },
  /** The sandbox id is live for another session. */
  SandboxConflict: { status: 409, retryable: false, session: ERROR_CODES.RuntimeFailed },
  /** The fencing token is lower than one the host has seen for the sandbox or its session. Nothing was changed. */
  StaleFence: { status: 409, retryable: false, session: ERROR_CODES.Conflict },
  /** The sandbox is still being made by another call: retry once it has settled. */
  SandboxBusy: { status: 409, retryable: true, session: ERROR_CODES.Busy },
  /** The host holds as many sandboxes as it may (`maxSandboxes`; a stopped one counts until it is deleted). */
  CapacityExceeded: { status: 503, retryable: true, session: ERROR_CODES.Busy },
  /** An import's stream is not a state this host can restore (truncated, not a tar, an entry outside the sandbox). */
  ImportRejected: { status: 422, retryable: false, session: ERROR_CODES.RuntimeFailed },
  /** The sandbox could not be made, exported or stopped (the command failed to start, exited at once, …). */
  RuntimeFailed: { status: 422, retryable: false, session: ERROR_CODES.RuntimeFailed },
  /** Anything else went wrong on the host; a retry may help. */
  Internal: { status: 500, retryable: true, session: ERROR_CODES.RuntimeFailed },
} as const satisfies Record<string, { status: number; retryable: boolean; session: ErrorCode | 'Busy' }>;

export type ProviderErrorCode = keyof typeof PROVIDER_ERRORS;

export function isProviderErrorCode(value: unknown): value is ProviderErrorCode {
  return typeof value === 'string' && Object.hasOwn(PROVIDER_ERRORS, value);
}

/** Every error answer's body. */
export const ErrorBody = z.object({
  error: z.object({
    code: z.string(),
    message: z.string(),
    retryable: z.boolean(),
    details: z.unknown().optional(),
  }),
});
export type ErrorBody = z.infer<typeof ErrorBody>;

export function encodeSandboxHeader(value: ImportSandbox): string {
  return Buffer.from(JSON.stringify(value)).toString('base64url');
}

/** The header's JSON, or undefined when it is not base64url of JSON (its schema is checked by the caller). */
export function decodeSandboxHeader(value: string): unknown {
  try {
    return JSON.parse(Buffer.from(value, 'base64url').toString('utf8'));
  } catch {
    return undefined;
  }
}
