import fs from 'node:fs';
import path from 'node:path';
import { SESSION_OPERATIONS, type SessionOperationName } from '../../src/api/archives';
import { CONTROL_NAMES, type ControlName } from '../../src/api/controls';
import { COMMANDS } from '../../src/cli/commands';
import { SessionClient, SessionHandle } from '../../src/client';
import { openApiDocument } from '../../src/gateway/app';

/**
 * Every control of the registry (src/api/controls.ts) on every surface that sends controls: a control added to the
 * registry and missing from one of them fails here, naming the surface.
 */

const PYTHON_CLIENT = path.join(__dirname, '..', '..', 'python', 'durable_sessions', '_client.py');

/** The method names a Python class defines (`def x` or `async def x`), read from the source. */
function pythonMethods(source: string, className: string): string[] {
  const start = source.indexOf(`\nclass ${className}`);
  if (start < 0) throw new Error(`no class ${className} in ${PYTHON_CLIENT}`);
  const rest = source.slice(start + 1);
  const end = rest.slice(1).search(/\n(class |\S)/);
  const body = end < 0 ? rest : rest.slice(0, end + 1);
  return [...body.matchAll(/^ {4}(?:async )?def (\w+)\(/gm)].map((m) => m[1]!);
}

/** A control's method name in Python: the same word (snake_case, were it ever two). */
function pythonName(name: ControlName): string {
  return name.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
}

function missing(have: readonly string[], want: readonly string[] = CONTROL_NAMES): string[] {
  return want.filter((name) => !have.includes(name));
}

test('SessionHandle has a method for every control', () => {
  const methods = Object.getOwnPropertyNames(SessionHandle.prototype);
  expect(missing(methods)).toEqual([]);
});

test("the gateway routes every control, its operationId the control's wire name", () => {
  const doc = openApiDocument() as { paths: Record<string, { post?: { operationId?: string } }> };
  const routes = Object.fromEntries(
    CONTROL_NAMES.map((name) => [name, doc.paths[`/v1/sessions/{id}/${name}`]?.post?.operationId ?? null]),
  );
  expect(routes).toEqual(Object.fromEntries(CONTROL_NAMES.map((name) => [name, name])));
});

test('the CLI has a command for every control', () => {
  expect(missing(Object.keys(COMMANDS))).toEqual([]);
});

test.each(['Session', 'AsyncSession'])('the Python client’s %s has a method for every control', (className) => {
  const methods = pythonMethods(fs.readFileSync(PYTHON_CLIENT, 'utf8'), className);
  expect(methods.length).toBeGreaterThan(0);
  expect(missing(methods, CONTROL_NAMES.map(pythonName))).toEqual([]);
});

/** The client operations beside the controls (src/api/archives.ts): on the same surfaces, under their own names. */
const OPERATIONS = Object.keys(SESSION_OPERATIONS) as SessionOperationName[];

test('every client operation is on SessionClient, the gateway, the CLI and both Python clients', () => {
  expect(missing(Object.getOwnPropertyNames(SessionClient.prototype), OPERATIONS)).toEqual([]);
  const doc = openApiDocument() as { paths: Record<string, { post?: { operationId?: string } }> };
  const operationIds = Object.values(doc.paths).flatMap((p) => (p.post?.operationId ? [p.post.operationId] : []));
  // Named as the operation on the session: `export` → exportSession (generated clients' method names).
  expect(
    missing(
      operationIds,
      OPERATIONS.map((name) => `${name}Session`),
    ),
  ).toEqual([]);
  expect(missing(Object.keys(COMMANDS), OPERATIONS)).toEqual([]);
  const source = fs.readFileSync(PYTHON_CLIENT, 'utf8');
  // `import` is a Python keyword: the methods are export_session and import_session.
  for (const className of ['Client', 'AsyncClient']) {
    expect(
      missing(
        pythonMethods(source, className),
        OPERATIONS.map((name) => `${name}_session`),
      ),
    ).toEqual([]);
  }
});
