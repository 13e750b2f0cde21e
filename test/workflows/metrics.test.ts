/**
 * The metrics endpoint as an operator's scraper sees it: the SDK's runtime installed with the Prometheus exporter (the
 * one runWorker installs), a session's life, then `GET /metrics` over HTTP. Jest gives this file its own modules, so
 * its own runtime: installed here with telemetry before the system starts, the helper's quiet one is not installed.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { fleetTaskQueue } from '../../src/api';
import { freePort } from '../../src/dev-server';
import { prometheusExporter } from '../../src/metrics';
import { installQuietRuntime, runningStatus, startTestSystem, type TestSystem } from '../helpers/temporal';

let sys: TestSystem;
let url: string;
beforeAll(async () => {
  const port = await freePort();
  installQuietRuntime({ metrics: prometheusExporter({ host: '127.0.0.1', port }) });
  url = `http://127.0.0.1:${port}/metrics`;
  sys = await startTestSystem();
});
afterAll(async () => {
  await sys?.close();
});

/** One sample of the exposition format: its metric name, labels and value. */
interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

async function scrape(): Promise<{ text: string; samples: Sample[] }> {
  const res = await fetch(url);
  expect(res.status).toBe(200);
  const text = await res.text();
  const samples = text
    .split('\n')
    .filter((line) => line && !line.startsWith('#'))
    .map((line) => {
      const m = /^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
      if (!m) throw new Error(`not a sample: ${line}`);
      const labels = Object.fromEntries(
        [...(m[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map((l) => [l[1], l[2]]),
      );
      return { name: m[1]!, labels, value: Number(m[3]) };
    });
  return { text, samples };
}

/** The sum of the samples of `name` whose labels include `labels`. */
function total(samples: Sample[], name: string, labels: Record<string, string> = {}): number {
  return samples
    .filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v))
    .reduce((sum, s) => sum + s.value, 0);
}

/** How much each series moved between two scrapes. */
function moved(before: Sample[], after: Sample[]) {
  return (name: string, labels: Record<string, string> = {}) =>
    total(after, name, labels) - total(before, name, labels);
}

const newId = (prefix: string) => `${prefix}-${crypto.randomUUID().slice(0, 8)}`;

test("a session's checkpoints, restore, a store error and a drain are counted on the runtime's endpoint", async () => {
  const before = (await scrape()).samples;

  const sessionId = newId('metrics');
  const session = await sys.sessions.start({ sessionId, runtime: { kind: 'memory', initialState: 'counted' } });
  await runningStatus(session);
  const first = await session.checkpoint({ label: 'one' });
  await session.pause();
  await session.resume();
  await runningStatus(session);
  // A store error: the first checkpoint's manifest goes missing behind the session's back.
  fs.rmSync(path.join(sys.dir, 'snapshots', sessionId, `${first.checkpointId}.manifest`));
  expect((await session.verify({ checkpointId: first.checkpointId }))[0]).toMatchObject({ status: 'missing' });
  await session.stop();
  // What the session recorded is what the worker counted.
  const checkpoints = (await session.timeline()).filter((e) => e.kind === 'checkpoint');
  const byTrigger = (trigger: string) =>
    checkpoints.filter((e) => e.kind === 'checkpoint' && e.checkpoint.trigger === trigger).length;

  // A drain: a running session moves to a second host, checkpointed (trigger drain) and restored there.
  const moving = await sys.sessions.start({ sessionId: newId('metrics-drain'), runtime: { kind: 'memory' } });
  await runningStatus(moving);
  await sys.addHost();
  const report = await sys.firstHost.stop();
  expect(report.drained).toEqual([moving.sessionId]);
  await runningStatus(moving);
  await moving.stop({ checkpoint: false });

  const { text, samples: after } = await scrape();
  const delta = moved(before, after);
  const memory = { runtime: 'memory' };

  expect(delta('durable_sessions_checkpoints_total', { ...memory, outcome: 'ok' })).toBe(checkpoints.length + 1);
  expect(delta('durable_sessions_checkpoints_total', { trigger: 'manual' })).toBe(1);
  expect(delta('durable_sessions_checkpoints_total', { trigger: 'pause' })).toBe(1);
  expect(delta('durable_sessions_checkpoints_total', { trigger: 'stop' })).toBe(byTrigger('stop'));
  expect(delta('durable_sessions_checkpoints_total', { trigger: 'drain' })).toBe(1);
  expect(delta('durable_sessions_checkpoints_total')).toBe(checkpoints.length + 1);
  // The histograms saw every capture, the bytes those that were taken.
  expect(delta('durable_sessions_checkpoint_duration_seconds_count', memory)).toBe(checkpoints.length + 1);
  expect(delta('durable_sessions_checkpoint_size_bytes_count', memory)).toBe(checkpoints.length + 1);
  expect(delta('durable_sessions_checkpoint_size_bytes_sum', memory)).toBeGreaterThan(0);

  // One restore for the resume, one for the drained session on the second host; neither was a retry.
  expect(delta('durable_sessions_restores_total', { ...memory, outcome: 'ok', attempt: 'first' })).toBe(2);
  expect(delta('durable_sessions_restores_total')).toBe(2);
  expect(delta('durable_sessions_restore_duration_seconds_count', memory)).toBe(2);
  expect(delta('durable_sessions_restore_size_bytes_count', memory)).toBe(2);

  expect(delta('durable_sessions_store_errors_total', { operation: 'verify', kind: 'SnapshotNotFound' })).toBe(1);
  expect(delta('durable_sessions_store_errors_total')).toBe(1);

  expect(delta('durable_sessions_drains_total')).toBe(1);
  expect(delta('durable_sessions_drained_sessions_total', { outcome: 'drained' })).toBe(1);
  expect(delta('durable_sessions_drained_sessions_total', { outcome: 'not_drained' })).toBe(0);

  // Prometheus conventions: counters end in _total, the duration buckets are seconds.
  expect(text).toMatch(/^# TYPE durable_sessions_checkpoints_total counter$/m);
  expect(text).toMatch(/^# TYPE durable_sessions_restore_duration_seconds histogram$/m);
  expect(after.some((s) => s.name === 'durable_sessions_checkpoint_duration_seconds_bucket' && s.labels.le === '0.01'));
  // No label carries a session id.
  expect(text).not.toContain(sessionId);
  expect(text).not.toContain(moving.sessionId);

  // Temporal's own metrics are on the same endpoint.
  expect(
    total(after, 'temporal_activity_execution_latency_count', { activity_type: 'captureCheckpoint' }),
  ).toBeGreaterThan(0);
  expect(total(after, 'temporal_workflow_completed_total')).toBeGreaterThan(0);
});

test('the fleet directory and the host monitor stay cached while sessions crowd the worker cache', async () => {
  // Four cached sessions and four times as many at work at once: the sessions' cache turns over all the time.
  const small = await startTestSystem({ firstHost: { maxCachedWorkflows: 4 } });
  try {
    const ids = Array.from({ length: 16 }, () => newId('crowd'));
    const sessions = await Promise.all(
      ids.map((sessionId) => small.sessions.start({ sessionId, runtime: { kind: 'memory', initialState: sessionId } })),
    );
    const checkpoints = await Promise.all(sessions.map((s) => s.checkpoint()));
    expect(checkpoints.map((c) => c.sequence)).toEqual(ids.map(() => 1));
    await Promise.all(sessions.map((s) => s.stop({ checkpoint: false })));

    const { samples } = await scrape();
    const shared = { task_queue: small.taskQueue };
    const fleet = { task_queue: fleetTaskQueue(small.taskQueue) };
    // Sessions were evicted and replayed; the directory and the monitor, on the fleet's own worker, never were.
    expect(total(samples, 'temporal_sticky_cache_miss_total', shared)).toBeGreaterThan(0);
    expect({
      cached: total(samples, 'temporal_sticky_cache_size', fleet),
      misses: total(samples, 'temporal_sticky_cache_miss_total', fleet),
      evictions: total(samples, 'temporal_sticky_cache_total_forced_eviction_total', fleet),
    }).toEqual({ cached: 2, misses: 0, evictions: 0 });
  } finally {
    await small.close();
  }
}, 300_000);
