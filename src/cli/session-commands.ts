import { Client, Connection, isGrpcServiceError } from '@temporalio/client';
import { SessionClient } from '../client';
import type { Config } from '../config';
import { connectionOptions } from '../temporal-connection';
import { TemporalUnavailableError } from './errors';
import { isError } from '../errors';
import type { Invocation } from './parse';
import { withProgressBar } from './progress-bar';
import { listLines, statusLines, timelineLines, verificationReport, type Output } from './render';

type Of<C extends Invocation['command']> = Extract<Invocation, { command: C }>;

/** The commands that go through Temporal to a session. */
export type SessionInvocation = Of<
  'start' | 'checkpoint' | 'pause' | 'resume' | 'stop' | 'status' | 'timeline' | 'list' | 'verify'
>;

/** gRPC's UNAVAILABLE: the frontend went away after the connection was made. */
const GRPC_UNAVAILABLE = 14;

/** Where the CLI finds Temporal: TEMPORAL_ADDRESS, or else the embedded server `npm start` runs. */
export function temporalAddress(config: Config): string {
  return config.temporal.address ?? `${config.devServer.ip}:${config.devServer.port}`;
}

export async function runSessionCommand(invocation: SessionInvocation, config: Config): Promise<Output> {
  const address = temporalAddress(config);
  const options = await connectionOptions(config, address);
  const connection = await Connection.connect(options).catch((cause: unknown) => {
    throw new TemporalUnavailableError(address, { cause });
  });
  try {
    const sessions = new SessionClient({
      client: new Client({ connection, namespace: config.temporal.namespace }),
      taskQueue: config.taskQueue,
    });
    return await dispatch(invocation, sessions);
  } catch (err) {
    if (isUnavailable(err)) throw new TemporalUnavailableError(address, { cause: err });
    throw err;
  } finally {
    await connection.close();
  }
}

function isUnavailable(err: unknown): boolean {
  for (let cause: unknown = err; isError(cause); cause = cause.cause) {
    if (isGrpcServiceError(cause) && (cause.code as number) === GRPC_UNAVAILABLE) return true;
  }
  return false;
}

async function dispatch(invocation: SessionInvocation, sessions: SessionClient): Promise<Output> {
  switch (invocation.command) {
    case 'start': {
      const { values, rest } = invocation;
      const runtime = values.memory
        ? { kind: 'memory' as const, initialState: rest.join(' ') || undefined }
        : { kind: 'workspace' as const, command: rest, env: values.env, files: values.file };
      const session = await sessions.start({
        sessionId: invocation.sessionId,
        runtime,
        description: values.description,
      });
      const json = { sessionId: session.sessionId, workflowId: session.workflow.workflowId };
      return { json, text: [`started session ${json.sessionId} (workflow ${json.workflowId})`] };
    }
    case 'checkpoint': {
      const h = sessions.get(invocation.sessionId);
      const { label, key } = invocation.values;
      const c = await withProgressBar(h, h.checkpoint({ label, idempotencyKey: key }));
      return { json: c, text: [`checkpoint ${c.checkpointId} (#${c.sequence}, ${c.size} bytes, ${c.digest})`] };
    }
    case 'pause': {
      const h = sessions.get(invocation.sessionId);
      const { reason, key } = invocation.values;
      const c = await withProgressBar(h, h.pause({ reason, idempotencyKey: key }));
      return {
        json: c,
        text: [`paused; checkpoint ${c.checkpointId} (#${c.sequence}, ${c.size} bytes, ${c.digest})`],
      };
    }
    case 'resume': {
      const h = sessions.get(invocation.sessionId);
      const { checkpoint, key } = invocation.values;
      const r = await withProgressBar(h, h.resume({ checkpointId: checkpoint, idempotencyKey: key }));
      const text = [
        `resumed from checkpoint ${r.restoredFrom.checkpointId} as ${r.runtime.instanceId} (${r.runtime.location})`,
        ...(r.fallbackFrom ?? []).map((f) => `  skipped ${f.checkpointId}: ${f.reason}`),
      ];
      return { json: r, text };
    }
    case 'stop': {
      const { reason, key } = invocation.values;
      const r = await sessions.get(invocation.sessionId).stop({
        checkpoint: !invocation.values['no-checkpoint'],
        reason,
        idempotencyKey: key,
      });
      return {
        json: r,
        text: [`stopped${r.finalCheckpoint ? `; final checkpoint ${r.finalCheckpoint.checkpointId}` : ''}`],
      };
    }
    case 'status': {
      const h = sessions.get(invocation.sessionId);
      const [s, io] = await Promise.all([h.status(), h.progress().catch(() => [])]);
      return { json: { ...s, progress: io }, text: statusLines(s, io) };
    }
    case 'verify': {
      const h = sessions.get(invocation.sessionId);
      const results = await withProgressBar(h, h.verify({ checkpointId: invocation.values.checkpoint }));
      return verificationReport(results, (r) => r.checkpointId.padEnd(24));
    }
    case 'timeline': {
      const t = await sessions.get(invocation.sessionId).timeline();
      return { json: t, text: timelineLines(t) };
    }
    case 'list': {
      const list = await sessions.list({ phase: invocation.values.phase });
      return { json: list, text: listLines(list) };
    }
  }
}
