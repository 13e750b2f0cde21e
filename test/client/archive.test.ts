import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { SessionClient, InvalidInputError, SnapshotTamperedError } from '../../src/client';
import { ERROR_CODES } from '../../src/domain/error-codes';
import { generateArchiveKeyPair } from '../../src/snapshots';
import { eventually, runningStatus, startTestSystem, type TestSystem } from '../helpers/temporal';

// Two deployments on one Temporal server: each its own task queue, worker, store and master key.
let here: TestSystem;
let there: TestSystem;
let exporter: SessionClient;
let importer: SessionClient;
beforeAll(async () => {
  here = await startTestSystem();
  there = await startTestSystem();
  exporter = new SessionClient({
    client: here.client,
    taskQueue: here.taskQueue,
    timeline: here.store,
    store: here.store,
  });
  importer = new SessionClient({
    client: there.client,
    taskQueue: there.taskQueue,
    timeline: there.store,
    store: there.store,
  });
});
afterAll(async () => {
  await here?.close();
  await there?.close();
});

const newId = (prefix: string) => `${prefix}-${crypto.randomUUID().slice(0, 8)}`;

async function readAll(stream: NodeJS.ReadableStream): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const part of stream) parts.push(part as Buffer);
  return Buffer.concat(parts);
}

/** A stopped memory session of `here` with two checkpoints; the state at the second. */
async function stoppedSession(): Promise<{ sessionId: string; first: Buffer; state: Buffer; head: string }> {
  const sessionId = newId('exported');
  const session = await exporter.start({ sessionId, runtime: { kind: 'memory' } });
  const { runtime } = await runningStatus(session);
  const first = crypto.randomBytes(3 * 1024 * 1024);
  here.memory.write(runtime.instanceId, first);
  await session.checkpoint({ label: 'first' });
  const state = Buffer.concat([first, crypto.randomBytes(1024 * 1024)]);
  here.memory.write(runtime.instanceId, state);
  const head = await session.pause({});
  await session.stop({ checkpoint: false });
  return { sessionId, first, state, head: head.checkpointId };
}

/** Nothing of `sessionId` in `there`: no checkpoint, no claim (the id still imports), no workflow. */
async function nothingOf(sessionId: string): Promise<void> {
  expect(await there.store.list(sessionId)).toEqual([]);
  expect(fs.existsSync(path.join(there.dir, 'snapshots', sessionId))).toBe(false);
  await expect(importer.get(sessionId).workflow.describe()).rejects.toThrow();
}

let source: Awaited<ReturnType<typeof stoppedSession>>;
let sealedFile: string;
beforeAll(async () => {
  source = await stoppedSession();
  sealedFile = path.join(here.dir, 'passphrase.dsa');
  const archive = await exporter.export(source.sessionId, { passphrase: 'correct horse' });
  fs.writeFileSync(sealedFile, await readAll(archive));
});

test('a stopped session exported to a public key resumes in a deployment with other master keys, byte for byte', async () => {
  const keys = generateArchiveKeyPair();
  const archive = await exporter.export(source.sessionId, { ancestors: true, recipientPublicKey: keys.publicKey });
  const file = path.join(here.dir, 'recipient.dsa');
  fs.writeFileSync(file, await readAll(archive));
  // No state in the clear, and no key of the exporting store.
  const bytes = fs.readFileSync(file);
  expect(bytes.includes(source.state.subarray(0, 64))).toBe(false);
  expect(bytes.includes(Buffer.from(here.masterKeys.split(':')[1]!, 'base64'))).toBe(false);

  const imported = await importer.import(file, { privateKey: keys.privateKey });
  expect(imported.sessionId).toMatch(new RegExp(`^${source.sessionId}-imported-`));
  expect(imported.importedFrom).toEqual({ sessionId: source.sessionId, checkpointId: source.head });
  expect(imported.checkpoints.map((c) => c.size)).toEqual([source.first.length, source.state.length]);
  const { runtime } = await runningStatus(imported.session, 30_000);
  expect(there.memory.read(runtime.instanceId).equals(source.state)).toBe(true);
  // Both checkpoints are in the importing store, under its keys: each verifies there.
  const stored = await there.store.list(imported.sessionId);
  expect(stored.map((m) => m.label ?? null)).toEqual(['first', null]);
  for (const m of stored) await expect(there.store.verify(imported.sessionId, m.checkpointId)).resolves.toBeTruthy();
  // The exporting store cannot read them: they are sealed under a data key wrapped by the other master key.
  await expect(here.store.list(imported.sessionId)).resolves.toEqual([]);
  await imported.session.stop({ checkpoint: false });
});

test('a passphrase archive imports paused under the id asked for', async () => {
  const sessionId = newId('by-passphrase');
  const imported = await importer.import(sealedFile, { sessionId, passphrase: 'correct horse', paused: true });
  const status = await eventually(async () => {
    const s = await imported.session.status();
    return s.phase === 'paused' ? s : undefined;
  });
  expect(status.head).toMatchObject({ checkpointId: source.head, sessionId });
  await imported.session.resume({});
  const { runtime } = await runningStatus(imported.session, 30_000);
  expect(there.memory.read(runtime.instanceId).equals(source.state)).toBe(true);
  await imported.session.stop({ checkpoint: false });
});

describe('an archive that is not what it should be changes nothing', () => {
  const attempt = (bytes: Buffer, input: Parameters<SessionClient['import']>[1]) =>
    importer.import(async function* () {
      yield bytes;
    }, input);

  test('a byte altered in its state', async () => {
    const bytes = Buffer.from(fs.readFileSync(sealedFile));
    bytes[Math.floor(bytes.length / 2)]! ^= 0x01;
    const sessionId = newId('tampered');
    const err = await attempt(bytes, { sessionId, passphrase: 'correct horse' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SnapshotTamperedError);
    expect(err).toMatchObject({ code: ERROR_CODES.SnapshotTampered, reason: 'tampered' });
    await nothingOf(sessionId);
  });

  test('cut short', async () => {
    const bytes = fs.readFileSync(sealedFile);
    const sessionId = newId('truncated');
    for (const length of [10, 200, bytes.length - 1]) {
      const err = await attempt(bytes.subarray(0, length), { sessionId, passphrase: 'correct horse' }).catch(
        (e: unknown) => e,
      );
      expect(err).toMatchObject({ code: ERROR_CODES.SnapshotCorrupt });
    }
    await nothingOf(sessionId);
  });

  test('a wrong passphrase or private key', async () => {
    const sessionId = newId('wrong-key');
    const err = await attempt(fs.readFileSync(sealedFile), { sessionId, passphrase: 'wrong horse' }).catch(
      (e: unknown) => e,
    );
    expect(err).toMatchObject({ code: ERROR_CODES.SnapshotTampered, reason: 'wrong-key' });
    expect((err as Error).message).toMatch(/passphrase is wrong/);
    const other = generateArchiveKeyPair();
    const err2 = await attempt(fs.readFileSync(sealedFile), { sessionId, privateKey: other.privateKey }).catch(
      (e: unknown) => e,
    );
    expect(err2).toMatchObject({ code: ERROR_CODES.SnapshotTampered, reason: 'wrong-key' });
    await nothingOf(sessionId);
  });

  test('a format version this release does not know', async () => {
    const bytes = fs.readFileSync(sealedFile);
    const length = bytes.readUInt32BE(8);
    const header = JSON.parse(bytes.subarray(12, 12 + length).toString('utf8')) as { formatVersion: number };
    const json = Buffer.from(JSON.stringify({ ...header, formatVersion: 2 }));
    const head = Buffer.alloc(4);
    head.writeUInt32BE(json.length, 0);
    const future = Buffer.concat([bytes.subarray(0, 8), head, json, bytes.subarray(12 + length)]);
    const sessionId = newId('future');
    const err = await attempt(future, { sessionId, passphrase: 'correct horse' }).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: ERROR_CODES.SnapshotIncompatible });
    expect((err as Error).message).toMatch(/format version 2/);
    await nothingOf(sessionId);
  });

  test('a header that asks for an expensive passphrase key (read before anything is authenticated)', async () => {
    const bytes = fs.readFileSync(sealedFile);
    const length = bytes.readUInt32BE(8);
    const header = JSON.parse(bytes.subarray(12, 12 + length).toString('utf8')) as { seal: object };
    const json = Buffer.from(JSON.stringify({ ...header, seal: { ...header.seal, N: 1 << 20, r: 32 } }));
    const head = Buffer.alloc(4);
    head.writeUInt32BE(json.length, 0);
    const costly = Buffer.concat([bytes.subarray(0, 8), head, json, bytes.subarray(12 + length)]);
    const sessionId = newId('costly');
    const err = await attempt(costly, { sessionId, passphrase: 'correct horse' }).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: ERROR_CODES.SnapshotCorrupt });
    await nothingOf(sessionId);
  });

  test('an id that is not a session id, and an id in use', async () => {
    const err = await attempt(fs.readFileSync(sealedFile), { sessionId: '../x', passphrase: 'correct horse' }).catch(
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(InvalidInputError);
    expect(fs.existsSync(path.join(there.dir, 'x'))).toBe(false);
    const running = await importer.start({ sessionId: newId('in-use'), runtime: { kind: 'memory' } });
    const taken = await attempt(fs.readFileSync(sealedFile), {
      sessionId: running.sessionId,
      passphrase: 'correct horse',
    }).catch((e: unknown) => e);
    expect(taken).toMatchObject({ code: ERROR_CODES.SessionAlreadyExists });
    expect(await there.store.list(running.sessionId)).toEqual([]);
    await running.stop({ checkpoint: false });
  });
});

test('export names a missing checkpoint before writing anything, and needs the store', async () => {
  await expect(exporter.export(source.sessionId, { checkpointId: 'nope', passphrase: 'x' })).rejects.toMatchObject({
    code: ERROR_CODES.SnapshotNotFound,
  });
  await expect(
    exporter.export(source.sessionId, { passphrase: 'x', recipientPublicKey: generateArchiveKeyPair().publicKey }),
  ).rejects.toBeInstanceOf(InvalidInputError);
  const storeless = new SessionClient({ client: here.client, taskQueue: here.taskQueue });
  await expect(storeless.export(source.sessionId, { passphrase: 'x' })).rejects.toThrow(/needs the snapshot store/);
});

test('a conversation moves with its messages and goes on appending in the other deployment', async () => {
  const sessionId = newId('chat-export');
  const chat = await exporter.start({
    sessionId,
    runtime: { kind: 'conversation', messages: [{ role: 'system', content: 'be brief' }] },
  });
  await runningStatus(chat);
  await chat.append({ messages: [{ role: 'user', content: 'weather in Paris?' }], checkpoint: true });
  await chat.append({ messages: [{ role: 'assistant', content: 'Sunny.' }], checkpoint: true });
  await chat.pause({});
  const archive = await readAll(await exporter.export(sessionId, { passphrase: 'chat' }));

  const imported = await importer.import(
    async function* () {
      yield archive;
    },
    { passphrase: 'chat' },
  );
  const { runtime } = await runningStatus(imported.session, 30_000);
  const messages = there.conversation.messages(runtime.instanceId, { limit: 100 });
  expect(messages.map((m) => m.content)).toEqual(['be brief', 'weather in Paris?', 'Sunny.']);
  await imported.session.append({ messages: [{ role: 'user', content: 'and tomorrow?' }], checkpoint: true });
  expect(there.conversation.messages(runtime.instanceId, { limit: 100 }).length).toBe(4);
  await imported.session.stop({ checkpoint: false });
  await chat.stop({ checkpoint: false });
});

test('a workspace moves with its files and its command runs on in the other deployment', async () => {
  const sessionId = newId('ws-export');
  const session = await exporter.start({
    sessionId,
    runtime: {
      kind: 'workspace',
      command: ['sh', '-c', 'echo started >> log; sleep 600'],
      files: { 'notes.txt': 'v1' },
    },
  });
  const { runtime } = await runningStatus(session);
  const blob = crypto.randomBytes(512 * 1024);
  fs.writeFileSync(path.join(runtime.location, 'blob.bin'), blob);
  await session.pause({});
  const keys = generateArchiveKeyPair();
  const archive = await readAll(await exporter.export(sessionId, { recipientPublicKey: keys.publicKey }));
  await session.stop({ checkpoint: false });

  const imported = await importer.import(
    async function* () {
      yield archive;
    },
    { privateKey: keys.privateKey },
  );
  const moved = await runningStatus(imported.session, 30_000);
  expect(moved.runtime.location).not.toBe(runtime.location);
  expect(fs.readFileSync(path.join(moved.runtime.location, 'blob.bin')).equals(blob)).toBe(true);
  expect(fs.readFileSync(path.join(moved.runtime.location, 'notes.txt'), 'utf8')).toBe('v1');
  await imported.session.stop({ checkpoint: false });
});
