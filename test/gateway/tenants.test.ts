import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import type { SessionStatus, TimelineEntry } from '../../src/api';
import { sessionWorkflowId } from '../../src/api/messages';
import type { CheckpointRef } from '../../src/domain/schemas';
import type { TimelinePage } from '../../src/client/session-client';
import { SessionNotFoundError } from '../../src/client';
import type { Problem, RunningGateway } from '../../src/gateway';
import { startTestGateway } from '../helpers/gateway';
import { SnapshotError, TENANTS_DIR } from '../../src/snapshots';
import { startTestSystem, type TestSystem } from '../helpers/temporal';

/**
 * Tenants over the real gateway, workers and dev server: a key reaches its own tenant's sessions only. Another
 * tenant's session is not there at all (404, never 403: nothing tells it exists) on every route, and nothing changes.
 */
let sys: TestSystem;
let gateway: RunningGateway;
const TENANTS = ['acme', 'globex', 'default'] as const;
let keys: Record<string, string>;

beforeAll(async () => {
  sys = await startTestSystem();
  const started = await startTestGateway(
    sys,
    TENANTS.map((tenant) => ({ id: tenant, tenant })),
  );
  gateway = started.gateway;
  keys = started.keys;
}, 60_000);
afterAll(async () => {
  await gateway?.close();
  await sys?.close();
});

const id = (name: string) => `${name}-${crypto.randomUUID().slice(0, 8)}`;

async function call<T = Record<string, unknown>>(
  tenant: (typeof TENANTS)[number],
  method: string,
  route: string,
  body?: unknown,
): Promise<{ status: number; json: T & Partial<Problem> }> {
  const res = await fetch(`${gateway.url}${route}`, {
    method,
    headers: {
      authorization: `Bearer ${keys[tenant]}`,
      ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, json: (text ? JSON.parse(text) : null) as T & Partial<Problem> };
}

async function timeline(tenant: (typeof TENANTS)[number], sessionId: string): Promise<TimelineEntry[]> {
  const page = await call<TimelinePage>(tenant, 'GET', `/v1/sessions/${sessionId}/checkpoints?all=true`);
  expect(page.status).toBe(200);
  return page.json.entries;
}

test('two tenants use the same session id: two sessions, each restoring its own state, each listed once', async () => {
  const sessionId = id('same');
  const states = { acme: 'a'.repeat(111), globex: 'g'.repeat(222) };
  for (const tenant of ['acme', 'globex'] as const) {
    const started = await call<SessionStatus>(tenant, 'POST', '/v1/sessions', {
      sessionId,
      runtime: { kind: 'memory', initialState: states[tenant] },
    });
    expect(started).toMatchObject({ status: 201, json: { sessionId, tenant, phase: 'running' } });
  }
  // The default tenant's key does not see either; the id is free there.
  expect((await call('default', 'GET', `/v1/sessions/${sessionId}`)).status).toBe(404);

  for (const tenant of ['acme', 'globex'] as const) {
    expect((await call(tenant, 'POST', `/v1/sessions/${sessionId}/pause`, {})).status).toBe(200);
    expect((await call(tenant, 'POST', `/v1/sessions/${sessionId}/resume`, {})).status).toBe(200);
    const after = await call<CheckpointRef>(tenant, 'POST', `/v1/sessions/${sessionId}/checkpoint`, {});
    // Each restored its own state: the sizes of what the two started with.
    expect(after).toMatchObject({ status: 200, json: { sessionId, size: states[tenant].length } });
  }

  // Workflow ids by the documented scheme; the store keeps each tenant's objects in its own folder.
  const wf = await sys.client.workflow.getHandle(sessionWorkflowId(sessionId, 'acme')).describe();
  expect(wf.workflowId).toBe(`session-${sessionId}@acme`);
  expect(wf.searchAttributes).toMatchObject({ SessionTenant: ['acme'] });
  expect(await wf.staticSummary()).toBe(`memory · ${sessionId} · tenant acme`);
  for (const tenant of ['acme', 'globex']) {
    const dir = path.join(sys.store.root, TENANTS_DIR, tenant, sessionId);
    expect(fs.readdirSync(dir).filter((n) => n.endsWith('.manifest'))).toHaveLength(2); // the pause's and the checkpoint's
  }
  expect(fs.existsSync(path.join(sys.store.root, sessionId))).toBe(false);

  // Listing: each tenant sees its own session and no other's.
  for (const tenant of ['acme', 'globex', 'default'] as const) {
    const listed = await call<{ sessions: { sessionId: string }[] }>(tenant, 'GET', '/v1/sessions?limit=1000');
    expect(listed.status).toBe(200);
    const ids = listed.json.sessions.map((s) => s.sessionId).filter((s) => s === sessionId);
    expect(ids).toHaveLength(tenant === 'default' ? 0 : 1);
  }
  const fork = await call<{ forks: { sessionId: string }[] }>('acme', 'POST', `/v1/sessions/${sessionId}/fork`, {
    paused: true,
  });
  const forkId = fork.json.forks[0]!.sessionId;
  const forked = await sys.client.workflow.getHandle(sessionWorkflowId(forkId, 'acme')).describe();
  expect(await forked.staticSummary()).toBe(`memory · ${forkId} · tenant acme · fork of ${sessionId}`);
});

test('every route refuses another tenant’s session with 404, and changes nothing', async () => {
  const sessionId = id('own');
  const started = await call<SessionStatus>('acme', 'POST', '/v1/sessions', {
    sessionId,
    runtime: { kind: 'conversation' },
  });
  expect(started.status).toBe(201);
  await call('acme', 'POST', `/v1/sessions/${sessionId}/append`, { messages: [{ role: 'user', content: 'hi' }] });
  expect((await call('acme', 'POST', `/v1/sessions/${sessionId}/checkpoint`, {})).status).toBe(200);
  const before = await timeline('acme', sessionId);
  const statusBefore = (await call<SessionStatus>('acme', 'GET', `/v1/sessions/${sessionId}`)).json;

  const base = `/v1/sessions/${sessionId}`;
  const attempts: [string, string, unknown?][] = [
    ['GET', base],
    ['GET', `${base}/checkpoints`],
    ['GET', `${base}/checkpoints/2`],
    ['GET', `${base}/events`],
    ['POST', `${base}/checkpoint`, {}],
    ['POST', `${base}/pause`, {}],
    ['POST', `${base}/resume`, {}],
    ['POST', `${base}/stop`, {}],
    ['POST', `${base}/verify`, {}],
    ['POST', `${base}/rewind`, { to: 2 }],
    ['POST', `${base}/fork`, { newSessionId: `${sessionId}-stolen` }],
    ['POST', `${base}/branch`, {}],
    ['POST', `${base}/configure`, { policies: { checkpointEveryMs: 600_000 } }],
    ['POST', `${base}/append`, { messages: [{ role: 'user', content: 'injected' }] }],
    ['POST', `${base}/regenerate`, {}],
    ['POST', `${base}/touch`],
  ];
  for (const tenant of ['globex', 'default'] as const) {
    for (const [method, route, body] of attempts) {
      const res = await call(tenant, method, route, body);
      expect({ route, status: res.status, code: res.json.code }).toEqual({
        route,
        status: 404,
        code: 'SessionNotFound',
      });
      // Nothing of the owner's tenant shows through, not even in the workflow id.
      expect(JSON.stringify(res.json)).not.toMatch(/acme|@/);
    }
    // A start of the same id in another tenant is that tenant's own session, not a way in: it is not tested here.
  }

  // Nothing changed: the same timeline, phase and head; no fork appeared in either tenant.
  expect(await timeline('acme', sessionId)).toEqual(before);
  const statusAfter = (await call<SessionStatus>('acme', 'GET', `/v1/sessions/${sessionId}`)).json;
  expect(statusAfter).toMatchObject({ phase: 'running', head: statusBefore.head, messageCount: 1 });
  for (const tenant of ['acme', 'globex', 'default'] as const) {
    expect((await call(tenant, 'GET', `${base}-stolen`)).status).toBe(404);
  }
});

test('a body cannot name another tenant, and a client of one tenant cannot reach another’s session', async () => {
  const sessionId = id('named');
  const res = await call('globex', 'POST', '/v1/sessions', {
    sessionId,
    tenant: 'acme',
    runtime: { kind: 'memory' },
  });
  expect(res).toMatchObject({ status: 400, json: { code: 'InvalidInput' } });
  expect(res.json.detail).toContain('tenant');
  expect((await call('acme', 'GET', `/v1/sessions/${sessionId}`)).status).toBe(404);
  expect((await call('globex', 'GET', `/v1/sessions/${sessionId}`)).status).toBe(404);

  // The TypeScript client: the same rule without the gateway.
  const acme = sys.sessions.forTenant('acme');
  await acme.start({ sessionId, runtime: { kind: 'memory' } });
  await expect(sys.sessions.get(sessionId).status()).rejects.toBeInstanceOf(SessionNotFoundError);
  await expect(sys.sessions.forTenant('globex').get(sessionId).status()).rejects.toBeInstanceOf(SessionNotFoundError);
  expect((await acme.get(sessionId).status()).tenant).toBe('acme');
  await acme.get(sessionId).stop();
});

test('a tenant’s checkpoint copied into another tenant’s store does not verify there', async () => {
  const sessionId = id('planted');
  const acme = sys.sessions.forTenant('acme');
  const session = await acme.start({ sessionId, runtime: { kind: 'memory', initialState: 'secret of acme' } });
  const ref = await session.checkpoint();
  await session.stop();
  // Whoever can write the store plants acme's whole session folder (manifests, key, packs) under globex.
  const from = path.join(sys.store.root, TENANTS_DIR, 'acme', sessionId);
  const to = path.join(sys.store.root, TENANTS_DIR, 'globex', sessionId);
  fs.cpSync(from, to, { recursive: true });
  const globex = sys.store.forTenant('globex');
  const err = await globex.verify(sessionId, ref.checkpointId).then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(SnapshotError);
  expect((err as SnapshotError).code).toMatch(/SnapshotTampered|SnapshotCorrupt/);
  // In its own tenant it still verifies.
  await expect(sys.store.forTenant('acme').verify(sessionId, ref.checkpointId)).resolves.toMatchObject({
    checkpointId: ref.checkpointId,
  });
});

test('a workspace session of a tenant runs in a directory named by its session key, and resumes its files', async () => {
  const sessionId = id('ws');
  const acme = sys.sessions.forTenant('acme');
  const session = await acme.start({
    sessionId,
    runtime: { kind: 'workspace', command: ['sh', '-c', 'echo acme > note; while true; do sleep 0.1; done'] },
  });
  const first = (await session.status()).runtime!.location;
  expect(path.basename(path.dirname(first))).toBe(`${sessionId}@acme`);
  await session.pause();
  const resumed = await session.resume();
  const location = resumed.runtime.location;
  expect(path.basename(path.dirname(location))).toBe(`${sessionId}@acme`);
  expect(fs.readFileSync(path.join(location, 'note'), 'utf8')).toBe('acme\n');
  await session.stop();
});
