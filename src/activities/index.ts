export * from './session-activities';
