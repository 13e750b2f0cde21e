import { z } from 'zod';
import {
  AdoptSandbox,
  Capabilities,
  CreateSandbox,
  ErrorBody,
  EXPORT_FORMAT,
  Exit,
  ExitWait,
  HEADERS,
  ImportSandbox,
  PROTOCOL_VERSION,
  PROVIDER_ERRORS,
  Sandbox,
  StopSandbox,
  TAR_CONTENT_TYPE,
  type ProviderErrorCode,
} from './protocol';

type Operation = Record<string, unknown>;

const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` });
const json = (schema: unknown) => ({ 'application/json': { schema } });
const ok = (description: string, schema: unknown) => ({ description, content: json(schema) });

/** Error answers of an operation, one entry per status, naming the codes it may carry. */
/** What a call that makes a sandbox (a create, an import) may be refused with. */
const MAKING_ERRORS: ProviderErrorCode[] = [
  'InvalidInput',
  'TooLarge',
  'SandboxConflict',
  'StaleFence',
  'SandboxBusy',
  'CapacityExceeded',
  'RuntimeFailed',
];

function errors(...codes: ProviderErrorCode[]): Record<string, unknown> {
  const byStatus = new Map<number, ProviderErrorCode[]>();
  for (const code of ['Unauthorized', 'Internal', ...codes] as const) {
    const status = PROVIDER_ERRORS[code].status;
    byStatus.set(status, [...(byStatus.get(status) ?? []), code]);
  }
  return Object.fromEntries(
    [...byStatus].map(([status, list]) => [
      String(status),
      { description: list.join(', '), content: json(ref('Error')) },
    ]),
  );
}

const fenced = [{ $ref: '#/components/parameters/Fence' }];
const sandboxId = { $ref: '#/components/parameters/SandboxId' };

/**
 * The provider protocol as OpenAPI 3.1 (`docs/providers.openapi.json`, written by `npm run openapi:providers`; a test
 * checks that it is current and that the reference host serves exactly its routes).
 */
export function providerOpenApiDocument(): Record<string, unknown> {
  const paths: Record<string, Record<string, Operation>> = {
    '/v1/capabilities': {
      get: {
        operationId: 'getCapabilities',
        summary: 'What the provider can capture, whether a sandbox runs while it is exported, and its limits',
        responses: { '200': ok('The capabilities', ref('Capabilities')), ...errors() },
      },
    },
    '/v1/sandboxes': {
      post: {
        operationId: 'createSandbox',
        summary: 'Create a sandbox from a spec; the same id of the same session answers with the sandbox already there',
        parameters: fenced,
        requestBody: { required: true, content: json(ref('CreateSandbox')) },
        responses: {
          '200': ok('The sandbox, running (or, when its command exited with 0 at once, done)', ref('Sandbox')),
          ...errors(...MAKING_ERRORS),
        },
      },
    },
    '/v1/sandboxes/{id}': {
      get: {
        operationId: 'describeSandbox',
        summary: 'The sandbox as the host knows it now',
        parameters: [
          sandboxId,
          { name: 'activity', in: 'query', required: false, schema: { type: 'string', enum: ['true', 'false'] } },
        ],
        responses: { '200': ok('The sandbox', ref('Sandbox')), ...errors('InvalidInput', 'SandboxNotFound') },
      },
      delete: {
        operationId: 'deleteSandbox',
        summary: 'Stop the sandbox if it runs and remove it; an id the host does not know is deleted already',
        parameters: [sandboxId, ...fenced],
        responses: { '204': { description: 'Gone' }, ...errors('InvalidInput', 'StaleFence', 'SandboxBusy') },
      },
    },
    '/v1/sandboxes/{id}/export': {
      get: {
        operationId: 'exportSandbox',
        summary: 'The sandbox state as a stream, one point in time (frozen while exported unless runsWhileExporting)',
        parameters: [sandboxId, ...fenced],
        responses: {
          '200': {
            description: `The state; a stream that ends early or fails is no state (format ${EXPORT_FORMAT})`,
            headers: { [HEADERS.exportFormat]: { schema: { type: 'string', const: EXPORT_FORMAT } } },
            content: { [TAR_CONTENT_TYPE]: { schema: { type: 'string', contentMediaType: TAR_CONTENT_TYPE } } },
          },
          ...errors('InvalidInput', 'SandboxNotFound', 'StaleFence', 'RuntimeFailed'),
        },
      },
    },
    '/v1/sandboxes/{id}/import': {
      put: {
        operationId: 'importSandbox',
        summary: 'A new sandbox started from an exported state; a stream that is truncated or invalid leaves nothing',
        parameters: [
          sandboxId,
          ...fenced,
          {
            name: HEADERS.sandbox,
            in: 'header',
            required: true,
            description: 'base64url of the JSON ImportSandbox: whose sandbox and what it runs',
            schema: { type: 'string', contentEncoding: 'base64url', contentMediaType: 'application/json' },
          },
          {
            name: HEADERS.exportFormat,
            in: 'header',
            required: true,
            schema: { type: 'string', const: EXPORT_FORMAT },
          },
        ],
        requestBody: {
          required: true,
          content: { [TAR_CONTENT_TYPE]: { schema: { type: 'string', contentMediaType: TAR_CONTENT_TYPE } } },
        },
        responses: {
          '200': ok('The sandbox, running', ref('Sandbox')),
          ...errors(...MAKING_ERRORS, 'ImportRejected'),
        },
      },
    },
    '/v1/sandboxes/{id}/adopt': {
      post: {
        operationId: 'adoptSandbox',
        summary: 'Take over a live sandbox of the session: its fence becomes the floor, the caller before is refused',
        parameters: [sandboxId, ...fenced],
        requestBody: { required: true, content: json(ref('AdoptSandbox')) },
        responses: {
          '200': ok('The sandbox as it is (running, or ended while no worker drove it)', ref('Sandbox')),
          ...errors('InvalidInput', 'SandboxNotFound', 'SandboxConflict', 'StaleFence'),
        },
      },
    },
    '/v1/sandboxes/{id}/stop': {
      post: {
        operationId: 'stopSandbox',
        summary: 'Stop the sandbox: SIGTERM, then SIGKILL after the grace period; answers with how it ended',
        parameters: [sandboxId, ...fenced],
        requestBody: { required: false, content: json(ref('StopSandbox')) },
        responses: {
          '200': ok('How it ended (the same answer again for a sandbox that had ended)', ref('Exit')),
          ...errors('InvalidInput', 'SandboxNotFound', 'StaleFence', 'RuntimeFailed'),
        },
      },
    },
    '/v1/sandboxes/{id}/exit': {
      get: {
        operationId: 'waitForExit',
        summary: 'Long poll: answers once the sandbox has ended, or with exited: false when timeoutMs passes first',
        parameters: [
          sandboxId,
          { name: 'timeoutMs', in: 'query', required: false, schema: { type: 'integer', minimum: 0 } },
        ],
        responses: { '200': ok('The exit, or not yet', ref('ExitWait')), ...errors('InvalidInput', 'SandboxNotFound') },
      },
    },
  };
  const schemas = {
    Capabilities,
    CreateSandbox,
    ImportSandbox,
    AdoptSandbox,
    Sandbox,
    StopSandbox,
    Exit,
    ExitWait,
    Error: ErrorBody,
  };
  return {
    openapi: '3.1.0',
    info: {
      title: 'durable-sessions sandbox provider protocol',
      version: `${PROTOCOL_VERSION}.0.0`,
      description: 'What a sandbox host serves so that durable-sessions can run sessions on it (docs/providers.md).',
    },
    'x-protocol-version': PROTOCOL_VERSION,
    security: [{ bearer: [] }],
    paths,
    components: {
      securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } },
      parameters: {
        Fence: {
          name: HEADERS.fence,
          in: 'header',
          required: true,
          description: 'The session generation; a value below one the host has seen is refused (StaleFence)',
          schema: { type: 'integer', minimum: 1 },
        },
        SandboxId: { name: 'id', in: 'path', required: true, schema: jsonSchema(CreateSandbox.shape.sandboxId) },
      },
      schemas: Object.fromEntries(Object.entries(schemas).map(([name, schema]) => [name, jsonSchema(schema)])),
    },
  };
}

function jsonSchema(schema: z.ZodType): Record<string, unknown> {
  const document: Record<string, unknown> = { ...z.toJSONSchema(schema, { io: 'input' }) };
  delete document.$schema;
  return document;
}
