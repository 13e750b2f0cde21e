import { Client, Connection, isGrpcServiceError } from '@temporalio/client';
import { SessionClient } from '../client';
import type { Config } from '../config';
import { connectionOptions, temporalAddress } from '../temporal-connection';
import { TemporalUnavailableError, UsageError } from './errors';
import { dataConverterFromConfig, historyEncryption } from '../payloads';
import type * as Snapshots from '../snapshots';
import { isError } from '../errors';
import type { Invocation } from './parse';
import { withProgressBar } from './progress-bar';
import { listLines, statusLines, timelineLines, verificationReport, type Output } from './render';

type Of<C extends Invocation['command']> = Extract<Invocation, { command: C }>;

/** The commands that go through Temporal to a session. */
export type SessionInvocation = Of<
  | 'start'
  | 'checkpoint'
  | 'pause'
  | 'resume'
  | 'stop'
  | 'status'
  | 'timeline'
  | 'list'
  | 'verify'
  | 'rewind'
  | 'fork'
  | 'branch'
  | 'configure'
  | 'touch'
>;

/** gRPC's UNAVAILABLE: the frontend went away after the connection was made. */
const GRPC_UNAVAILABLE = 14;

export async function runSessionCommand(invocation: SessionInvocation, config: Config): Promise<Output> {
  const address = temporalAddress(config);
  const options = await connectionOptions(config, address);
  const dataConverter = await dataConverterFromConfig(config);
  const connection = await Connection.connect(options).catch((cause: unknown) => {
    throw new TemporalUnavailableError(address, { cause });
  });
  try {
    // The timeline outlives the session in the store: read it there when this machine can open the store.
    const timeline = invocation.command === 'timeline' ? await openTimeline(config) : undefined;
    const sessions = new SessionClient({
      client: new Client({ connection, namespace: config.temporal.namespace, dataConverter }),
      taskQueue: config.taskQueue,
      ...(timeline ? { timeline } : {}),
      ...(invocation.values.tenant !== undefined ? { tenant: invocation.values.tenant } : {}),
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
      // After the status: a session that does not exist is reported as SessionNotFound by it.
      const { workflowService, options } = h.workflow.client;
      const payloads = await historyEncryption(workflowService, options.namespace, {
        workflowId: h.workflow.workflowId,
      });
      return { json: { ...s, progress: io, payloads }, text: statusLines(s, io, payloads) };
    }
    case 'verify': {
      const h = sessions.get(invocation.sessionId);
      const results = await withProgressBar(h, h.verify({ checkpointId: invocation.values.checkpoint }));
      return verificationReport(results, (r) => r.checkpointId.padEnd(24));
    }
    case 'timeline': {
      const { from, limit, branch, all } = invocation.values;
      const page = await sessions.get(invocation.sessionId).timelinePage({
        from: integer('from', from),
        limit: integer('limit', limit),
        branch: integer('branch', branch),
        ...(all ? { all: true } : {}),
      });
      const more = page.next !== null ? [`(more: --from ${page.next})`] : [];
      return { json: page, text: [...timelineLines(page.entries), ...more] };
    }
    case 'rewind': {
      const h = sessions.get(invocation.sessionId);
      const { reason, key, to } = invocation.values;
      if (to === undefined) throw new UsageError('rewind needs --to INDEX|CHECKPOINT-ID', 'rewind');
      const r = await withProgressBar(
        h,
        h.rewind({ to: selector(to), reason, idempotencyKey: key, ifHead: invocation.values['if-head'] }),
      );
      const safety = r.safetyCheckpoint ? `; safety checkpoint ${r.safetyCheckpoint.checkpointId}` : '';
      const where = r.runtime ? `running as ${r.runtime.instanceId}` : 'restores on resume';
      return { json: r, text: [`rewound to ${r.restoredFrom.checkpointId} (branch ${r.branch}), ${where}${safety}`] };
    }
    case 'fork':
    case 'branch': {
      const h = sessions.get(invocation.sessionId);
      const v = invocation.values;
      const common = {
        newSessionId: v.as,
        count: integer('count', v.count),
        ...(v.paused ? { paused: true } : {}),
        idempotencyKey: v.key,
      };
      const r =
        invocation.command === 'fork'
          ? await h.fork({ ...common, from: 'from' in v && v.from !== undefined ? selector(v.from) : undefined })
          : await h.branch(common);
      return {
        json: r,
        text: r.forks.map(
          (f) => `forked ${f.sessionId} from ${r.from.checkpointId} (its checkpoint ${f.checkpoint.checkpointId})`,
        ),
      };
    }
    case 'configure': {
      const v = invocation.values;
      const s = await sessions.get(invocation.sessionId).configure({
        policies: {
          checkpointEveryMs: integer('checkpoint-every', v['checkpoint-every']),
          ...(v['only-if-active'] ? { checkpointOnlyIfActive: true } : {}),
          idlePauseAfterMs: integer('idle-pause-after', v['idle-pause-after']),
          stopPausedAfterMs: integer('stop-paused-after', v['stop-paused-after']),
          ...(v['no-checkpoint-before-stop'] ? { checkpointBeforeStop: false } : {}),
        },
        idempotencyKey: v.key,
      });
      return { json: s, text: [`policies: ${JSON.stringify(s.policies)}`] };
    }
    case 'touch': {
      await sessions.get(invocation.sessionId).touch();
      return { json: { touched: true }, text: ['touched'] };
    }
    case 'list': {
      const list = await sessions.list({ phase: invocation.values.phase });
      return { json: list, text: listLines(list) };
    }
  }
}

/** A whole number option, or undefined; anything else is left to the schema to refuse with its message. */
function integer(name: string, value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!/^\d+$/.test(value) || !Number.isSafeInteger(n)) {
    throw new UsageError(`--${name} must be a whole number, not ${JSON.stringify(value)}`);
  }
  return n;
}

/** `7` is a timeline index; anything else a checkpoint id. */
function selector(value: string): number | string {
  return /^\d+$/.test(value) ? Number(value) : value;
}

/** The store's timeline, when this machine can open the store (its configuration and keys); else none. */
async function openTimeline(config: Config): Promise<Snapshots.TimelineLog | undefined> {
  try {
    // Loaded here: the snapshot engine is most of the CLI's start-up, and only `timeline` reads the store.
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const { openSnapshotStore } = require('../snapshots') as typeof Snapshots;
    return await openSnapshotStore(config);
  } catch {
    return undefined;
  }
}
