/**
 * `SessionClient.connect`: one call wires the connection, namespace, task queue and payload codec from the
 * configuration the worker reads. A session started through it runs on encrypting workers, its spec reaches Temporal
 * sealed, and its answers are read; without a payload key it refuses before connecting.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Connection } from '@temporalio/client';
import { SessionClient } from '../../src/client';
import { loadConfig } from '../../src/config';
import { MissingPayloadKeyError, PayloadEncryptionCodec } from '../../src/payloads';
import { Keyring } from '../../src/snapshots';
import { runningStatus, startTestSystem, type TestSystem } from '../helpers/temporal';

const payloadKey = crypto.randomBytes(32);
let sys: TestSystem;
beforeAll(async () => {
  sys = await startTestSystem({
    payloadCodec: new PayloadEncryptionCodec(new Keyring([{ id: 'connect-1', key: payloadKey }])),
  });
});
afterAll(async () => {
  await sys?.close();
});

test("connect(config) talks to encrypting workers as the worker's configuration says", async () => {
  const config = loadConfig({
    TEMPORAL_ADDRESS: process.env.DS_TEST_TEMPORAL_ADDRESS,
    DS_TASK_QUEUE: sys.taskQueue,
    DS_PAYLOAD_KEYS: `connect-1:${payloadKey.toString('base64')}`,
  });
  const sessions = await SessionClient.connect(config);
  try {
    expect(sessions.taskQueue).toBe(sys.taskQueue);
    const session = await sessions.start({ sessionId: `connect-${crypto.randomUUID()}`, runtime: { kind: 'memory' } });
    await runningStatus(session);
    const checkpoint = await session.checkpoint({ label: 'through connect' });
    expect(checkpoint.index).toBe(1);

    const raw = await Connection.connect({ address: process.env.DS_TEST_TEMPORAL_ADDRESS! });
    try {
      const { history } = await raw.workflowService.getWorkflowExecutionHistory({
        namespace: 'default',
        execution: { workflowId: session.workflow.workflowId },
      });
      const input = history!.events![0]!.workflowExecutionStartedEventAttributes!.input!.payloads![0]!;
      expect(Buffer.from(input.metadata!.encoding!).toString()).toBe('binary/encrypted');
    } finally {
      await raw.close();
    }
    await session.stop();
  } finally {
    await sessions.close();
  }
  // Closed: its connection is gone.
  await expect(sessions.get('anything').status()).rejects.toThrow();
});

test('connect refuses, before connecting, when payloads are encrypted and no key is configured', async () => {
  const empty = fs.mkdtempSync(path.join(os.tmpdir(), 'ds-connect-'));
  try {
    // An address nothing listens on: the refusal comes from the configuration, not from a connection attempt.
    const config = loadConfig({ TEMPORAL_ADDRESS: '127.0.0.1:1', DS_DATA_DIR: empty });
    await expect(SessionClient.connect(config)).rejects.toBeInstanceOf(MissingPayloadKeyError);
  } finally {
    fs.rmSync(empty, { recursive: true, force: true });
  }
});
