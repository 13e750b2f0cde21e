import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { ConfigError, loadConfig, SECRET_VARIABLES } from '../../src/config';
import { openBlobBackend } from '../../src/snapshots';
import { ensureDevPayloadKey, payloadKeyringFromConfig } from '../../src/payloads';
import {
  Keyring,
  chunkCodecFor,
  chunkerFor,
  CODECS,
  DEFAULT_CHUNKER,
  isCodecAvailable,
  openSnapshotStore as snapshotStoreFromConfig,
} from '../../src/snapshots';

describe('snapshot settings from the environment', () => {
  test("defaults: format 3, the engine's chunk sizes", () => {
    const { snapshots } = loadConfig({});
    expect(snapshots).toMatchObject({ formatVersion: 3 });
    expect(chunkerFor(snapshots.chunkBytes)).toEqual(DEFAULT_CHUNKER);
  });

  test('DS_SNAPSHOT_FORMAT and DS_CHUNK_KIB', () => {
    const { snapshots } = loadConfig({ DS_SNAPSHOT_FORMAT: '2', DS_CHUNK_KIB: '64' });
    expect(snapshots).toMatchObject({ formatVersion: 2, chunkBytes: 64 * 1024 });
    expect(chunkerFor(snapshots.chunkBytes)).toEqual({ minSize: 16 * 1024, avgSize: 64 * 1024, maxSize: 256 * 1024 });
  });

  test('other values are refused, naming the variable', () => {
    expect(() => loadConfig({ DS_SNAPSHOT_FORMAT: '4' })).toThrow(ConfigError);
    expect(() => loadConfig({ DS_CHUNK_KIB: '48' })).toThrow(/DS_CHUNK_KIB: expected 16, 32, 64, 128 or 256/);
  });

  test('DS_SNAPSHOT_CODEC: auto by default; brotli forces Brotli; zstd refuses a machine without the binding', () => {
    expect(loadConfig({}).snapshots.codec).toBe('auto');
    expect(loadConfig({ DS_SNAPSHOT_CODEC: 'brotli' }).snapshots.codec).toBe('brotli');
    expect(() => loadConfig({ DS_SNAPSHOT_CODEC: 'lz4' })).toThrow(/DS_SNAPSHOT_CODEC: expected auto, zstd or brotli/);
    expect(chunkCodecFor('auto', () => true)).toBeUndefined();
    expect(chunkCodecFor('brotli', () => true)).toBe(CODECS.brotli);
    expect(chunkCodecFor('zstd', () => true)).toBe(CODECS.zstd);
    expect(() => chunkCodecFor('zstd', () => false)).toThrow(/zstd-napi binding is not installed/);
  });

  test('DS_NATIVE_SEALER: auto, on or off; anything else stops the worker at start', () => {
    for (const mode of ['auto', 'on', 'off']) expect(() => loadConfig({ DS_NATIVE_SEALER: mode })).not.toThrow();
    expect(() => loadConfig({ DS_NATIVE_SEALER: 'yes' })).toThrow(/DS_NATIVE_SEALER: expected auto, on or off/);
  });

  test('the store a worker builds from its settings reports the codec they name (what the worker prints at start)', async () => {
    const parent = fs.mkdtempSync(path.join(os.tmpdir(), 'ds-config-'));
    const dir = path.join(parent, 'snapshots');
    const store = (env: Record<string, string>) =>
      snapshotStoreFromConfig(loadConfig({ DS_SNAPSHOT_ENCRYPTION: 'none', DS_SNAPSHOT_DIR: dir, ...env }));
    expect((await store({ DS_SNAPSHOT_CODEC: 'brotli' })).describeCodec()).toBe('brotli');
    expect((await store({})).describeCodec()).toBe(isCodecAvailable(CODECS.zstd) ? 'zstd' : 'brotli');
    // Only the worker may read the store it made.
    expect(fs.statSync(dir).mode & 0o777).toBe(0o700);
    fs.rmSync(parent, { recursive: true });
  });
});

test('the store opens with the master keys its configuration names, not those of the process environment', async () => {
  const parent = fs.mkdtempSync(path.join(os.tmpdir(), 'ds-config-'));
  try {
    const env = {
      DS_SNAPSHOT_DIR: path.join(parent, 'snapshots'),
      DS_DATA_DIR: parent,
      DS_MASTER_KEYS: `m1:${Keyring.generateKey()},m2:${Keyring.generateKey()}`,
      DS_MASTER_KEY_PRIMARY: 'm1',
    };
    expect(process.env.DS_MASTER_KEYS).toBeUndefined();
    const store = await snapshotStoreFromConfig(loadConfig(env));
    expect(store.describeEncryption()).toMatchObject({ mode: 'aes-256-gcm', primaryKeyId: 'm1' });
    await expect(snapshotStoreFromConfig(loadConfig({ DS_DATA_DIR: parent }))).rejects.toThrow(
      /snapshot encryption is on but no master key is configured/,
    );
  } finally {
    fs.rmSync(parent, { recursive: true, force: true });
  }
});

describe('variables the worker does not know', () => {
  test('an unknown DS_ variable is refused, naming it and the variable it probably meant', () => {
    expect(() => loadConfig({ DS_SNAPSHOT_DRI: '/srv/snapshots' })).toThrow(ConfigError);
    expect(() => loadConfig({ DS_SNAPSHOT_DRI: '/srv/snapshots' })).toThrow(
      'DS_SNAPSHOT_DRI: unknown variable (did you mean DS_SNAPSHOT_DIR?)',
    );
    expect(() => loadConfig({ DS_FROBNICATE: '1' })).toThrow(/DS_FROBNICATE: unknown variable$/m);
    // Other variables, and the test suite's DS_TEST_*, are the environment's business.
    const tests = { DS_TEST_TEMPORAL_ADDRESS: '127.0.0.1:1', DS_TEST_WORKFLOW_BUNDLE: 'b', DS_TEST_TMP: 't' };
    expect(() => loadConfig({ ...tests, HOME: '/root', DSX: '1', ds_lower: '1' })).not.toThrow();
  });

  test('every mistake at once: unknown variables and refused values', () => {
    const error = catchConfigError({ DS_WORKSPACE_DRI: 'w', DS_CHUNK_KIB: '48' });
    expect(error.issues.map((issue) => [issue.path.join('.'), issue.message])).toEqual([
      ['DS_WORKSPACE_DRI', 'unknown variable (did you mean DS_WORKSPACE_DIR?)'],
      ['DS_CHUNK_KIB', 'expected 16, 32, 64, 128 or 256'],
    ]);
  });
});

describe('what workspace commands inherit and who runs them', () => {
  test('DS_WORKSPACE_ENV_ALLOW: unset leaves the default to the runtime; a list replaces it', () => {
    expect(loadConfig({}).workspaceEnvAllow).toBeUndefined();
    expect(loadConfig({ DS_WORKSPACE_ENV_ALLOW: 'PATH, HOME,LC_*' }).workspaceEnvAllow).toEqual([
      'PATH',
      'HOME',
      'LC_*',
    ]);
  });

  test('DS_WORKSPACE_ENV_ALLOW refuses entries that would pass the worker variables', () => {
    const error = catchConfigError({ DS_WORKSPACE_ENV_ALLOW: 'PATH,DS_*,TEMPORAL_API_KEY,*,a-b,AWS_*,AWS_REGION' });
    expect(error.message).toBe(
      [
        'invalid configuration:',
        "  DS_WORKSPACE_ENV_ALLOW: DS_* would pass the worker's own variables (DS_*, TEMPORAL_*) to sessions",
        "  DS_WORKSPACE_ENV_ALLOW: TEMPORAL_API_KEY would pass the worker's own variables (DS_*, TEMPORAL_*) to sessions",
        "  DS_WORKSPACE_ENV_ALLOW: * would pass the worker's own variables (DS_*, TEMPORAL_*) to sessions",
        '  DS_WORKSPACE_ENV_ALLOW: "a-b" is not a variable name or a prefix ending in *',
        "  DS_WORKSPACE_ENV_ALLOW: AWS_* would pass the worker's secret AWS_ACCESS_KEY_ID to sessions",
      ].join('\n'),
    );
  });

  test('DS_WORKSPACE_USER: a name or uid:gid, never root', () => {
    expect(loadConfig({}).workspaceUser).toBeUndefined();
    expect(loadConfig({ DS_WORKSPACE_USER: 'ds-session' }).workspaceUser).toBe('ds-session');
    expect(loadConfig({ DS_WORKSPACE_USER: '1000:1001' }).workspaceUser).toEqual({ uid: 1000, gid: 1001 });
    for (const root of ['root', '0:0']) {
      expect(() => loadConfig({ DS_WORKSPACE_USER: root })).toThrow(
        'DS_WORKSPACE_USER: expected an unprivileged user, not root',
      );
    }
    expect(() => loadConfig({ DS_WORKSPACE_USER: 'a b' })).toThrow(
      'DS_WORKSPACE_USER: expected a user name or uid:gid',
    );
  });

  test("the secret variables are the master and payload keys, the Temporal and S3 credentials and the gateway's TLS and cursor keys", () => {
    expect(SECRET_VARIABLES).toEqual([
      'DS_MASTER_KEYS',
      'DS_MASTER_KEY_DIR',
      'DS_PAYLOAD_KEYS',
      'DS_PAYLOAD_KEY_DIR',
      'TEMPORAL_API_KEY',
      'TEMPORAL_TLS_KEY_PATH',
      'DS_GATEWAY_TLS_KEY',
      'DS_GATEWAY_CURSOR_KEY',
      'AWS_ACCESS_KEY_ID',
      'AWS_SECRET_ACCESS_KEY',
      'AWS_SESSION_TOKEN',
    ]);
  });

  test('a cursor key must be base64 of 32 bytes or more', () => {
    expect(catchConfigError({ DS_GATEWAY_CURSOR_KEY: 'c2hvcnQ=' }).message).toMatch(/DS_GATEWAY_CURSOR_KEY/);
    const key = Buffer.alloc(32, 7);
    expect(loadConfig({ DS_GATEWAY_CURSOR_KEY: key.toString('base64') }).gateway.cursorKey).toEqual(key);
  });
});

function catchConfigError(env: NodeJS.ProcessEnv): ConfigError {
  try {
    loadConfig(env);
  } catch (error) {
    if (error instanceof ConfigError) return error;
    throw error;
  }
  throw new Error('expected a ConfigError');
}

describe('worker settings from the environment', () => {
  test("DS_MAX_CACHED_WORKFLOWS: unset leaves the worker's default; a count bounds the cache; anything else is refused", () => {
    expect(loadConfig({}).maxCachedWorkflows).toBeUndefined();
    expect(loadConfig({ DS_MAX_CACHED_WORKFLOWS: '200' }).maxCachedWorkflows).toBe(200);
    expect(() => loadConfig({ DS_MAX_CACHED_WORKFLOWS: 'lots' })).toThrow(/DS_MAX_CACHED_WORKFLOWS: expected a number/);
    expect(() => loadConfig({ DS_MAX_CACHED_WORKFLOWS: '-1' })).toThrow(/DS_MAX_CACHED_WORKFLOWS/);
  });

  test('API keys come from a file or from DS_API_KEYS, never both', () => {
    expect(loadConfig({ DS_API_KEYS: '{"keys":[]}' }).gateway).toMatchObject({ keysJson: '{"keys":[]}' });
    expect(loadConfig({ DS_API_KEYS_FILE: 'k.json' }).gateway.keysJson).toBeUndefined();
    expect(() => loadConfig({ DS_API_KEYS: '{"keys":[]}', DS_API_KEYS_FILE: 'k.json' })).toThrow(
      /DS_API_KEYS: set DS_API_KEYS or DS_API_KEYS_FILE, not both/,
    );
  });
});

describe('payload encryption settings', () => {
  test('on by default; none only when set; key sources resolved', () => {
    expect(loadConfig({}).payloads).toEqual({ encryption: 'aes-256-gcm' });
    expect(loadConfig({ DS_PAYLOAD_ENCRYPTION: 'none' }).payloads.encryption).toBe('none');
    expect(loadConfig({ DS_PAYLOAD_KEY_DIR: 'pk' }).payloads.keyDir).toBe(path.resolve('pk'));
    expect(() => loadConfig({ DS_PAYLOAD_ENCRYPTION: 'aes' })).toThrow(
      /DS_PAYLOAD_ENCRYPTION: expected aes-256-gcm or none/,
    );
    expect(() => loadConfig({ DS_PAYLOAD_KEY_PRIMARY: '../x' })).toThrow(/DS_PAYLOAD_KEY_PRIMARY: expected a key id/);
  });

  test('DS_CODEC_CORS_ORIGINS takes origins only', () => {
    expect(
      loadConfig({ DS_CODEC_CORS_ORIGINS: 'http://127.0.0.1:8233, https://ui.example.com' }).codecCorsOrigins,
    ).toEqual(['http://127.0.0.1:8233', 'https://ui.example.com']);
    expect(loadConfig({}).codecCorsOrigins).toEqual([]);
    for (const bad of ['http://ui.example.com/', 'ui.example.com', 'ftp://x', '*']) {
      expect(() => loadConfig({ DS_CODEC_CORS_ORIGINS: bad })).toThrow(/DS_CODEC_CORS_ORIGINS: .* is not an origin/);
    }
  });

  test('payload keys: a missing key with encryption on is refused; none without keys writes plaintext', async () => {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'ds-payload-keys-'));
    try {
      await expect(payloadKeyringFromConfig(loadConfig({ DS_DATA_DIR: dataDir }))).rejects.toThrow(
        /payload encryption is on but no payload key is configured/,
      );
      expect(await payloadKeyringFromConfig(loadConfig({ DS_DATA_DIR: dataDir, DS_PAYLOAD_ENCRYPTION: 'none' }))).toBe(
        null,
      );
      const dir = await ensureDevPayloadKey(dataDir);
      expect(fs.statSync(path.join(dir, 'dev-1.key')).mode & 0o777).toBe(0o600);
      const keyring = await payloadKeyringFromConfig(loadConfig({ DS_DATA_DIR: dataDir }));
      expect(keyring?.primaryKeyId).toBe('dev-1');
      const env = {
        DS_PAYLOAD_KEYS: `a:${Keyring.generateKey()},b:${Keyring.generateKey()}`,
        DS_PAYLOAD_KEY_PRIMARY: 'a',
      };
      expect((await payloadKeyringFromConfig(loadConfig(env)))?.toJSON()).toEqual({
        primaryKeyId: 'a',
        keyIds: ['a', 'b'],
      });
      // A payload key never goes by the master keys' variables, nor their messages.
      const short = { DS_PAYLOAD_KEYS: 'a:AAAA' };
      await expect(payloadKeyringFromConfig(loadConfig(short))).rejects.toThrow(
        /payload key 'a' in DS_PAYLOAD_KEYS is 3 bytes/,
      );
    } finally {
      fs.rmSync(dataDir, { recursive: true, force: true });
    }
  });
});

describe('where snapshots are kept', () => {
  test('unset or a directory: the filesystem store; s3://bucket/prefix: an S3 bucket with its settings', () => {
    expect(loadConfig({ DS_DATA_DIR: '/srv/ds' }).snapshotStore).toEqual({ kind: 'fs', dir: '/srv/ds/snapshots' });
    const dir = loadConfig({ DS_SNAPSHOT_STORE: '/mnt/shared/snapshots' });
    expect(dir.snapshotStore).toEqual({ kind: 'fs', dir: '/mnt/shared/snapshots' });
    expect(dir.snapshotDir).toBe('/mnt/shared/snapshots');
    const s3 = loadConfig({
      DS_SNAPSHOT_STORE: 's3://ds-fleet/prod/eu/',
      DS_S3_ENDPOINT: 'http://127.0.0.1:7070',
      DS_S3_REGION: 'eu-west-1',
      DS_S3_FORCE_PATH_STYLE: 'true',
    });
    expect(s3.snapshotStore).toEqual({
      kind: 's3',
      bucket: 'ds-fleet',
      prefix: 'prod/eu',
      endpoint: 'http://127.0.0.1:7070',
      region: 'eu-west-1',
      forcePathStyle: true,
    });
    expect(loadConfig({ DS_SNAPSHOT_STORE: 's3://bucket' }).snapshotStore).toEqual({
      kind: 's3',
      bucket: 'bucket',
      prefix: '',
      forcePathStyle: false,
    });
  });

  test('bad values are refused, naming the variable', () => {
    const refused = (env: Record<string, string>, message: RegExp) => expect(() => loadConfig(env)).toThrow(message);
    refused({ DS_SNAPSHOT_STORE: 'gs://bucket/x' }, /DS_SNAPSHOT_STORE: gs:\/\/ is not a store this worker knows/);
    refused({ DS_SNAPSHOT_STORE: 's3://Bad_Bucket/x' }, /DS_SNAPSHOT_STORE: "Bad_Bucket" is not an S3 bucket name/);
    refused({ DS_SNAPSHOT_STORE: 's3://bucket/a/../b' }, /DS_SNAPSHOT_STORE: the prefix has a segment "\.\."/);
    refused({ DS_SNAPSHOT_STORE: 's3://bucket//b' }, /DS_SNAPSHOT_STORE: the prefix has a segment ""/);
    refused({ DS_SNAPSHOT_STORE: 's3://b/x', DS_SNAPSHOT_DIR: '/srv' }, /DS_SNAPSHOT_STORE: set DS_SNAPSHOT_STORE or/);
    refused(
      { DS_SNAPSHOT_STORE: 's3://b/x', DS_S3_ENDPOINT: 'localhost:7070' },
      /DS_S3_ENDPOINT: expected an http\(s\) URL/,
    );
    refused({ DS_SNAPSHOT_STORE: 's3://bkt', DS_S3_REGION: 'EU West' }, /DS_S3_REGION: expected a region name/);
    refused(
      { DS_SNAPSHOT_STORE: 's3://bkt', DS_S3_FORCE_PATH_STYLE: 'maybe' },
      /DS_S3_FORCE_PATH_STYLE: expected true/,
    );
    refused({ DS_S3_ENDPOINT: 'http://127.0.0.1:7070' }, /DS_S3_ENDPOINT: only with an S3 store/);
  });

  test('openBlobBackend opens the bucket or the directory the configuration names', async () => {
    const backend = openBlobBackend(
      loadConfig({ DS_SNAPSHOT_STORE: 's3://ds-fleet/prod', DS_S3_ENDPOINT: 'http://127.0.0.1:1' }),
    );
    expect(backend.location).toBe('s3://ds-fleet/prod');
    await backend.close();
    const dir = openBlobBackend(loadConfig({ DS_SNAPSHOT_STORE: '/srv/ds/snapshots' }));
    expect(dir.location).toBe('file:///srv/ds/snapshots');
    await dir.close();
  });
});
