import { defineQuery, defineSignal, defineUpdate } from '@temporalio/workflow';
import type {
  HostLoadReport,
  KnownHost,
  PlacementBatch,
  PlacementDecision,
  PlacementRequest,
} from '../domain/placement';

/**
 * The fleet directory: one workflow per task queue that every worker host reports its load to, and that places
 * sessions on the least-loaded live host. The string names are the wire API: never rename them.
 */
export function fleetWorkflowId(taskQueue: string): string {
  return `fleet-${taskQueue}`;
}

const FLEET_SUFFIX = '/fleet';

/**
 * The fleet's own workflows (the directory and every host's monitor) run on a queue beside the sessions' one, polled by
 * a worker whose cache holds nothing else: a host with more running sessions than it caches would otherwise evict
 * these busiest workflows again and again, and each eviction replays their long histories before the next placement.
 */
export function fleetTaskQueue(taskQueue: string): string {
  return `${taskQueue}${FLEET_SUFFIX}`;
}

/** The sessions' queue of a fleet workflow on `current`: where the activities any worker can do run. */
export function sessionsTaskQueueOf(current: string): string {
  return current.endsWith(FLEET_SUFFIX) ? current.slice(0, -FLEET_SUFFIX.length) : current;
}

/** The queue a fleet workflow continues as new on: the fleet queue, which one started on the sessions' queue moves to. */
export function continuedFleetTaskQueue(current: string): string {
  return fleetTaskQueue(sessionsTaskQueueOf(current));
}

/** Sent by each worker host every few seconds, and as soon as its load changes. */
export const hostLoadSignal = defineSignal<[HostLoadReport]>('hostLoad');
/** Chooses a host for a session and counts the session against it at once, so concurrent placements spread. */
export const placeUpdate = defineUpdate<PlacementDecision, [PlacementRequest]>('place');
/**
 * Several placements in one update, decided in order, one decision each: a worker keeps one update in flight to the
 * directory, because a workflow with more than a few updates in flight answers far fewer of them (bench/README.md,
 * Fleet directory).
 */
export const placeManyUpdate = defineUpdate<PlacementDecision[], [PlacementBatch]>('placeMany');
/** The hosts the directory knows, live or not, with their load. */
export const fleetQuery = defineQuery<FleetView>('fleet');

export interface FleetView {
  /** Workflow time (ms) the view was taken at. */
  at: number;
  hosts: (KnownHost & { live: boolean; load: number })[];
}

/** What the directory carries over continue-as-new. */
export interface FleetWorkflowInput {
  hosts?: KnownHost[];
}
