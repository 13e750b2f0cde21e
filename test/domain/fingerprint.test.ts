import crypto from 'node:crypto';
import fc from 'fast-check';
import { canonicalJson, inputFingerprint, sha256Hex } from '../../src/domain/fingerprint';

test('sha256Hex is SHA-256 (the workflow has no node:crypto)', () => {
  fc.assert(
    fc.property(fc.string({ unit: 'grapheme', maxLength: 300 }), (text) => {
      expect(sha256Hex(text)).toBe(crypto.createHash('sha256').update(text, 'utf8').digest('hex'));
    }),
  );
});

test('the fingerprint ignores field order and the key itself, and nothing else', () => {
  expect(inputFingerprint({ label: 'a', idempotencyKey: 'k', ifIndex: 2 })).toBe(
    inputFingerprint({ ifIndex: 2, label: 'a' }),
  );
  expect(inputFingerprint({ label: 'a' })).not.toBe(inputFingerprint({ label: 'b' }));
  expect(canonicalJson({ b: [1, { d: 1, c: undefined }], a: null })).toBe('{"a":null,"b":[1,{"d":1}]}');
});
