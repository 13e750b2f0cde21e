import crypto, { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { Client } from '@temporalio/client';
import { temporal } from '@temporalio/proto';
import { sessionWorkflowId } from '../../src/api';
import { SessionClient, SessionRuntimeError } from '../../src/client';
import { historyEncryption, PayloadEncryptionCodec, sessionDataConverter } from '../../src/payloads';
import { Keyring } from '../../src/snapshots';
import { eventually, runningStatus, startTestSystem, type TestSystem } from '../helpers/temporal';

/**
 * What Temporal keeps of an encrypted session, read raw (as the server, its database or an operator without the keys
 * sees it): no spec, no env value, no seed file, no failure message; labels only as the search attribute they are.
 */
const K1 = randomBytes(32);
const K2 = randomBytes(32);
const firstKeys = new Keyring([{ id: 'p1', key: K1 }]);
let sys: TestSystem;
beforeAll(async () => {
  sys = await startTestSystem({ payloadCodec: new PayloadEncryptionCodec(firstKeys) });
});
afterAll(async () => {
  await sys?.close();
});

const marker = (name: string) => `${name}-${crypto.randomUUID()}`;
type HistoryEvent = temporal.api.history.v1.IHistoryEvent;

async function rawEvents(workflowId: string): Promise<HistoryEvent[]> {
  const events: HistoryEvent[] = [];
  let nextPageToken: Uint8Array | undefined;
  do {
    const page = await sys.client.workflowService.getWorkflowExecutionHistory({
      namespace: 'default',
      execution: { workflowId },
      nextPageToken,
    });
    events.push(...(page.history?.events ?? []));
    nextPageToken = page.nextPageToken?.length ? page.nextPageToken : undefined;
  } while (nextPageToken);
  return events;
}

/** The history as the bytes Temporal stores, optionally without its search attributes. */
function bytesOf(events: HistoryEvent[], { withoutSearchAttributes = false } = {}): Buffer {
  const copy = events.map((e) => temporal.api.history.v1.HistoryEvent.fromObject(e));
  if (withoutSearchAttributes) {
    for (const e of copy) {
      if (e.workflowExecutionStartedEventAttributes) e.workflowExecutionStartedEventAttributes.searchAttributes = null;
      if (e.upsertWorkflowSearchAttributesEventAttributes) {
        e.upsertWorkflowSearchAttributesEventAttributes.searchAttributes = null;
      }
    }
  }
  return Buffer.from(temporal.api.history.v1.History.encode({ events: copy }).finish());
}

/** Where each payload that is not encrypted sits in the events, as `eventType.path.to.payload`. */
function plaintextPayloads(events: HistoryEvent[]): string[] {
  const found: string[] = [];
  const walk = (value: unknown, where: string) => {
    if (Array.isArray(value)) return value.forEach((v, i) => walk(v, `${where}.${i}`));
    if (!value || typeof value !== 'object') return;
    const metadata = (value as { metadata?: Record<string, string> }).metadata;
    if (metadata?.encoding !== undefined) {
      if (Buffer.from(metadata.encoding, 'base64').toString() !== 'binary/encrypted') found.push(where);
      return;
    }
    for (const [k, v] of Object.entries(value)) walk(v, `${where}.${k}`);
  };
  for (const e of events) {
    const json = temporal.api.history.v1.HistoryEvent.fromObject(e).toJSON();
    const marker = (json.markerRecordedEventAttributes as { markerName?: string } | undefined)?.markerName ?? '';
    walk(json, `${String(json.eventType)}${marker ? `(${marker})` : ''}`);
  }
  return found;
}

/** The payload key ids a history's payloads are sealed under. */
function keyIdsIn(events: HistoryEvent[]): Set<string> {
  const ids = new Set<string>();
  for (const e of events) {
    const json = JSON.stringify(temporal.api.history.v1.HistoryEvent.fromObject(e).toJSON());
    for (const m of json.matchAll(/"encryption-key-id":"([^"]+)"/g)) ids.add(Buffer.from(m[1]!, 'base64').toString());
  }
  return ids;
}

test('a lifecycle leaves no plaintext of the spec, its env, seed files or command in the history', async () => {
  const sessionId = marker('enc');
  const secrets = {
    env: marker('db-password'),
    seed: marker('seed-contents'),
    command: marker('command-arg'),
    label: marker('label').slice(0, 40),
  };
  const session = await sys.sessions.start({
    sessionId,
    labels: [secrets.label],
    runtime: {
      kind: 'workspace',
      command: [
        'sh',
        '-c',
        `test -n "$DB_PASSWORD" && cat seed.txt > out && echo ${secrets.command} >> out; sleep 600`,
      ],
      env: { DB_PASSWORD: secrets.env },
      files: { 'seed.txt': secrets.seed },
    },
  });
  await runningStatus(session);
  await session.checkpoint({ label: 'first' });
  await session.pause();
  await session.resume();
  const { runtime } = await runningStatus(session);
  // The worker read every one of them through the codec: the command ran with its env, on its seed file.
  await eventually(() => fs.existsSync(path.join(runtime.location, 'out')));
  await session.stop({ checkpoint: false });

  const events = await rawEvents(sessionWorkflowId(sessionId));
  expect(events.length).toBeGreaterThan(20);
  const all = bytesOf(events);
  for (const secret of [secrets.env, secrets.seed, secrets.command]) expect(all.includes(secret)).toBe(false);
  // Every payload is sealed, but for what the SDK itself records in its markers (patch ids, a local activity's
  // attempt and timing) and the search attributes.
  const plain = plaintextPayloads(events).filter(
    (where) => !/searchAttributes|patch-data|core_local_activity.*\.data\./.test(where),
  );
  expect(plain).toEqual([]);
  // Labels are a search attribute by design (the list filters by them), and nowhere else.
  expect(all.includes(secrets.label)).toBe(true);
  expect(bytesOf(events, { withoutSearchAttributes: true }).includes(secrets.label)).toBe(false);

  // Search attributes stay plaintext: none of the spec's secrets is among them.
  const described = await sys.client.workflow.getHandle(sessionWorkflowId(sessionId)).describe();
  const attributes = JSON.stringify(described.searchAttributes);
  // Its page in the Web UI shows the spec with the secrets named, never shown.
  const details = await described.staticDetails();
  expect(details).toContain('env: DB_PASSWORD=•••');
  expect(details).toMatch(/seed files: seed\.txt \(\d+ B\)/);
  for (const secret of [secrets.env, secrets.seed]) expect(details).not.toContain(secret);
  for (const secret of [secrets.env, secrets.seed, secrets.command]) expect(attributes).not.toContain(secret);
  expect(await historyEncryption(sys.client.workflowService, 'default', { workflowId: described.workflowId })).toEqual({
    mode: 'aes-256-gcm',
    keyId: 'p1',
  });

  // A client without the payload key reads nothing of it.
  const blind = new SessionClient({
    client: new Client({ connection: sys.client.connection }),
    taskQueue: sys.taskQueue,
  });
  await expect(blind.get(sessionId).status()).rejects.toThrow(/binary\/encrypted|encoding/i);
});

test("a failure's message reaches the client, and is ciphertext in the history", async () => {
  const sessionId = marker('enc-fails');
  const program = `/nonexistent/${marker('prog')}`;
  const error = await sys.sessions
    .start({ sessionId, runtime: { kind: 'workspace', command: [program] } })
    .catch((e: unknown) => e);
  expect(error).toBeInstanceOf(SessionRuntimeError);
  const failure = (await sys.sessions.get(sessionId).status()).failure;
  expect(failure?.message).toContain(program);
  const all = bytesOf(await rawEvents(sessionWorkflowId(sessionId)));
  expect(all.includes(program)).toBe(false);
  expect(all.includes('RuntimeFailed')).toBe(true); // the code is the search attribute FailureCode
});

test('an ended session forks from its start spec, read back through the codec', async () => {
  const source = await sys.sessions.start({
    sessionId: marker('enc-ended'),
    runtime: { kind: 'memory', initialState: 'kept' },
  });
  await runningStatus(source);
  const { finalCheckpoint } = await source.stop();
  // The workflow has ended: the fork is made from here, with the spec read back from the encrypted history.
  const { forks } = await source.fork({ from: finalCheckpoint!.index! });
  const fork = sys.sessions.get(forks[0]!.sessionId);
  expect((await runningStatus(fork)).runtimeKind).toBe('memory');
  await fork.stop({ checkpoint: false });
});

test('rotation: after a new primary key rolls out, old sessions are still read and steered', async () => {
  const before = await sys.sessions.start({
    sessionId: marker('rot-old'),
    runtime: { kind: 'memory', initialState: 'x' },
  });
  await runningStatus(before);
  await before.checkpoint({ label: 'under p1' });

  // Step 1 of a rotation: every worker and client holds p2; step 2: p2 becomes primary. The first host goes, the
  // next one has both keys with p2 primary.
  const rotated = new PayloadEncryptionCodec(
    new Keyring(
      [
        { id: 'p1', key: K1 },
        { id: 'p2', key: K2 },
      ],
      'p2',
    ),
  );
  await sys.addHost({ payloadCodec: rotated });
  await sys.firstHost.stop();
  const sessions = new SessionClient({
    client: new Client({ connection: sys.client.connection, dataConverter: sessionDataConverter(rotated) }),
    taskQueue: sys.taskQueue,
  });

  const old = sessions.get(before.sessionId);
  await eventually(async () => (await old.status()).phase === 'running', 60_000);
  await old.pause();
  await old.resume();
  expect((await runningStatus(old)).checkpointCount).toBeGreaterThanOrEqual(2);

  const after = await sessions.start({ sessionId: marker('rot-new'), runtime: { kind: 'memory' } });
  await runningStatus(after);
  const keyOf = async (id: string) =>
    historyEncryption(sys.client.workflowService, 'default', { workflowId: sessionWorkflowId(id) });
  expect(await keyOf(after.sessionId)).toEqual({ mode: 'aes-256-gcm', keyId: 'p2' });
  expect(await keyOf(before.sessionId)).toEqual({ mode: 'aes-256-gcm', keyId: 'p1' });
  // The old history holds both: what it had under p1, what came after the rotation under p2.
  expect(keyIdsIn(await rawEvents(sessionWorkflowId(before.sessionId)))).toEqual(new Set(['p1', 'p2']));
  expect(keyIdsIn(await rawEvents(sessionWorkflowId(after.sessionId)))).toEqual(new Set(['p2']));
  await Promise.all([old.stop({ checkpoint: false }), after.stop({ checkpoint: false })]);
}, 180_000);
