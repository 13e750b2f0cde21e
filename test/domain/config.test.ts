import { ConfigError, loadConfig } from '../../src/config';
import { chunkerFor, DEFAULT_CHUNKER } from '../../src/snapshots/engine/chunker';

describe('snapshot settings from the environment', () => {
  test("defaults: format 3, the engine's chunk sizes", () => {
    const { snapshots } = loadConfig({});
    expect(snapshots).toMatchObject({ formatVersion: 3 });
    expect(chunkerFor(snapshots.chunkBytes)).toEqual(DEFAULT_CHUNKER);
  });

  test('DS_SNAPSHOT_FORMAT and DS_CHUNK_KIB', () => {
    const { snapshots } = loadConfig({ DS_SNAPSHOT_FORMAT: '2', DS_CHUNK_KIB: '32' });
    expect(snapshots).toMatchObject({ formatVersion: 2, chunkBytes: 32 * 1024 });
    expect(chunkerFor(snapshots.chunkBytes)).toEqual({ minSize: 8 * 1024, avgSize: 32 * 1024, maxSize: 128 * 1024 });
  });

  test('other values are refused, naming the variable', () => {
    expect(() => loadConfig({ DS_SNAPSHOT_FORMAT: '4' })).toThrow(ConfigError);
    expect(() => loadConfig({ DS_CHUNK_KIB: '48' })).toThrow(/DS_CHUNK_KIB: expected 16, 32, 64, 128 or 256/);
  });
});
