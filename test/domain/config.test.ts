import { ConfigError, loadConfig } from '../../src/config';
import { chunkerFor, DEFAULT_CHUNKER } from '../../src/snapshots/engine/chunker';
import { CODECS, isCodecAvailable } from '../../src/snapshots/engine/codec';
import { chunkCodecFor, snapshotStoreFromConfig } from '../../src/snapshots/store-from-config';

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

  test('the store a worker builds from its settings reports the codec they name (what the worker prints at start)', async () => {
    const store = (env: Record<string, string>) =>
      snapshotStoreFromConfig(loadConfig({ DS_SNAPSHOT_ENCRYPTION: 'none', DS_SNAPSHOT_DIR: '/nonexistent', ...env }));
    expect((await store({ DS_SNAPSHOT_CODEC: 'brotli' })).describeCodec()).toBe('brotli');
    expect((await store({})).describeCodec()).toBe(isCodecAvailable(CODECS.zstd) ? 'zstd' : 'brotli');
  });
});
