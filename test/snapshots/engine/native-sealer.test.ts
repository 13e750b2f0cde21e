import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import path from 'node:path';
import * as work from '../../../src/snapshots/engine/chunk-work';
import type * as nativeModule from '../../../src/snapshots/engine/native-sealer';
import { ObjectSealer, openObject, sealObject } from '../../../src/snapshots/engine/crypto';
import {
  NATIVE_SEALER_PATH,
  nativeSealer,
  nativeSealerStatus,
  SEAL_IN_PLACE,
  type NativeSealer,
} from '../../../src/snapshots/engine/native-sealer';
import { SnapshotTamperedError } from '../../../src/snapshots/errors';
import { seeded } from '../../helpers/bytes';

// The native sealer must write exactly the bytes of the JS path: these tests seal the same bodies under the same
// nonces both ways, and check that the engine falls back to JS when told to and refuses altered objects either way.

const KiB = 1024;
let native: NativeSealer;

beforeAll(() => {
  if (!existsSync(NATIVE_SEALER_PATH)) {
    execFileSync('bash', [path.join(__dirname, '..', '..', '..', 'scripts', 'build-native.sh')], { stdio: 'inherit' });
  }
  const sealer = nativeSealer();
  expect(nativeSealerStatus()).toBe('native');
  native = sealer!;
});

function keys(): work.ChunkKey {
  return { dataKeyId: 'dk-native', key: randomBytes(32), chunkIdKey: randomBytes(32) };
}

const SIZES = [0, 1, 15, 16, 17, 4 * KiB + 3, 32 * KiB, 64 * KiB + 1];

test.each([0, 1, 2])('seals byte for byte as crypto.ts does, for every size (key %i)', (seed) => {
  const key = keys();
  for (const size of SIZES) {
    const body = seeded(seed * 1000 + size, size);
    const id = work.chunkId(body, key);
    const ids = Buffer.alloc(32);
    native.chunkIds(key.chunkIdKey, body, new Uint32Array([size]), 1, ids);
    expect(ids.toString('hex')).toBe(id);

    const sealer = new ObjectSealer(
      { kind: 'chunk', tenant: 't', lineage: `l${seed}`, formatVersion: 2, objectId: id, codec: 0, dataKeyId: 'dk' },
      key.key,
    );
    const js = Buffer.alloc(sealer.sealedLength(size) + 5);
    sealer.sealInto(body, id, 3, js, 5);
    // Laid out by the sealer with a nonce of its own, then given the JS object's nonce: everything else is native.
    for (const sourceAt of [0, SEAL_IN_PLACE]) {
      const out = Buffer.alloc(js.length);
      const bodyAt = sealer.layoutInto(size, id, 3, out, 5)!;
      js.copy(out, bodyAt - 12, bodyAt - 12, bodyAt);
      if (sourceAt === SEAL_IN_PLACE) body.copy(out, bodyAt);
      native.seal(key.key, body, out, new Uint32Array([5, bodyAt - 12 - 5, size, sourceAt]), 1);
      expect(out.equals(js)).toBe(true);
    }
  }
});

test('ids a batch of chunks in one call as chunkId does each', () => {
  const key = keys();
  const data = seeded(7, 200 * KiB);
  const sizes = [KiB, 0, 50 * KiB, 3, 149 * KiB - 3];
  const ids = Buffer.alloc(32 * sizes.length);
  native.chunkIds(key.chunkIdKey, data, new Uint32Array(sizes), sizes.length, ids);
  let at = 0;
  sizes.forEach((size, i) => {
    expect(ids.toString('hex', 32 * i, 32 * i + 32)).toBe(work.chunkId(data.subarray(at, at + size), key));
    at += size;
  });
  expect(() => native.chunkIds(key.chunkIdKey, data, new Uint32Array([300 * KiB]), 1, ids)).toThrow(/exceed/);
});

/** A batch of incompressible, text-like and repeated chunks, so both ways of taking a body are used. */
function mixedBatch(): { data: Buffer; sizes: number[] } {
  const text = Buffer.from('the quick brown fox jumps over the lazy dog\n'.repeat(800));
  const chunks = [
    seeded(1, 32 * KiB),
    text,
    seeded(2, 17),
    seeded(1, 32 * KiB),
    text.subarray(100),
    seeded(3, 60 * KiB),
  ];
  const data = work.shared(chunks.reduce((n, c) => n + c.length, 0));
  let at = 0;
  for (const c of chunks) at += c.copy(data, at);
  return { data, sizes: chunks.map((c) => c.length) };
}

/** chunk-work.ts as loaded with DS_NATIVE_SEALER=off: the JS path, in this process. */
function jsWork(): typeof work {
  const before = process.env.DS_NATIVE_SEALER;
  process.env.DS_NATIVE_SEALER = 'off';
  try {
    let isolated: typeof work | undefined;
    jest.isolateModules(() => {
      const sealer = require('../../../src/snapshots/engine/native-sealer') as typeof nativeModule; // eslint-disable-line @typescript-eslint/no-require-imports
      expect(sealer.nativeSealer()).toBeNull();
      expect(sealer.nativeSealerStatus()).toMatch(/^off/);
      isolated = require('../../../src/snapshots/engine/chunk-work') as typeof work; // eslint-disable-line @typescript-eslint/no-require-imports
    });
    return isolated!;
  } finally {
    if (before === undefined) delete process.env.DS_NATIVE_SEALER;
    else process.env.DS_NATIVE_SEALER = before;
  }
}

test('a batch sealed natively is laid out as the JS path lays it out, and opens to its chunks', () => {
  const key = keys();
  const context = { tenant: 't', lineage: 'l', formatVersion: 2, key };
  const { data, sizes } = mixedBatch();
  const sealed = work.sealBatch(context, new Set(), data, sizes);
  const js = jsWork().sealBatch(context, new Set(), data, sizes);
  expect(sealed.entries).toEqual(js.entries);
  expect(sealed.entries.filter((e) => 'known' in e).length).toBe(1);
  let at = 0;
  for (const entry of sealed.entries) {
    const chunk = data.subarray(at, at + entry.size);
    at += entry.size;
    if ('known' in entry) continue;
    // Everything before the nonce (magic, header with codec, length and id) is the same; both open to the chunk.
    const prefix =
      entry.length -
      12 -
      16 -
      openObject(sealed.sealed.subarray(entry.at, entry.at + entry.length), () => key.key, {
        kind: 'chunk',
        tenant: 't',
        lineage: 'l',
        objectId: entry.id,
        formatVersion: 2,
        encrypted: true,
      }).plaintext.length;
    expect(sealed.sealed.subarray(entry.at, entry.at + prefix)).toEqual(
      js.sealed.subarray(entry.at, entry.at + prefix),
    );
    for (const batch of [sealed, js]) {
      expect(work.openBatch({ ...context, dataKeyId: key.dataKeyId }, batch.sealed, [entry])).toEqual({
        ok: true,
        chunks: [chunk],
      });
    }
  }
});

test('an altered natively sealed chunk is refused with the same typed error as a JS one', () => {
  const key = keys();
  const context = { tenant: 't', lineage: 'l', formatVersion: 2, key };
  const { data, sizes } = mixedBatch();
  const sealed = work.sealBatch(context, new Set(), data, sizes);
  const entries = sealed.entries.flatMap((e) => ('known' in e ? [] : [e]));
  for (const entry of entries) {
    for (const offset of [10, entry.length - 40, entry.length - 1]) {
      const altered = Buffer.from(sealed.sealed);
      altered[entry.at + offset]! ^= 0x20;
      const result = work.openBatch({ ...context, dataKeyId: key.dataKeyId }, altered, [entry]);
      expect(result.ok).toBe(false);
      if (!result.ok) expect(result.failure).toMatchObject({ kind: 'sealed', id: entry.id });
    }
    const body = Buffer.from(sealed.sealed.subarray(entry.at, entry.at + entry.length));
    body[body.length - 20]! ^= 1;
    const expected = {
      kind: 'chunk' as const,
      tenant: 't',
      lineage: 'l',
      objectId: entry.id,
      formatVersion: 2,
      encrypted: true,
    };
    expect(() => openObject(body, () => key.key, expected)).toThrow(SnapshotTamperedError);
    expect(() => openObject(body, () => key.key, expected)).toThrow(
      expect.objectContaining({ reason: 'tampered' }) as Error,
    );
  }
  // The native open refuses it too, and hands back zeros rather than unauthenticated bytes.
  const object = sealObject(seeded(5, KiB), key.key, {
    kind: 'chunk',
    tenant: 't',
    lineage: 'l',
    objectId: 'x',
    formatVersion: 2,
    codec: 0,
    dataKeyId: 'dk',
  });
  const prefix = object.length - KiB - 16 - 12;
  const layout = new Uint32Array([0, prefix, KiB, 0]);
  const out = Buffer.alloc(KiB);
  expect(native.open(key.key, object, out, layout, 1)).toBe(-1);
  expect(out.equals(seeded(5, KiB))).toBe(true);
  object[prefix + 12 + 100]! ^= 1;
  expect(native.open(key.key, object, out, layout, 1)).toBe(0);
  expect(out.equals(Buffer.alloc(KiB))).toBe(true);
});

test('DS_NATIVE_SEALER=off keeps the JS path, and what it seals the native path opens', () => {
  const key = keys();
  const context = { tenant: 't', lineage: 'l', formatVersion: 2, key };
  const { data, sizes } = mixedBatch();
  const sealed = jsWork().sealBatch(context, new Set(), data, sizes);
  const entries = sealed.entries.flatMap((e) => ('known' in e ? [] : [e]));
  expect(work.openBatch({ ...context, dataKeyId: key.dataKeyId }, sealed.sealed, entries).ok).toBe(true);
});
