import { randomBytes } from 'node:crypto';
import { defaultPayloadConverter, type Payload } from '@temporalio/common';
import {
  KEY_ID_METADATA,
  PayloadEncryptionCodec,
  PayloadKeyUnavailableError,
  PayloadTamperedError,
} from '../../src/payloads';
import { Keyring } from '../../src/snapshots';

const K1 = randomBytes(32);
const K2 = randomBytes(32);
const old = new Keyring([{ id: 'p1', key: K1 }]);
const rotated = new Keyring([
  { id: 'p1', key: K1 },
  { id: 'p2', key: K2 },
]);
const text = new TextDecoder();

const payload = (value: unknown): Payload => defaultPayloadConverter.toPayload(value);
const valueOf = (p: Payload): unknown => defaultPayloadConverter.fromPayload(p);
const keyIdOf = (p: Payload) => text.decode(p.metadata![KEY_ID_METADATA]);

describe('PayloadEncryptionCodec', () => {
  const secret = { env: { DB_PASSWORD: 'hunter2-in-the-spec' } };

  test('round-trips a payload, and the ciphertext holds none of it', async () => {
    const codec = new PayloadEncryptionCodec(old);
    const [sealed] = await codec.encode([payload(secret)]);
    expect(text.decode(sealed!.metadata!.encoding)).toBe('binary/encrypted');
    expect(keyIdOf(sealed!)).toBe('p1');
    expect(Buffer.from(sealed!.data!).includes('hunter2')).toBe(false);
    expect(Buffer.from(sealed!.data!).includes('json/plain')).toBe(false);
    const [opened] = await codec.decode([sealed!]);
    expect(valueOf(opened!)).toEqual(secret);
  });

  test('seals each payload with a nonce of its own: equal values never look equal', async () => {
    const codec = new PayloadEncryptionCodec(old);
    const [a, b] = await codec.encode([payload('same'), payload('same')]);
    expect(Buffer.from(a!.data!).equals(Buffer.from(b!.data!))).toBe(false);
  });

  test('rotation: new payloads go under the newest key, old ones stay readable while their key is configured', async () => {
    const [underOld] = await new PayloadEncryptionCodec(old).encode([payload('before')]);
    const codec = new PayloadEncryptionCodec(rotated);
    expect(codec.describe()).toEqual({ mode: 'aes-256-gcm', primaryKeyId: 'p2' });
    const [underNew] = await codec.encode([payload('after')]);
    expect(keyIdOf(underNew!)).toBe('p2');
    expect((await codec.decode([underOld!, underNew!])).map(valueOf)).toEqual(['before', 'after']);
  });

  test('a payload under a key that is not configured is KeyUnavailable, naming the key', async () => {
    const [underNew] = await new PayloadEncryptionCodec(rotated).encode([payload('after')]);
    const error = await new PayloadEncryptionCodec(old).decode([underNew!]).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(PayloadKeyUnavailableError);
    expect(error).toMatchObject({ code: 'KeyUnavailable', keyId: 'p2' });
  });

  test.each([
    ['a flipped ciphertext bit', (p: Payload) => ({ ...p, data: flip(p.data!, 20) })],
    ['a flipped tag bit', (p: Payload) => ({ ...p, data: flip(p.data!, p.data!.length - 1) })],
    ['bytes cut short', (p: Payload) => ({ ...p, data: p.data!.subarray(0, 20) })],
    [
      'the key id relabelled',
      (p: Payload) => ({ ...p, metadata: { ...p.metadata, [KEY_ID_METADATA]: new TextEncoder().encode('p1') } }),
    ],
    ['no key id', (p: Payload) => ({ ...p, metadata: { encoding: p.metadata!.encoding! } })],
  ])('%s is PayloadTampered, and nothing of it is returned', async (_, tamper) => {
    const codec = new PayloadEncryptionCodec(rotated);
    const [sealed] = await codec.encode([payload(secret)]);
    const error = await codec.decode([tamper(sealed!)]).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(PayloadTamperedError);
    expect(String((error as Error).message)).not.toMatch(/hunter2/);
  });

  test('plaintext payloads (histories from before encryption) pass through decode unchanged', async () => {
    const plain = payload(secret);
    const [out] = await new PayloadEncryptionCodec(rotated).decode([plain]);
    expect(out).toBe(plain);
  });

  test('with encryption off, new payloads stay plaintext and encrypted ones are still read', async () => {
    const [sealed] = await new PayloadEncryptionCodec(old).encode([payload('sealed')]);
    const off = new PayloadEncryptionCodec(old, false);
    expect(off.describe()).toEqual({ mode: 'none' });
    const plain = payload('plain');
    expect(await off.encode([plain])).toEqual([plain]);
    expect((await off.decode([sealed!])).map(valueOf)).toEqual(['sealed']);
    // Without any key, an encrypted payload is refused by name, never handed on as bytes.
    await expect(new PayloadEncryptionCodec(null).decode([sealed!])).rejects.toBeInstanceOf(PayloadKeyUnavailableError);
  });
});

function flip(data: Uint8Array, at: number): Uint8Array {
  const copy = Uint8Array.from(data);
  copy[at] = copy[at]! ^ 1;
  return copy;
}
