import { defineQuery, defineSignal, defineUpdate } from '@temporalio/workflow';
import type { HostLoadReport, KnownHost, PlacementDecision, PlacementRequest } from '../domain/placement';

/**
 * The fleet directory: one workflow per task queue that every worker host reports its load to, and that places
 * sessions on the least-loaded live host. The string names are the wire API: never rename them.
 */
export function fleetWorkflowId(taskQueue: string): string {
  return `fleet-${taskQueue}`;
}

/** Sent by each worker host every few seconds, and as soon as its load changes. */
export const hostLoadSignal = defineSignal<[HostLoadReport]>('hostLoad');
/** Chooses a host for a session and counts the session against it at once, so concurrent placements spread. */
export const placeUpdate = defineUpdate<PlacementDecision, [PlacementRequest]>('place');
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
