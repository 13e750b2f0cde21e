export * from './errors';
export * from './session-client';
