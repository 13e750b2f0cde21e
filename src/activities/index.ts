export * from './session-activities';
export type * from './activity-inputs';
export * from './host-fence';
export * from './host-state';
