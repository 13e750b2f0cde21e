/**
 * The snapshot layer's front door: code outside src/snapshots imports from here only (eslint.config.js enforces
 * it). What to import for what: README.md beside this file.
 */

// Reading and writing checkpoints.
export type { CheckpointManifest, NewCheckpoint, SnapshotStore, StoreProgress } from './snapshot-store';
// A session's timeline log, beside its checkpoints (both stores implement it).
export {
  DEFAULT_TIMELINE_PAGE,
  MAX_TIMELINE_PAGE,
  MAX_TIMELINE_RECORD_BYTES,
  TimelineRecord,
  type ReadTimelineOptions,
  type TimelineLog,
  type TimelinePage,
} from './timeline-log';
export { isUnchangedRange, sourceBytes, sourceStream, type StateSource, type UnchangedRange } from './state-source';

// Opening a store: from the configuration, or from explicit options (tests, benchmarks).
export { chunkCodecFor, ensureDevMasterKey, openSnapshotStore } from './open-snapshot-store';
export { openBlobBackend } from './blob/open';
export {
  DEFAULT_PART_BYTES,
  DEFAULT_PART_CONCURRENCY,
  S3BlobBackend,
  type S3BlobBackendOptions,
} from './blob/s3-backend';
export { ChunkedSnapshotStore, TENANTS_DIR } from './engine/chunked-store';
export { Keyring, MASTER_KEY_VARIABLES, type KeySources, type KeyVariables } from './engine/keyring';
export { FsSnapshotStore } from './fs-snapshot-store';
// What the configuration's chunking and codec settings mean.
export { chunkerFor, DEFAULT_CHUNKER } from './engine/chunker';
export { CODECS, isCodecAvailable } from './engine/codec';

// The operator's verbs: verify, gc, rekey, shred.
export type { GcReport, SnapshotMaintenance, VerifyResult } from './snapshot-maintenance';
export { ABANDONED_AFTER_MS, type AbandonedReport, type CleanAbandonedOptions } from './abandoned';

// Portable archives of checkpoints (export and import between deployments).
export {
  ARCHIVE_FORMAT_VERSION,
  ARCHIVE_MEDIA_TYPE,
  ArchiveHeader,
  exportArchive,
  generateArchiveKeyPair,
  importArchive,
  openArchive,
  readArchiveHeader,
  verifyArchive,
  type ArchiveKey,
  type ArchiveSeal,
  type ExportOptions,
  type ImportOptions,
} from './archive';

// Errors.
export * from './errors';

// Formats.
export {
  CHUNKED_FORMAT_VERSION,
  ENGINE_FORMAT_VERSION,
  LEGACY_FORMAT_VERSION,
  READABLE_FORMAT_VERSIONS,
  TABLE_FORMAT_VERSION,
} from './format';
