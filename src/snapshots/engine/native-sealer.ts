/**
 * The engine's batch sealer in C (native/sealer.c, built by scripts/build-native.sh into .tools/native/): chunk ids
 * and AES-256-GCM for a whole batch in one call, with one cipher and one HMAC context per thread, where Node's crypto
 * makes a cipher and an HMAC object per chunk. It writes the bytes crypto.ts writes; it is used only when it loads and
 * a self-check seals, ids and opens a known chunk exactly as crypto.ts does, else the engine stays on its JS path.
 * `DS_NATIVE_SEALER=off` keeps the JS path; `on` makes a sealer that does not load or check an error.
 */
import { createHmac } from 'node:crypto';
import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { ObjectSealer } from './crypto';

export interface NativeSealer {
  /** HMAC-SHA-256 under `idKey` of each of the first `count` chunks of `data` (cut at `sizes`), 32 bytes each into `ids`. */
  chunkIds(idKey: Buffer, data: Buffer, sizes: Uint32Array, count: number, ids: Buffer): void;
  /**
   * Seals `count` objects laid out in `out` (prefix and nonce written): `objects` holds four words per object — its
   * offset, its prefix's length, its body's length, and where the body is in `source` (SEAL_IN_PLACE: already in
   * `out`, where the ciphertext goes).
   */
  seal(key: Buffer, source: Buffer, out: Buffer, objects: Uint32Array, count: number): void;
  /**
   * Decrypts and authenticates `count` objects of `sealed` (offset, prefix length, body length, output offset in
   * `out`); -1 when all authenticate, else the index of the first that does not (its output and earlier ones zeroed).
   */
  open(key: Buffer, sealed: Buffer, out: Buffer, objects: Uint32Array, count: number): number;
}

/** `sourceAt` of an object whose plaintext body is already in the output buffer. */
export const SEAL_IN_PLACE = 0xffffffff;

/** Where scripts/build-native.sh leaves the sealer (a link to the build of the current source). */
export const NATIVE_SEALER_PATH = resolve(__dirname, '..', '..', '..', '.tools', 'native', 'sealer.node');

let loaded: { sealer: NativeSealer | null; why: string } | undefined;

/** This thread's native sealer, or null (the JS path). Loaded and checked once per thread. */
export function nativeSealer(): NativeSealer | null {
  loaded ??= load();
  return loaded.sealer;
}

/** Why the native sealer is or is not in use, for the benchmark's report. */
export function nativeSealerStatus(): string {
  loaded ??= load();
  return loaded.why;
}

/** Forgets this thread's choice, so the next seal reads DS_NATIVE_SEALER again (for comparing both paths in one run). */
export function reloadNativeSealer(): void {
  loaded = undefined;
}

function load(): { sealer: NativeSealer | null; why: string } {
  const mode = process.env.DS_NATIVE_SEALER ?? 'auto';
  if (mode === 'off') return { sealer: null, why: 'off (DS_NATIVE_SEALER=off)' };
  let why: string;
  if (!existsSync(NATIVE_SEALER_PATH)) {
    why = `not built (${NATIVE_SEALER_PATH}; npm run setup builds it)`;
  } else {
    try {
      const module = { exports: {} as NativeSealer };
      process.dlopen(module, NATIVE_SEALER_PATH);
      const mismatch = selfCheck(module.exports);
      if (mismatch === null) return { sealer: module.exports, why: 'native' };
      why = `failed its self-check: ${mismatch}`;
    } catch (err) {
      why = `did not load: ${err instanceof Error ? err.message : String(err)}`;
    }
  }
  if (mode === 'on') throw new Error(`DS_NATIVE_SEALER=on but the native sealer ${why}`);
  return { sealer: null, why: `js (native sealer ${why})` };
}

/**
 * Seals, ids and opens a known chunk natively and compares with crypto.ts: null when every byte agrees, else what
 * differed. A sealer built against another OpenSSL or from a stale source is refused here rather than trusted.
 */
export function selfCheck(sealer: NativeSealer): string | null {
  const key = Buffer.alloc(32, 7);
  const idKey = Buffer.alloc(32, 9);
  const chunk = Buffer.alloc(1000);
  for (let i = 0; i < chunk.length; i++) chunk[i] = (i * 31 + 5) & 0xff;
  const ids = Buffer.alloc(64);
  sealer.chunkIds(idKey, chunk, new Uint32Array([600, 400]), 2, ids);
  for (const [i, part] of [chunk.subarray(0, 600), chunk.subarray(600)].entries()) {
    if (!ids.subarray(32 * i, 32 * i + 32).equals(createHmac('sha256', idKey).update(part).digest())) {
      return 'chunk ids differ';
    }
  }
  const id = ids.toString('hex', 0, 32);
  const objects = new ObjectSealer(
    { kind: 'chunk', tenant: 'check', lineage: 'check', objectId: id, formatVersion: 1, codec: 0, dataKeyId: 'k' },
    key,
  );
  const expected = Buffer.alloc(objects.sealedLength(chunk.length));
  objects.sealInto(chunk, id, 0, expected, 0);
  const actual = Buffer.alloc(expected.length);
  const bodyAt = objects.layoutInto(chunk.length, id, 0, actual, 0)!;
  expected.copy(actual, 0, 0, bodyAt); // the same nonce
  sealer.seal(key, chunk, actual, new Uint32Array([0, bodyAt - 12, chunk.length, 0]), 1);
  if (!actual.equals(expected)) return 'sealed bytes differ';
  const opened = Buffer.alloc(chunk.length);
  const layout = new Uint32Array([0, bodyAt - 12, chunk.length, 0]);
  if (sealer.open(key, expected, opened, layout, 1) !== -1 || !opened.equals(chunk)) return 'open differs';
  expected[bodyAt + 10]! ^= 1;
  if (sealer.open(key, expected, opened, layout, 1) !== 0 || opened.some((b) => b !== 0)) {
    return 'an altered object opened';
  }
  return null;
}
