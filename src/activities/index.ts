export * from './session-activities';
export * from './host-state';
