export { sessionWorkflow } from './session-workflow';
