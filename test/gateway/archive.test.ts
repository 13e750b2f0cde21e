import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { SessionClient } from '../../src/client';
import { loadConfig } from '../../src/config';
import { generateKey, hashKey, type RunningGateway } from '../../src/gateway';
import { runGateway } from '../../src/gateway/run';
import { ARCHIVE_MEDIA_TYPE } from '../../src/snapshots';
import { startAdminGateway, startTestGateway } from '../helpers/gateway';
import { runningStatus, startTestSystem, type TestSystem } from '../helpers/temporal';

// Two deployments, each behind its own gateway; each gateway opens its own store (DS_GATEWAY_ARCHIVES=on).
let here: TestSystem;
let there: TestSystem;
let from: { gateway: RunningGateway; key: string };
let to: { gateway: RunningGateway; key: string };
let spool: string;
beforeAll(async () => {
  here = await startTestSystem();
  there = await startTestSystem();
  const withStore = (sys: TestSystem) =>
    new SessionClient({ client: sys.client, taskQueue: sys.taskQueue, timeline: sys.store, store: sys.store });
  const a = await startTestGateway(here, [{ id: 'admin' }], { sessions: withStore(here) });
  spool = fs.mkdtempSync(path.join(there.dir, 'spool-'));
  const b = await startTestGateway(there, [{ id: 'admin' }], { sessions: withStore(there), spoolDir: spool });
  from = { gateway: a.gateway, key: a.keys.admin! };
  to = { gateway: b.gateway, key: b.keys.admin! };
});
afterAll(async () => {
  await from?.gateway.close();
  await to?.gateway.close();
  await here?.close();
  await there?.close();
});

const passphrase = 'over http';
const b64 = (text: string) => Buffer.from(text, 'utf8').toString('base64');

function exportOf(sessionId: string, body: unknown): Promise<Response> {
  return fetch(`${from.gateway.url}/v1/sessions/${encodeURIComponent(sessionId)}/export`, {
    method: 'POST',
    headers: { authorization: `Bearer ${from.key}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
}

function importOf(archive: Uint8Array, query: string, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(`${to.gateway.url}/v1/imports${query}`, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${to.key}`,
      'content-type': ARCHIVE_MEDIA_TYPE,
      'archive-passphrase': b64(passphrase),
      ...headers,
    },
    // A stream, as a large archive is sent.
    body: new Blob([archive]).stream(),
    duplex: 'half',
  });
}

let sessionId: string;
let state: Buffer;
let archive: Buffer;
beforeAll(async () => {
  sessionId = `http-export-${crypto.randomUUID().slice(0, 8)}`;
  const session = await here.sessions.start({ sessionId, runtime: { kind: 'memory' } });
  const { runtime } = await runningStatus(session);
  state = crypto.randomBytes(3 * 1024 * 1024 + 17);
  here.memory.write(runtime.instanceId, state);
  await session.pause({});
  const res = await exportOf(sessionId, { passphrase });
  expect(res.status).toBe(200);
  expect(res.headers.get('content-type')).toBe(ARCHIVE_MEDIA_TYPE);
  archive = Buffer.from(await res.arrayBuffer());
});

async function nothingOf(id: string): Promise<void> {
  expect(await there.store.list(id)).toEqual([]);
  expect(fs.existsSync(path.join(there.dir, 'snapshots', id))).toBe(false);
  expect(fs.readdirSync(spool)).toEqual([]);
}

test('an archive exported over HTTP imports over HTTP into another deployment, byte for byte', async () => {
  const as = `${sessionId}-there`;
  const res = await importOf(archive, `?sessionId=${as}`);
  expect(res.status).toBe(201);
  expect(await res.json()).toMatchObject({ sessionId: as, importedFrom: { sessionId } });
  const { runtime } = await runningStatus(there.sessions.get(as), 30_000);
  expect(there.memory.read(runtime.instanceId).equals(state)).toBe(true);
  // The spooled archive is gone once the import answered.
  expect(fs.readdirSync(spool)).toEqual([]);
  await there.sessions.get(as).stop({ checkpoint: false });
});

test('snake_case fields, unknown query parameters and bad ids are refused, and change nothing', async () => {
  const snake = await exportOf(sessionId, { passphrase, checkpoint_id: 'x' });
  expect(snake.status).toBe(400);
  expect(await snake.json()).toMatchObject({ code: 'InvalidInput' });
  const bothKeys = await exportOf(sessionId, { passphrase, recipientPublicKey: 'nope' });
  expect(bothKeys.status).toBe(400);

  const id = `${sessionId}-snake`;
  const query = await importOf(archive, `?session_id=${id}`);
  expect(query.status).toBe(400);
  expect(await query.json()).toMatchObject({ code: 'InvalidInput' });
  await nothingOf(id);
  const dotted = await importOf(archive, `?sessionId=${encodeURIComponent('../x')}`);
  expect(dotted.status).toBe(400);
  expect(await dotted.json()).toMatchObject({ code: 'InvalidInput' });
  expect(fs.existsSync(path.join(there.dir, 'x'))).toBe(false);
  const json = await importOf(archive, `?sessionId=${id}`, { 'content-type': 'application/json' });
  expect(json.status).toBe(415);
  await nothingOf(id);
});

test('a tampered, cut or wrongly keyed archive is a typed problem, and changes nothing', async () => {
  const id = `${sessionId}-bad`;
  const tampered = Buffer.from(archive);
  tampered[tampered.length - 100]! ^= 0x04;
  const cases: [Buffer, Record<string, string>, string][] = [
    [tampered, {}, 'SnapshotTampered'],
    [archive.subarray(0, archive.length - 1), {}, 'SnapshotCorrupt'],
    [archive, { 'archive-passphrase': b64('not it') }, 'SnapshotTampered'],
  ];
  for (const [bytes, headers, code] of cases) {
    const res = await importOf(bytes, `?sessionId=${id}`, headers);
    expect(res.status).toBe(422);
    expect(await res.json()).toMatchObject({ code });
    await nothingOf(id);
  }
});

test('a gateway without the store answers 501 for both', async () => {
  const plain = await startAdminGateway(here);
  try {
    const res = await fetch(`${plain.gateway.url}/v1/sessions/${sessionId}/export`, {
      method: 'POST',
      headers: { authorization: `Bearer ${plain.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ passphrase }),
    });
    expect(res.status).toBe(501);
    expect(await res.json()).toMatchObject({ code: 'NotConfigured' });
  } finally {
    await plain.gateway.close();
  }
});

test('runGateway opens the store for export only with DS_GATEWAY_ARCHIVES=on', async () => {
  const admin = generateKey();
  const env = (archives: string) =>
    loadConfig({
      TEMPORAL_ADDRESS: process.env.DS_TEST_TEMPORAL_ADDRESS,
      DS_TASK_QUEUE: here.taskQueue,
      DS_DATA_DIR: path.join(here.dir, 'run-gateway'),
      DS_SNAPSHOT_DIR: path.join(here.dir, 'snapshots'),
      DS_MASTER_KEYS: here.masterKeys,
      DS_PAYLOAD_ENCRYPTION: 'none',
      DS_GATEWAY_ARCHIVES: archives,
      DS_API_KEYS: JSON.stringify({ keys: [{ id: 'a', sha256: hashKey(admin), tenant: 'default', role: 'admin' }] }),
    });
  for (const [archives, status] of [
    ['on', 200],
    ['off', 501],
  ] as const) {
    const config = env(archives);
    const running = await runGateway({ ...config, gateway: { ...config.gateway, port: 0 } }, config.temporal.address!);
    try {
      const res = await fetch(`${running.url}/v1/sessions/${sessionId}/export`, {
        method: 'POST',
        headers: { authorization: `Bearer ${admin}`, 'content-type': 'application/json' },
        body: JSON.stringify({ passphrase }),
      });
      expect(res.status).toBe(status);
      if (status === 200) {
        // The same archive a client with the store exports: it imports over the other gateway.
        const body = Buffer.from(await res.arrayBuffer());
        const imported = await importOf(body, `?sessionId=${sessionId}-run-gateway&paused=true`);
        expect(imported.status).toBe(201);
      } else {
        await res.body?.cancel();
      }
    } finally {
      await running.close();
    }
  }
});
