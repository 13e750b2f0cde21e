export { sessionWorkflow } from './session-workflow';
export { hostWorkflow } from './host-workflow';
export { timelineReadWorkflow } from './timeline-read';
export { fleetWorkflow } from './placement';
