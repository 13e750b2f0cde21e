import type { Config } from '../../config';
import type { BlobBackend } from './backend';
import { FsBlobBackend } from './fs-backend';
import { S3BlobBackend } from './s3-backend';

/**
 * The blob backend the configuration names: a bucket on an S3-compatible server (`DS_SNAPSHOT_STORE=s3://…`, with
 * credentials from the standard AWS chain), or the filesystem store's directory.
 */
export function openBlobBackend(config: Pick<Config, 'snapshotStore'>): BlobBackend {
  const store = config.snapshotStore;
  if (store.kind === 's3') {
    return new S3BlobBackend({
      bucket: store.bucket,
      prefix: store.prefix,
      ...(store.endpoint !== undefined ? { endpoint: store.endpoint } : {}),
      ...(store.region !== undefined ? { region: store.region } : {}),
      forcePathStyle: store.forcePathStyle,
    });
  }
  return new FsBlobBackend(store.dir);
}
