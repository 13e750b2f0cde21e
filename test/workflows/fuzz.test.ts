import crypto from 'node:crypto';
import { WorkflowFailedError } from '@temporalio/client';
import fc from 'fast-check';
import type { z } from 'zod';
import { sessionWorkflowId } from '../../src/api';
import type { SessionHandle } from '../../src/client';
import {
  CheckpointInput,
  PauseInput,
  ResumeInput,
  SessionWorkflowInput,
  StartSessionInput,
  StopInput,
  VerifyInput,
} from '../../src/domain';
import { failureType, workflowTaskFailures } from '../helpers/failures';
import { runningStatus, startTestSystem, type TestSystem } from '../helpers/temporal';

/**
 * Arbitrary JSON at every message of the workflow, through a real server. The domain schemas are the oracle: only
 * inputs they refuse are sent, and each must come back as a typed refusal that leaves the session as it was, without
 * a single workflow-task failure.
 */
let sys: TestSystem;
let session: SessionHandle;
beforeAll(async () => {
  sys = await startTestSystem();
  session = await sys.sessions.start({
    sessionId: `fuzz-${crypto.randomUUID().slice(0, 8)}`,
    runtime: { kind: 'memory' },
  });
  await runningStatus(session);
});
afterAll(async () => {
  await session?.stop({ checkpoint: false }).catch(() => undefined);
  await sys?.close();
});

const KEYS = ['label', 'reason', 'checkpointId', 'checkpoint', 'idempotencyKey', 'sessionId', 'runtime', 'spec'];

/** JSON values, biased toward objects with the real field names, that `schema` refuses (absent input aside). */
function refusedBy(schema: z.ZodType) {
  const object = fc.dictionary(fc.oneof(fc.constantFrom(...KEYS), fc.string({ maxLength: 12 })), fc.jsonValue(), {
    maxKeys: 4,
  });
  return fc.oneof(fc.jsonValue(), object).filter((value) => value !== null && !schema.safeParse(value).success);
}

const runs = { numRuns: 25 };

test.each<[string, z.ZodType]>([
  ['checkpoint', CheckpointInput],
  ['pause', PauseInput],
  ['resume', ResumeInput],
  ['stop', StopInput],
  ['verify', VerifyInput],
  ['start', StartSessionInput],
])('update %s: arbitrary refused input is InvalidInput and changes nothing', async (name, schema) => {
  const before = await session.status();
  const raw = sys.client.workflow.getHandle(session.workflow.workflowId);
  await fc.assert(
    fc.asyncProperty(refusedBy(schema), async (input) => {
      const error = await raw.executeUpdate<unknown, [unknown]>(name, { args: [input] }).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(failureType(error)).toBe('InvalidInput');
    }),
    runs,
  );
  const after = await session.status();
  expect({ ...after, updatedAt: '' }).toEqual({ ...before, updatedAt: '' });
  expect(await workflowTaskFailures(sys.client, session.workflow.workflowId)).toBe(0);
});

test.each<[string, z.ZodType]>([
  ['requestCheckpoint', CheckpointInput],
  ['requestPause', PauseInput],
  ['requestResume', ResumeInput],
  ['requestStop', StopInput],
])('signal %s: arbitrary refused input is recorded as rejected and changes nothing else', async (name, schema) => {
  const raw = sys.client.workflow.getHandle(session.workflow.workflowId);
  const before = (await session.timeline()).length;
  let sent = 0;
  await fc.assert(
    fc.asyncProperty(refusedBy(schema), async (input) => {
      await raw.signal<[unknown]>(name, input);
      sent++;
    }),
    runs,
  );
  const rejected = async () => (await session.timeline()).slice(before).filter((e) => e.kind === 'signal-rejected');
  for (let i = 0; i < 100 && (await rejected()).length < sent; i++) await new Promise((r) => setTimeout(r, 100));
  const entries = await rejected();
  expect(entries).toHaveLength(sent);
  expect((await session.timeline()).length - before).toBe(sent);
  const status = await session.status();
  expect(status).toMatchObject({ phase: 'running', checkpointCount: 0 });
  expect(await workflowTaskFailures(sys.client, session.workflow.workflowId)).toBe(0);
});

test('start: an arbitrary refused workflow argument fails the run with InvalidInput at its first task', async () => {
  await fc.assert(
    fc.asyncProperty(refusedBy(SessionWorkflowInput), async (input) => {
      const workflowId = sessionWorkflowId(`fuzz-${crypto.randomUUID().slice(0, 8)}`);
      const handle = await sys.client.workflow.start('sessionWorkflow', {
        workflowId,
        taskQueue: sys.taskQueue,
        args: [input],
      });
      const error = await handle.result().catch((e: unknown) => e);
      expect(error).toBeInstanceOf(WorkflowFailedError);
      expect(failureType(error)).toBe('InvalidInput');
      expect(await workflowTaskFailures(sys.client, workflowId)).toBe(0);
    }),
    { numRuns: 15 },
  );
});
