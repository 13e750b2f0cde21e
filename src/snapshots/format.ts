/**
 * The checkpoint formats. A reader accepts every version in READABLE_FORMAT_VERSIONS; the store writes
 * ENGINE_FORMAT_VERSION unless it is told to write CHUNKED_FORMAT_VERSION for readers of format 2 only.
 */

/** One state stream and a JSON manifest per checkpoint (fs-snapshot-store.ts); read, no longer written by workers. */
export const LEGACY_FORMAT_VERSION = 1;
/**
 * The first chunked format. Its chunk objects are also format 3's (their additional data says 2), so checkpoints of
 * both formats share chunks.
 */
export const CHUNKED_FORMAT_VERSION = 2;
/** Format 2's layout and chunks, with a binary chunk table in the manifest (engine/manifest-codec.ts). */
export const TABLE_FORMAT_VERSION = 3;
/** The manifest format the store writes by default. */
export const ENGINE_FORMAT_VERSION = TABLE_FORMAT_VERSION;
export const READABLE_FORMAT_VERSIONS: readonly number[] = [
  LEGACY_FORMAT_VERSION,
  CHUNKED_FORMAT_VERSION,
  ENGINE_FORMAT_VERSION,
];
