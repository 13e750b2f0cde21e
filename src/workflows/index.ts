export { sessionWorkflow } from './session-workflow';
export { hostWorkflow } from './host-workflow';
export { fleetWorkflow } from './placement';
