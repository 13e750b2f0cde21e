import { z } from 'zod';
import { strictObject } from './strict';

/**
 * A worker's labels (`DS_WORKER_LABELS`: `zone=eu-1,gpu`), which a session's placement can require. Letters, digits
 * and `._:/=-`, like session labels.
 */
export const WorkerLabels = z
  .array(
    z
      .string()
      .min(1, 'a worker label must not be empty')
      .max(100, 'a worker label must be at most 100 characters')
      .regex(/^[A-Za-z0-9][A-Za-z0-9._:/=-]*$/, 'a worker label may only contain letters, digits and "._:/=-"'),
  )
  .max(32, 'at most 32 worker labels');
export type WorkerLabels = z.infer<typeof WorkerLabels>;

/**
 * Where a session may run. Without it, any worker of the task queue does and the least loaded is taken. The session
 * keeps it for its life: its start, every resume and every recovery are placed by it.
 */
export const PlacementConstraints = strictObject({
  /** Only this worker: its worker id (`DS_WORKER_ID`) or its host task queue (`<task queue>@<worker id>`). */
  host: z
    .string()
    .min(1)
    .max(200)
    .regex(/^[A-Za-z0-9][A-Za-z0-9._:@/-]*$/, 'a host is a worker id or host task queue')
    .optional(),
  /** Only workers that carry every one of these labels. */
  workerLabels: WorkerLabels.optional(),
});
export type PlacementConstraints = z.infer<typeof PlacementConstraints>;

/** What a worker host publishes of itself: who it is, how loaded, and what it offers. */
export const HostLoadReport = z.object({
  hostTaskQueue: z.string().min(1).max(300),
  workerId: z.string().min(1).max(200),
  /** Differs for every worker process: a new one's count of begun placements starts again. */
  incarnation: z.string().min(1).max(100),
  labels: WorkerLabels,
  /** Sessions it hosts, and starts or restores under way there. */
  running: z.number().int().min(0),
  /** Its `DS_MAX_SESSIONS`. */
  capacity: z.number().int().min(1),
  draining: z.boolean(),
  /** Starts and restores this incarnation has begun: each one fulfils a reservation the directory made for it. */
  begun: z.number().int().min(0),
  /** How often it reports when nothing changes: three reports missed and it is no longer offered work. */
  everyMs: z.number().int().min(100).max(3_600_000),
  /** It stopped polling: offer it nothing more. */
  gone: z.boolean().optional(),
});
export type HostLoadReport = z.infer<typeof HostLoadReport>;

/** A host as the directory knows it: its newest report, when that came, and placements not yet counted by it. */
export interface KnownHost {
  report: HostLoadReport;
  /** Workflow time (ms) of its newest report. */
  seenAt: number;
  /** Workflow times of the placements made on it that its reports do not count yet, oldest first. */
  reserved: number[];
  /** Workflow time of the newest placement on it: among equals, the host placed on longest ago goes first. */
  lastPlacedAt: number;
}

export const PlacementRequest = strictObject({
  constraints: PlacementConstraints.optional(),
  /** Hosts that were given this work and never picked it up: tried last. */
  avoid: z.array(z.string().max(300)).max(10).optional(),
});
export type PlacementRequest = z.infer<typeof PlacementRequest>;

/** Placements a worker asks for together: the ones that came while its previous batch was under way. */
export const MAX_PLACEMENT_BATCH = 100;
export const PlacementBatch = strictObject({
  requests: z.array(PlacementRequest).min(1).max(MAX_PLACEMENT_BATCH),
});
export type PlacementBatch = z.infer<typeof PlacementBatch>;

export type PlacementDecision =
  | { ok: true; hostTaskQueue: string }
  /** `unsatisfiable`: no live host matches the constraints; `busy`: those that do are full or draining. */
  | { ok: false; reason: 'unsatisfiable' | 'busy' | 'none'; message: string };

/** A reservation whose host never reported it within this long is dropped (the work never reached the host). */
export const RESERVATION_TTL_MS = 60_000;

/** Whether the host has reported within three of its report periods, and has not said it is gone. */
export function isLive(host: KnownHost, now: number): boolean {
  return !host.report.gone && now - host.seenAt <= 3 * host.report.everyMs;
}

/** Sessions on the host, counting those placed there that its reports do not show yet. */
export function loadOf(host: KnownHost): number {
  return host.report.running + host.reserved.length;
}

/** Whether the host is the one named, and carries every required label. */
export function satisfies(
  report: Pick<HostLoadReport, 'hostTaskQueue' | 'workerId' | 'labels'>,
  constraints: PlacementConstraints | undefined,
): boolean {
  if (!constraints) return true;
  if (
    constraints.host !== undefined &&
    constraints.host !== report.hostTaskQueue &&
    constraints.host !== report.workerId
  )
    return false;
  const labels = new Set(report.labels);
  return (constraints.workerLabels ?? []).every((l) => labels.has(l));
}

export function describeConstraints(constraints: PlacementConstraints | undefined): string {
  const parts = [
    ...(constraints?.host !== undefined ? [`host ${constraints.host}`] : []),
    ...(constraints?.workerLabels?.length ? [`worker labels ${constraints.workerLabels.join(', ')}`] : []),
  ];
  return parts.length ? parts.join(' and ') : 'no constraint';
}

/**
 * The live host that satisfies the constraints and has the most room relative to its capacity; full and draining
 * hosts are passed by, never waited for. Ties go to the host placed on longest ago, then by name: deterministic, as
 * the directory workflow needs, and two idle hosts take placements in turn.
 */
export function choosePlacement(hosts: Iterable<KnownHost>, request: PlacementRequest, now: number): PlacementDecision {
  const live = [...hosts].filter((h) => isLive(h, now));
  if (live.length === 0) return { ok: false, reason: 'none', message: 'no worker host has reported recently' };
  const matching = live.filter((h) => satisfies(h.report, request.constraints));
  if (matching.length === 0) {
    return {
      ok: false,
      reason: 'unsatisfiable',
      message: `no live worker host satisfies the placement (${describeConstraints(request.constraints)})`,
    };
  }
  const open = matching.filter((h) => !h.report.draining && loadOf(h) < h.report.capacity);
  if (open.length === 0) {
    return {
      ok: false,
      reason: 'busy',
      message: `every worker host that satisfies the placement (${describeConstraints(request.constraints)}) is full or draining`,
    };
  }
  const avoid = new Set(request.avoid ?? []);
  const rank = (h: KnownHost) => [
    avoid.has(h.report.hostTaskQueue) ? 1 : 0,
    loadOf(h) / h.report.capacity,
    loadOf(h),
    h.lastPlacedAt,
  ];
  const best = open.reduce((a, b) => (before(rank(b), rank(a), b, a) ? b : a));
  return { ok: true, hostTaskQueue: best.report.hostTaskQueue };
}

function before(x: number[], y: number[], hx: KnownHost, hy: KnownHost): boolean {
  for (let i = 0; i < x.length; i++) if (x[i] !== y[i]) return (x[i] ?? 0) < (y[i] ?? 0);
  return hx.report.hostTaskQueue < hy.report.hostTaskQueue;
}

/**
 * The directory's knowledge after a report: placements the host has begun since its previous report fulfil the oldest
 * reservations; a new incarnation (a restarted worker) fulfils none and starts afresh; stale reservations are dropped.
 */
export function afterReport(known: KnownHost | undefined, report: HostLoadReport, now: number): KnownHost {
  let reserved = known ? [...known.reserved] : [];
  if (known && known.report.incarnation === report.incarnation) {
    reserved = reserved.slice(Math.max(0, report.begun - known.report.begun));
  } else {
    reserved = [];
  }
  reserved = reserved.filter((t) => now - t <= RESERVATION_TTL_MS);
  return { report, seenAt: now, reserved, lastPlacedAt: known?.lastPlacedAt ?? 0 };
}

/** The host after a placement on it: one more reservation. */
export function afterPlacement(known: KnownHost, now: number): KnownHost {
  const reserved = [...known.reserved.filter((t) => now - t <= RESERVATION_TTL_MS), now];
  return { ...known, reserved, lastPlacedAt: now };
}
