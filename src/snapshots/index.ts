export * from './errors';
export * from './fs-snapshot-store';
export * from './snapshot-store';
export * from './state-source';
