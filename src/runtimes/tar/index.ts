/**
 * Tar, both directions: the deterministic header codec capture writes with (and the layout reader shares), the layout
 * reader that follows a stream's records as restore reads it, and the reader that hands restore the entries.
 */
export * from './header';
export * from './layout-reader';
export * from './extract';
