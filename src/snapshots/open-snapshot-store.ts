import fs from 'node:fs/promises';
import path from 'node:path';
import type { Config } from '../config';
import { openBlobBackend } from './blob/open';
import { ChunkedSnapshotStore } from './engine/chunked-store';
import { chunkerFor } from './engine/chunker';
import { CODECS, isCodecAvailable, type CodecId } from './engine/codec';
import { Keyring, MASTER_KEY_VARIABLES } from './engine/keyring';
import { MissingMasterKeyError } from './errors';

/**
 * The master keys from the configuration, or null for explicitly configured plaintext. Without DS_MASTER_KEYS or
 * DS_MASTER_KEY_DIR, the keys in `<DS_DATA_DIR>/keys` are used if that folder exists (the embedded default).
 */
async function keyringFromConfig(config: Config): Promise<Keyring | null> {
  const { encryption, masterKeys, masterKeyDir, masterKeyPrimary } = config.snapshots;
  if (encryption === 'none') return null;
  const sources = {
    dir: masterKeyDir,
    list: masterKeys,
    primary: masterKeyPrimary,
    defaultDir: defaultKeyDir(config.dataDir),
  };
  const keyring = await Keyring.fromSources(sources, MASTER_KEY_VARIABLES);
  if (!keyring) throw new MissingMasterKeyError();
  return keyring;
}

function defaultKeyDir(dataDir: string): string {
  return path.join(dataDir, 'keys');
}

/**
 * For the embedded default only: a master key generated on first start into `<data>/keys` (mode 0600), so a fresh
 * checkout encrypts its snapshots with no setup. Production configures its own keys.
 */
export async function ensureDevMasterKey(dataDir: string): Promise<string> {
  const dir = defaultKeyDir(dataDir);
  await Keyring.ensureKeyDirectory(dir);
  return dir;
}

/**
 * The codec new chunks are compressed with (undefined: this machine's default).
 * @throws Error for `zstd` on a machine without the zstd-napi binding: a worker must not start and then write what
 *   it was told not to, or fail every checkpoint.
 */
export function chunkCodecFor(
  setting: Config['snapshots']['codec'],
  zstdAvailable: () => boolean = () => isCodecAvailable(CODECS.zstd),
): CodecId | undefined {
  if (setting === 'brotli') return CODECS.brotli;
  if (setting === 'zstd') {
    // Asked only here: the binding is loaded when a setting needs it.
    if (!zstdAvailable()) {
      throw new Error(
        'DS_SNAPSHOT_CODEC=zstd, but the zstd-napi binding is not installed (it is an optional dependency built at ' +
          'install: it needs a C++ toolchain and Node headers); install it, or set DS_SNAPSHOT_CODEC=brotli or auto',
      );
    }
    return CODECS.zstd;
  }
  return undefined;
}

/**
 * The store a worker or the CLI uses, as the configuration describes it: chunked, encrypted under the configured
 * master keys unless plaintext is asked for explicitly, on the backend it names (a bucket for `DS_SNAPSHOT_STORE=s3://…`,
 * else the directory, created with mode 0700).
 * @throws MissingMasterKeyError, KeyringConfigError for keys that are missing or cannot be loaded.
 */
export async function openSnapshotStore(config: Config): Promise<ChunkedSnapshotStore> {
  const codec = chunkCodecFor(config.snapshots.codec);
  const keyring = await keyringFromConfig(config);
  const options = {
    tenant: config.snapshots.tenant,
    keyring,
    formatVersion: config.snapshots.formatVersion,
    chunker: chunkerFor(config.snapshots.chunkBytes),
    ...(codec !== undefined ? { codec } : {}),
  };
  if (config.snapshotStore.kind === 's3') {
    return new ChunkedSnapshotStore({ ...options, backend: openBlobBackend(config) });
  }
  // Only the worker reads the store: a session's command (DS_WORKSPACE_USER) must not even list it.
  await fs.mkdir(config.snapshotDir, { recursive: true, mode: 0o700 });
  return new ChunkedSnapshotStore({ ...options, rootDir: config.snapshotDir });
}
