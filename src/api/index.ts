export * from './messages';
export * from './search-attributes';
