export * from './errors';
export * from './session-client';
export { connectTemporalClient } from './connect';
