export * from './controls';
export * from './messages';
export * from './search-attributes';
