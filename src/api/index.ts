export * from './controls';
export * from './messages';
export * from './search-attributes';
export * from './fleet';
export * from './archives';
