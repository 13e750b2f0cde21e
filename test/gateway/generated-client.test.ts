import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import type { RunningGateway } from '../../src/gateway';
import { startTestGateway } from '../helpers/gateway';
import { startTestSystem, type TestSystem } from '../helpers/temporal';

/**
 * A client generated from the document the gateway serves, by a widely used generator (openapi-python-client,
 * installed by scripts/install-openapi-client.sh), drives a session through start, checkpoint, pause, resume and a
 * timeline read: the document is one that generators turn into a working client, not only one that validates.
 */
const run = promisify(execFile);
const ROOT = path.resolve(__dirname, '../..');
const VENV = path.join(ROOT, '.tools/openapi-venv/bin');

let sys: TestSystem;
let gateway: RunningGateway;
let key: string;

beforeAll(async () => {
  if (!fs.existsSync(path.join(VENV, 'openapi-python-client'))) {
    throw new Error('the generator is missing: run bash scripts/install-openapi-client.sh (npm test does)');
  }
  sys = await startTestSystem();
  const started = await startTestGateway(sys);
  gateway = started.gateway;
  key = started.keys.admin!;
}, 60_000);
afterAll(async () => {
  await gateway?.close();
  await sys?.close();
});

const FLOW = `
import json, sys
from ds_client import AuthenticatedClient
from ds_client.api.default import start_session, checkpoint, pause, resume, get_timeline, get_session
from ds_client.models import StartSessionBody, CheckpointBody, PauseBody, ResumeBody, TimelineEntryCheckpoint, Problem

url, key, session_id = sys.argv[1:4]
client = AuthenticatedClient(base_url=url, token=key, raise_on_unexpected_status=True)
out = {}
started = start_session.sync(client=client, body=StartSessionBody.from_dict(
    {"sessionId": session_id, "runtime": {"kind": "memory", "initialState": "v1"}}))
assert not isinstance(started, Problem), started
out["started"] = started.phase
ref = checkpoint.sync(session_id, client=client, body=CheckpointBody.from_dict({"label": "first"}), idempotency_key="k-1")
assert not isinstance(ref, Problem), ref
out["checkpoint"] = {"index": ref.index, "label": ref.label, "createdAt": ref.created_at.isoformat()}
paused = pause.sync(session_id, client=client, body=PauseBody.from_dict({"reason": "generated"}))
assert not isinstance(paused, Problem), paused
out["paused"] = get_session.sync(session_id, client=client).phase
resumed = resume.sync(session_id, client=client, body=ResumeBody.from_dict({}))
assert not isinstance(resumed, Problem), resumed
out["resumed"] = get_session.sync(session_id, client=client).phase
page = get_timeline.sync(session_id, client=client, all_=True)
assert not isinstance(page, Problem), page
out["kinds"] = [type(e).__name__ for e in page.entries]
first = next(e for e in page.entries if isinstance(e, TimelineEntryCheckpoint))
out["firstAt"] = first.at.isoformat() if hasattr(first.at, "isoformat") else first.at
again = checkpoint.sync(session_id, client=client, body=CheckpointBody.from_dict({"label": "other"}), idempotency_key="k-1")
out["reused"] = again.code if isinstance(again, Problem) else None
print(json.dumps(out))
`;

test('a client generated from the served document runs start, checkpoint, pause, resume and the timeline', async () => {
  const dir = fs.mkdtempSync(path.join(sys.dir, 'generated-'));
  const doc = await (await fetch(`${gateway.url}/v1/openapi.json`)).text();
  fs.writeFileSync(path.join(dir, 'openapi.json'), doc);
  // No post-generation hooks: the formatter they call is not the generator's to need.
  fs.writeFileSync(path.join(dir, 'config.yaml'), 'post_hooks: []\n');
  const generated = await run(
    path.join(VENV, 'openapi-python-client'),
    ['generate', '--path', 'openapi.json', '--meta', 'none', '--output-path', 'ds_client', '--config', 'config.yaml'],
    { cwd: dir },
  );
  // Every schema became a model: none dropped as a duplicate, none skipped.
  expect(`${generated.stdout}${generated.stderr}`).not.toMatch(/Warning|Unable to process|duplicate/i);
  fs.writeFileSync(path.join(dir, 'flow.py'), FLOW);
  const sessionId = `generated-${path
    .basename(dir)
    .slice(-6)
    .toLowerCase()
    .replace(/[^a-z0-9]/g, 'x')}`;
  const { stdout } = await run(path.join(VENV, 'python'), ['flow.py', gateway.url, key, sessionId], { cwd: dir });
  const out = JSON.parse(stdout) as Record<string, unknown>;
  expect(out).toMatchObject({
    started: 'running',
    checkpoint: { index: 1, label: 'first' },
    paused: 'paused',
    resumed: 'running',
    reused: 'IdempotencyKeyReused',
  });
  expect(out.kinds).toEqual(expect.arrayContaining(['TimelineEntryCheckpoint', 'TimelineEntryRestored']));
  // Timestamps are date-times to the generated client: parsed, not left as strings.
  expect(out.firstAt).toMatch(/^\d{4}-\d\d-\d\dT/);
}, 120_000);
