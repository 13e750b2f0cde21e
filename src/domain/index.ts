export * from './error-codes';
export * from './schemas';
export * from './conversation';
export * from './session-state';
export * from './retention';
export * from './strict';
export * from './records';
export * from './errors';
