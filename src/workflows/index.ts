export { sessionWorkflow } from './session-workflow';
export { hostWorkflow } from './host-workflow';
export { timelineReadWorkflow } from './timeline-read';
export { checkpointVerifyWorkflow } from './checkpoint-verify';
export { fleetWorkflow } from './placement';
