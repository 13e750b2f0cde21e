export * from './session-activities';
export type * from './activity-inputs';
export * from './host-state';
