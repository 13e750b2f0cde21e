/**
 * The worker's own metrics, emitted through the Temporal runtime's meter: they come out of the SDK's Prometheus
 * exporter beside Temporal's `temporal_*` metrics, on one `/metrics` endpoint and with no second server.
 *
 * Labels are closed sets (runtime kind, trigger, error code, …): never a session id, a checkpoint id or anything a
 * caller chose, so the number of series stays bounded however many sessions a worker runs.
 */
import { ApplicationFailure, CancelledFailure, noopMetricMeter, type MetricMeter } from '@temporalio/common';
import type { MetricsExporterConfig } from '@temporalio/worker';
import type { CheckpointTrigger, RuntimeKind } from './domain/schemas';
import { DurableSessionsError, isErrnoError } from './errors';
import { SnapshotError, SnapshotReadError } from './snapshots';

/** The names the worker's metrics have on the endpoint (counters get `_total` from the exporter). */
export const METRIC_NAMES = {
  checkpoints: 'durable_sessions_checkpoints',
  checkpointSeconds: 'durable_sessions_checkpoint_duration_seconds',
  checkpointBytes: 'durable_sessions_checkpoint_size_bytes',
  restores: 'durable_sessions_restores',
  restoreSeconds: 'durable_sessions_restore_duration_seconds',
  restoreBytes: 'durable_sessions_restore_size_bytes',
  storeErrors: 'durable_sessions_store_errors',
  drains: 'durable_sessions_drains',
  drainedSessions: 'durable_sessions_drained_sessions',
} as const;

/** Where the endpoint listens (DS_METRICS_HOST, DS_METRICS_PORT). */
export interface MetricsEndpoint {
  host: string;
  port: number;
}

/** The port `npm start`'s embedded default serves metrics on when DS_METRICS_PORT is unset. */
export const DEFAULT_METRICS_PORT = 9464;

// Snapshot I/O takes from milliseconds (a small memory runtime) to minutes (a large workspace).
const SECONDS_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600];
// 1 KiB to 16 GiB in steps of four.
const BYTES_BUCKETS = Array.from({ length: 13 }, (_, i) => 1024 * 4 ** i);

/**
 * The runtime's Prometheus exporter, by Prometheus conventions: counters end in `_total` and durations are in
 * seconds (Temporal's own included). Buckets of the worker's histograms fit their units.
 */
export function prometheusExporter(endpoint: MetricsEndpoint): MetricsExporterConfig {
  // An IPv6 literal needs brackets in a socket address.
  const host = endpoint.host.includes(':') ? `[${endpoint.host}]` : endpoint.host;
  return {
    prometheus: {
      bindAddress: `${host}:${endpoint.port}`,
      countersTotalSuffix: true,
      useSecondsForDurations: true,
      histogramBucketOverrides: {
        [METRIC_NAMES.checkpointSeconds]: SECONDS_BUCKETS,
        [METRIC_NAMES.restoreSeconds]: SECONDS_BUCKETS,
        [METRIC_NAMES.checkpointBytes]: BYTES_BUCKETS,
        [METRIC_NAMES.restoreBytes]: BYTES_BUCKETS,
      },
    },
  };
}

/**
 * The worker's metrics. Built on the runtime's meter (`Runtime.instance().metricMeter`); on the no-op meter when the
 * endpoint is off, so callers never need to ask.
 */
export class SessionMetrics {
  private readonly checkpoints;
  private readonly checkpointSeconds;
  private readonly checkpointBytes;
  private readonly restores;
  private readonly restoreSeconds;
  private readonly restoreBytes;
  private readonly storeErrors;
  private readonly drains;
  private readonly drainedSessions;

  constructor(meter: MetricMeter = noopMetricMeter) {
    const n = METRIC_NAMES;
    this.checkpoints = meter.createCounter(n.checkpoints, '', 'Checkpoints captured, by runtime, trigger and outcome');
    this.checkpointSeconds = meter.createHistogram(n.checkpointSeconds, 'float', 's', 'Time to capture a checkpoint');
    this.checkpointBytes = meter.createHistogram(n.checkpointBytes, 'int', 'By', 'Size of captured checkpoints');
    this.restores = meter.createCounter(n.restores, '', 'Restore attempts, by runtime, outcome and first or retry');
    this.restoreSeconds = meter.createHistogram(n.restoreSeconds, 'float', 's', 'Time to restore a checkpoint');
    this.restoreBytes = meter.createHistogram(n.restoreBytes, 'int', 'By', 'Size of restored checkpoints');
    this.storeErrors = meter.createCounter(n.storeErrors, '', 'Snapshot store errors, by operation and kind');
    this.drains = meter.createCounter(n.drains, '', 'Drains of this worker host (on SIGINT, SIGTERM)');
    this.drainedSessions = meter.createCounter(n.drainedSessions, '', 'Sessions a drain moved away, or did not');
  }

  /** A capture activity ended: `outcome` is `ok` or its error's code; `bytes` the checkpoint's size when taken. */
  checkpoint(
    labels: { runtime: RuntimeKind; trigger: CheckpointTrigger; outcome: string },
    seconds: number,
    bytes?: number,
  ) {
    this.checkpoints.add(1, labels);
    this.checkpointSeconds.record(seconds, { runtime: labels.runtime, outcome: labels.outcome });
    if (bytes !== undefined) this.checkpointBytes.record(bytes, { runtime: labels.runtime });
  }

  /** A restore attempt ended; `attempt` is the activity's attempt number (a retry is any after the first). */
  restore(labels: { runtime: RuntimeKind; outcome: string }, attempt: number, seconds: number, bytes?: number) {
    this.restores.add(1, { ...labels, attempt: attempt > 1 ? 'retry' : 'first' });
    this.restoreSeconds.record(seconds, labels);
    if (bytes !== undefined) this.restoreBytes.record(bytes, { runtime: labels.runtime });
  }

  /** The store refused or failed an operation; counted only for errors the store raised (see `storeErrorKind`). */
  storeError(operation: 'capture' | 'restore' | 'verify', kind: string) {
    this.storeErrors.add(1, { operation, kind });
  }

  /** A drain of this host ended. */
  drain(report: { drained: readonly unknown[]; notDrained: readonly unknown[] }) {
    this.drains.add(1);
    if (report.drained.length > 0) this.drainedSessions.add(report.drained.length, { outcome: 'drained' });
    if (report.notDrained.length > 0) this.drainedSessions.add(report.notDrained.length, { outcome: 'not_drained' });
  }
}

/**
 * The label for what an operation came to: the wire code of a typed error or failure, `Cancelled`, `IOError` for an
 * untyped error of the system, `Error` for anything else. Never the message: it may name a session or a path.
 */
export function outcomeOf(err: unknown): string {
  if (err instanceof CancelledFailure || (err as { name?: unknown } | null)?.name === 'AbortError') return 'Cancelled';
  if (err instanceof DurableSessionsError) return err.code;
  if (err instanceof ApplicationFailure) return err.type ?? 'Error';
  if (isErrnoError(err)) return 'IOError';
  return 'Error';
}

/** The kind of a store error (its code: StoreFull, SnapshotCorrupt, …), or undefined when the store did not raise it. */
export function storeErrorKind(err: unknown): string | undefined {
  // A SnapshotReadError is the store's retryable one (a codec this worker lacks, I/O while opening).
  return err instanceof SnapshotError || err instanceof SnapshotReadError ? err.code : undefined;
}
