import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { RunningGateway } from '../../src/gateway';
import { SessionClient } from '../../src/client';
import { startTestGateway } from '../helpers/gateway';
import { startTestSystem, type TestSystem } from '../helpers/temporal';

/**
 * Schemathesis (installed into .tools/venv by `npm run setup`, pinned there) fuzzes the OpenAPI document the real
 * gateway serves, in front of real workers and the run's dev server: every response must be documented (status,
 * content type, headers, body schema) and none may be a server error (5xx). Requests go to loopback only; the
 * sessions it starts are real (memory, conversation, and workspaces running whatever command it made up).
 */
const ROOT = path.join(__dirname, '..', '..');
const SCHEMATHESIS = path.join(ROOT, '.tools', 'venv', 'bin', 'schemathesis');

let sys: TestSystem;
let gateway: RunningGateway;
let work: string;
let failed = false;

beforeAll(async () => {
  if (!fs.existsSync(SCHEMATHESIS)) throw new Error(`${SCHEMATHESIS} is missing: run npm run setup`);
  sys = await startTestSystem();
  // Its own directory: Schemathesis and Hypothesis keep caches in the working directory, never in the repo.
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'ds-schemathesis-'));
}, 60_000);
afterAll(async () => {
  await gateway?.close();
  await sys?.close();
  // A failed run's JUnit report stays for whoever looks into it.
  if (work && !failed) fs.rmSync(work, { recursive: true, force: true });
});

test('Schemathesis finds no undocumented response in the live gateway', async () => {
  // With the store, as DS_GATEWAY_ARCHIVES=on has it: export and import run for real (an archive it made up is a
  // typed refusal), not the 501 of a gateway set up without them.
  const sessions = new SessionClient({
    client: sys.client,
    taskQueue: sys.taskQueue,
    timeline: sys.store,
    store: sys.store,
  });
  const opened = await startTestGateway(sys, [{ id: 'admin' }], { sessions });
  gateway = opened.gateway;
  const key = opened.keys.admin!;
  const args = [
    'run',
    `${gateway.url}/v1/openapi.json`,
    '--header',
    `Authorization: Bearer ${key}`,
    '--checks',
    [
      'not_a_server_error',
      'status_code_conformance',
      'content_type_conformance',
      'response_headers_conformance',
      'response_schema_conformance',
    ].join(','),
    // Stateful chains controls on the sessions that POST /v1/sessions starts (links inferred from the document).
    '--phases',
    'examples,coverage,fuzzing,stateful',
    // Bounded by the number of cases, not --max-time: with a time budget the phases repeat until it is spent.
    '--max-examples',
    '15',
    '--seed',
    '20261201',
    '--workers',
    '1',
    // Under the gateway's 100 requests a second per key: a 429 is documented but checks nothing else, and when it
    // comes depends on timing, not on the seed.
    '--rate-limit',
    '80/s',
    // An event stream of a running session does not end, so it cannot be read as one response: the gateway tests
    // check its events. A request of anything else that takes this long is an error (a loaded CI machine is slow).
    '--exclude-path',
    '/v1/sessions/{id}/events',
    '--request-timeout',
    '20',
    // The examples found are not stored between runs, so that a run depends on the seed alone.
    '--generation-database',
    'none',
    '--no-color',
    '--report',
    'junit',
    '--report-dir',
    path.join(work, 'report'),
  ];
  const started = Date.now();
  // A hard stop well past the usual minute, so that a hung run fails with what it printed so far.
  const run = await new Promise<{ ok: boolean; how: string; output: string }>((resolve) => {
    execFile(
      SCHEMATHESIS,
      args,
      { cwd: work, timeout: 300_000, maxBuffer: 64 * 1024 * 1024 },
      (error, stdout, stderr) =>
        resolve({
          ok: !error,
          how: error?.killed ? `was stopped (${error.signal})` : `exited ${String(error?.code ?? 0)}`,
          output: stdout + stderr,
        }),
    );
  });
  const seconds = Math.round((Date.now() - started) / 1000);
  if (!run.ok) {
    failed = true;
    const report = path.join(work, 'report');
    throw new Error(`schemathesis ${run.how} after ${seconds} s (JUnit in ${report}):\n${failuresOf(run.output)}`);
  }
  // Every operation of the document was reached.
  const doc = (await (await fetch(`${gateway.url}/v1/openapi.json`)).json()) as { paths: Record<string, object> };
  const operations = Object.values(doc.paths).reduce((n, methods) => n + Object.keys(methods).length, 0);
  const selected = operations - 1; // all but the event stream
  expect(run.output).toMatch(new RegExp(`Selected: ${selected}/${operations}\\s+Tested: ${selected}\\b`));
}, 360_000);

/** The report from its FAILURES section on (what failed, how to reproduce it), or all of it when it has none. */
function failuresOf(output: string): string {
  const at = output.search(/^=+ (FAILURES|ERRORS) =+$/m);
  return at >= 0 ? output.slice(at) : output;
}
