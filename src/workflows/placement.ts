import {
  allHandlersFinished,
  condition,
  log,
  makeContinueAsNewFunc,
  setHandler,
  workflowInfo,
} from '@temporalio/workflow';
import {
  continuedFleetTaskQueue,
  fleetQuery,
  hostLoadSignal,
  placeManyUpdate,
  placeUpdate,
  type FleetWorkflowInput,
} from '../api/fleet';
import {
  afterPlacement,
  afterReport,
  choosePlacement,
  HostLoadReport,
  isLive,
  loadOf,
  PlacementBatch,
  PlacementRequest,
  type KnownHost,
  type PlacementDecision,
} from '../domain/placement';
import { issueSummary, parse } from './inputs';

/** A host not heard of for this long is forgotten: the directory stays small however many hosts came and went. */
const FORGET_AFTER_MS = 24 * 3_600_000;

/**
 * The fleet directory (one per task queue): every worker host reports its load here, and placements are decided here,
 * one at a time, so that each counts the ones before it. Time is the workflow's own: a host that misses three reports
 * is offered nothing until it reports again, whatever its clock says.
 */
export async function fleetWorkflow(input: FleetWorkflowInput = {}): Promise<void> {
  const hosts = new Map<string, KnownHost>((input.hosts ?? []).map((h) => [h.report.hostTaskQueue, h]));

  setHandler(hostLoadSignal, (raw) => {
    const report = HostLoadReport.safeParse(raw);
    if (!report.success) {
      log.warn('hostLoad refused', { issues: issueSummary(report.error) });
      return;
    }
    const now = Date.now();
    hosts.set(report.data.hostTaskQueue, afterReport(hosts.get(report.data.hostTaskQueue), report.data, now));
    for (const [queue, h] of hosts) if (now - h.seenAt > FORGET_AFTER_MS) hosts.delete(queue);
  });

  const place = (request: PlacementRequest): PlacementDecision => {
    const decision = choosePlacement(hosts.values(), request, Date.now());
    if (decision.ok) {
      const host = hosts.get(decision.hostTaskQueue)!;
      hosts.set(decision.hostTaskQueue, afterPlacement(host, Date.now()));
    }
    return decision;
  };
  setHandler(placeUpdate, place, {
    // Synchronous, as validators must be: a refused request leaves no event in history.
    validator: (request: PlacementRequest) => {
      parse(PlacementRequest, request ?? {});
    },
    description: 'Choose the least-loaded live worker host that satisfies a placement, and count the session on it.',
  });
  setHandler(placeManyUpdate, (batch: PlacementBatch) => batch.requests.map(place), {
    validator: (batch: PlacementBatch) => {
      parse(PlacementBatch, batch ?? {});
    },
    description: 'Place several sessions in order, as `place` does each: one decision per request.',
  });

  setHandler(fleetQuery, () => {
    const now = Date.now();
    return { at: now, hosts: [...hosts.values()].map((h) => ({ ...h, live: isLive(h, now), load: loadOf(h) })) };
  });

  await condition(() => workflowInfo().continueAsNewSuggested);
  await condition(allHandlersFinished);
  await makeContinueAsNewFunc<typeof fleetWorkflow>({ taskQueue: continuedFleetTaskQueue(workflowInfo().taskQueue) })({
    hosts: [...hosts.values()],
  });
}
