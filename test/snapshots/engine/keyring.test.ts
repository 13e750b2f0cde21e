import { randomBytes } from 'node:crypto';
import * as fs from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { inspect } from 'node:util';
import { openObject, sealObject, type ExpectedBinding, type ObjectHeader } from '../../../src/snapshots/engine/crypto';
import { KeyringConfigError, KeyUnavailableError, SnapshotTamperedError } from '../../../src/snapshots/errors';
import {
  createDataKey,
  dataKeyResolver,
  Keyring,
  rewrapDataKey,
  unwrapDataKey,
  wrapDataKey,
  WrappedDataKey,
  type WrapContext,
} from '../../../src/snapshots/engine/keyring';

const K1 = randomBytes(32);
const K2 = randomBytes(32);
const CONTEXT: WrapContext = { tenant: 'acme', lineage: 'lineage-a' };

/** Every spelling of a key an error message might leak. */
function spellings(key: Buffer): string[] {
  return [key.toString('base64'), key.toString('base64url'), key.toString('hex'), key.toString('base64').slice(0, 12)];
}

/** All the text an error shows: message, stack, inspect and JSON. */
function textOf(error: unknown): string {
  return [String(error), (error as Error).stack ?? '', inspect(error, { depth: 5 }), JSON.stringify(error)].join('\n');
}

function errorOf(action: () => unknown): Error {
  try {
    action();
  } catch (error) {
    return error as Error;
  }
  throw new Error('expected an error');
}

async function asyncErrorOf(action: () => Promise<unknown>): Promise<Error> {
  try {
    await action();
  } catch (error) {
    return error as Error;
  }
  throw new Error('expected an error');
}

function flipBase64(value: string): string {
  const bytes = Buffer.from(value, 'base64');
  bytes[0]! ^= 1;
  return bytes.toString('base64');
}

describe('Keyring', () => {
  it('holds keys by id; the primary is the last entry unless named', () => {
    const keyring = new Keyring([
      { id: 'k1', key: K1 },
      { id: 'k2', key: K2 },
    ]);
    expect(keyring.primaryKeyId).toBe('k2');
    expect(keyring.keyIds).toEqual(['k1', 'k2']);
    expect(keyring.get('k1').equals(K1)).toBe(true);
    expect(keyring.has('k3')).toBe(false);
    expect(
      new Keyring(
        [
          { id: 'k1', key: K1 },
          { id: 'k2', key: K2 },
        ],
        'k1',
      ).primaryKeyId,
    ).toBe('k1');
  });

  it('copies keys in: zeroing the caller buffer does not change the keyring', () => {
    const key = Buffer.from(K1);
    const keyring = new Keyring([{ id: 'k1', key }]);
    key.fill(0);
    expect(keyring.get('k1').equals(K1)).toBe(true);
  });

  it('get() of an unknown id throws KeyUnavailableError naming it', () => {
    const error = errorOf(() => new Keyring([{ id: 'k1', key: K1 }]).get('k9'));
    expect(error).toBeInstanceOf(KeyUnavailableError);
    expect(error).toMatchObject({ reason: 'missing-key', keyId: 'k9', keyKind: 'master' });
    expect(error.message).toContain("'k9'");
  });

  it.each(['k1', 'A-Z.a_z-09', '2025-06-01', 'x'.repeat(64)])('accepts key id %s', (id) => {
    expect(new Keyring([{ id, key: K1 }]).primaryKeyId).toBe(id);
  });

  it.each(['', 'a b', 'a/b', 'a:b', 'a,b', 'é', 'x'.repeat(65), 'k1\n'])('refuses key id %j', (id) => {
    expect(() => new Keyring([{ id, key: K1 }])).toThrow(KeyringConfigError);
  });

  it.each<[string, () => unknown, RegExp]>([
    [
      'a duplicate id',
      () =>
        new Keyring([
          { id: 'k1', key: K1 },
          { id: 'k1', key: K2 },
        ]),
      /duplicate master key id 'k1'/,
    ],
    ['a short key', () => new Keyring([{ id: 'k1', key: K1.subarray(0, 16) }]), /'k1' is not 32 bytes/],
    ['no keys', () => new Keyring([]), /at least one/],
    ['an unknown primary', () => new Keyring([{ id: 'k1', key: K1 }], 'k2'), /primary master key 'k2' is not in/],
  ])('refuses %s', (_what, build, message) => {
    expect(build).toThrow(KeyringConfigError);
    expect(build).toThrow(message);
  });

  it('is immutable: withKey / withPrimary / withoutKey return new keyrings', () => {
    const one = new Keyring([{ id: 'k1', key: K1 }]);
    const two = one.withKey('k2', K2);
    expect(two.primaryKeyId).toBe('k1'); // a new key is not primary until asked (rotation hazard)
    expect(one.withKey('k2', K2, { primary: true }).primaryKeyId).toBe('k2');
    expect(two.withPrimary('k2').withoutKey('k1').keyIds).toEqual(['k2']);
    expect(one.keyIds).toEqual(['k1']);
    expect(() => two.withoutKey('k1')).toThrow(/cannot remove primary master key 'k1'/);
  });

  it('never shows key material in inspect, console output or JSON', () => {
    const keyring = new Keyring([
      { id: 'k1', key: K1 },
      { id: 'k2', key: K2 },
    ]);
    const shown = [inspect(keyring, { depth: 10, showHidden: true }), JSON.stringify(keyring), `${String(keyring)}`];
    for (const text of shown)
      for (const spelling of [...spellings(K1), ...spellings(K2)]) expect(text).not.toContain(spelling);
    expect(JSON.parse(JSON.stringify(keyring))).toEqual({ primaryKeyId: 'k2', keyIds: ['k1', 'k2'] });
  });

  it('generateKey() returns base64 of 32 fresh random bytes', () => {
    const a = Keyring.generateKey();
    expect(Buffer.from(a, 'base64')).toHaveLength(32);
    expect(Buffer.from(a, 'base64').toString('base64')).toBe(a);
    expect(Keyring.generateKey()).not.toBe(a);
  });
});

describe('Keyring.fromEnv', () => {
  const b64 = (key: Buffer) => key.toString('base64');

  it('parses DS_MASTER_KEYS; the last key is primary', () => {
    const keyring = Keyring.fromEnv({ DS_MASTER_KEYS: `k1:${b64(K1)}, k2:${b64(K2)},` });
    expect(keyring.keyIds).toEqual(['k1', 'k2']);
    expect(keyring.primaryKeyId).toBe('k2');
    expect(keyring.get('k1').equals(K1)).toBe(true);
    expect(keyring.get('k2').equals(K2)).toBe(true);
  });

  it('DS_MASTER_KEY_PRIMARY names the primary', () => {
    const env = { DS_MASTER_KEYS: `k1:${b64(K1)},k2:${b64(K2)}`, DS_MASTER_KEY_PRIMARY: 'k1' };
    expect(Keyring.fromEnv(env).primaryKeyId).toBe('k1');
    expect(() => Keyring.fromEnv({ ...env, DS_MASTER_KEY_PRIMARY: 'k3' })).toThrow(/primary master key 'k3'/);
  });

  it('accepts base64url keys', () => {
    expect(
      Keyring.fromEnv({ DS_MASTER_KEYS: `k1:${K1.toString('base64url')}` })
        .get('k1')
        .equals(K1),
    ).toBe(true);
  });

  it.each<[string, string | undefined, RegExp]>([
    ['unset', undefined, /DS_MASTER_KEYS is not set/],
    ['empty', ' ', /DS_MASTER_KEYS is not set/],
    ['a bare key', b64(K1), /entry #1 is not 'id:base64key'/],
    ['bad base64', `k1:${b64(K1).slice(0, 40)}!!!=`, /master key 'k1' in DS_MASTER_KEYS is not valid base64/],
    ['a 16-byte key', `k1:${b64(K1.subarray(0, 16))}`, /'k1' in DS_MASTER_KEYS is 16 bytes; AES-256 needs 32/],
    ['a 33-byte key', `k1:${b64(Buffer.concat([K1, Buffer.from([1])]))}`, /'k1' .* is 33 bytes/],
    ['a duplicate id', `k1:${b64(K1)},k1:${b64(K2)}`, /duplicate master key id 'k1'/],
    ['an invalid id', `k/1:${b64(K1)}`, /entry #1: key id is not valid/],
    ['key and id swapped', `${b64(K1)}:k1`, /entry #1: key id is not valid/],
  ])('refuses %s with a clear error and no key material', (_what, value, message) => {
    const error = errorOf(() => Keyring.fromEnv(value === undefined ? {} : { DS_MASTER_KEYS: value }));
    expect(error).toBeInstanceOf(KeyringConfigError);
    expect(error.message).toMatch(message);
    for (const spelling of [...spellings(K1), ...spellings(K2)]) expect(textOf(error)).not.toContain(spelling);
  });
});

describe('Keyring.fromDirectory', () => {
  let dir: string;

  beforeEach(async () => {
    dir = await fs.mkdtemp(join(tmpdir(), 'keyring-'));
  });

  afterEach(async () => {
    await fs.rm(dir, { recursive: true, force: true });
  });

  async function writeKey(name: string, content: string | Buffer, mode = 0o600): Promise<void> {
    await fs.writeFile(join(dir, name), content, { mode });
    await fs.chmod(join(dir, name), mode); // the umask may have narrowed it
  }

  it('reads base64 and raw 32-byte key files; the greatest id is primary', async () => {
    await writeKey('2025-01-01.key', `${K1.toString('base64')}\n`);
    let raw = randomBytes(32);
    while (raw.every((byte) => byte >= 0x20 && byte < 0x7f)) raw = randomBytes(32);
    await writeKey('2025-06-01.key', raw);
    await writeKey('README.md', 'not a key', 0o644);
    const keyring = await Keyring.fromDirectory(dir, {});
    expect(keyring.keyIds).toEqual(['2025-01-01', '2025-06-01']);
    expect(keyring.primaryKeyId).toBe('2025-06-01');
    expect(keyring.get('2025-01-01').equals(K1)).toBe(true);
    expect(keyring.get('2025-06-01').equals(raw)).toBe(true);
  });

  it('DS_MASTER_KEY_PRIMARY overrides the greatest id', async () => {
    await writeKey('a.key', K1.toString('base64'));
    await writeKey('b.key', K2.toString('base64'));
    expect((await Keyring.fromDirectory(dir, { DS_MASTER_KEY_PRIMARY: 'a' })).primaryKeyId).toBe('a');
  });

  it.each([0o644, 0o640, 0o604, 0o620, 0o660, 0o666])('refuses a key file with mode %o', async (mode) => {
    await writeKey('k1.key', K1.toString('base64'), mode);
    const error = await asyncErrorOf(() => Keyring.fromDirectory(dir, {}));
    expect(error).toBeInstanceOf(KeyringConfigError);
    expect(error.message).toContain(`k1.key has mode 0${mode.toString(8)}`);
    expect(error.message).toContain('chmod 600');
  });

  it('accepts mode 0400', async () => {
    await writeKey('k1.key', K1.toString('base64'), 0o400);
    expect((await Keyring.fromDirectory(dir, {})).get('k1').equals(K1)).toBe(true);
  });

  it.each<[string, string | Buffer, RegExp]>([
    ['a 16-byte key', K1.subarray(0, 16).toString('base64'), /'k1' in .*k1\.key is 16 bytes/],
    ['bad base64', 'not base64 at all', /'k1' in .*k1\.key is not valid base64/],
    ['32 characters of text', 'correct horse battery staple 123', /32 characters of text, not a key/],
    ['32 hex characters', K1.toString('hex').slice(0, 32), /32 characters of text, not a key/],
  ])('refuses %s, naming the file and not the content', async (_what, content, message) => {
    await writeKey('k1.key', content);
    const error = await asyncErrorOf(() => Keyring.fromDirectory(dir, {}));
    expect(error).toBeInstanceOf(KeyringConfigError);
    expect(error.message).toMatch(message);
    expect(textOf(error)).not.toContain(content.toString());
  });

  it('refuses an invalid id, an empty directory, a missing directory and a directory named *.key', async () => {
    await expect(Keyring.fromDirectory(dir, {})).rejects.toThrow(/no \*\.key files/);
    await expect(Keyring.fromDirectory(join(dir, 'missing'), {})).rejects.toThrow(KeyringConfigError);
    await fs.mkdir(join(dir, 'sub.key'));
    await expect(Keyring.fromDirectory(dir, {})).rejects.toThrow(/sub\.key is not a regular file/);
    await fs.rmdir(join(dir, 'sub.key'));
    await writeKey('bad id.key', K1.toString('base64'));
    await expect(Keyring.fromDirectory(dir, {})).rejects.toThrow(/bad id\.key: key id is not valid/);
  });
});

describe('data keys', () => {
  const keyring = new Keyring([{ id: 'k1', key: K1 }]);

  it('createDataKey returns distinct random 32-byte keys with valid ids', () => {
    const a = createDataKey();
    const b = createDataKey();
    expect(a.key).toHaveLength(32);
    expect(a.dataKeyId).toMatch(/^dk-[0-9a-f]{32}$/);
    expect(a.dataKeyId).not.toBe(b.dataKeyId);
    expect(a.key.equals(b.key)).toBe(false);
  });

  it('wrap / unwrap round-trips through JSON', () => {
    const dataKey = createDataKey();
    const wrapped = wrapDataKey(keyring, dataKey, CONTEXT);
    expect(wrapped).toMatchObject({ v: 1, dataKeyId: dataKey.dataKeyId, masterKeyId: 'k1' });
    expect(Object.keys(wrapped).sort()).toEqual(
      ['ciphertext', 'dataKeyId', 'keyCheck', 'masterKeyId', 'nonce', 'tag', 'v'].sort(),
    );
    expect(JSON.stringify(wrapped)).not.toContain(dataKey.key.toString('base64'));
    const parsed = WrappedDataKey.parse(JSON.parse(JSON.stringify(wrapped)));
    expect(unwrapDataKey(keyring, parsed, CONTEXT).equals(dataKey.key)).toBe(true);
  });

  describe('unwrap failures', () => {
    const dataKey = createDataKey();
    const wrapped = wrapDataKey(keyring, dataKey, CONTEXT);
    const reasonOf = (action: () => unknown) => {
      const error = errorOf(action);
      expect(error).toBeInstanceOf(SnapshotTamperedError);
      return (error as SnapshotTamperedError).reason;
    };

    it.each<[string, WrapContext]>([
      ['tenant', { ...CONTEXT, tenant: 'globex' }],
      ['lineage', { ...CONTEXT, lineage: 'lineage-b' }],
    ])('a wrapped key moved to another %s is tampered', (_what, context) => {
      expect(reasonOf(() => unwrapDataKey(keyring, wrapped, context))).toBe('tampered');
    });

    it.each(['nonce', 'ciphertext', 'tag'] as const)('a bit flip in %s is tampered', (field) => {
      expect(reasonOf(() => unwrapDataKey(keyring, { ...wrapped, [field]: flipBase64(wrapped[field]) }, CONTEXT))).toBe(
        'tampered',
      );
    });

    it('a wrapped key relabelled with another data key id is tampered', () => {
      expect(reasonOf(() => unwrapDataKey(keyring, { ...wrapped, dataKeyId: 'dk-other' }, CONTEXT))).toBe('tampered');
    });

    it('a wrapped key under another master key with the same id is wrong-key', () => {
      const impostor = new Keyring([{ id: 'k1', key: K2 }]);
      const error = errorOf(() => unwrapDataKey(impostor, wrapped, CONTEXT));
      expect(error).toMatchObject({ reason: 'wrong-key' });
      expect(error.message).toContain("'k1'");
    });

    it('a missing master key is KeyUnavailableError naming it', () => {
      const error = errorOf(() => unwrapDataKey(new Keyring([{ id: 'k2', key: K2 }]), wrapped, CONTEXT));
      expect(error).toBeInstanceOf(KeyUnavailableError);
      expect(error).toMatchObject({ reason: 'missing-key', keyId: 'k1', keyKind: 'master' });
    });

    it.each<[string, unknown]>([
      ['a missing field', { ...wrapped, tag: undefined }],
      ['an unknown version', { ...wrapped, v: 2 }],
      ['bad base64', { ...wrapped, nonce: '!!!!' }],
      ['a short ciphertext', { ...wrapped, ciphertext: Buffer.alloc(16).toString('base64') }],
      ['an invalid master key id', { ...wrapped, masterKeyId: '../k1' }],
      ['not an object', 'k1'],
    ])('%s is malformed', (_what, bad) => {
      expect(reasonOf(() => unwrapDataKey(keyring, bad as WrappedDataKey, CONTEXT))).toBe('malformed');
    });
  });
});

describe('rotation', () => {
  it('old wraps unwrap after a new primary; rewrap moves them; the old key can then go', () => {
    const dataKey = createDataKey();
    const underK1 = wrapDataKey(new Keyring([{ id: 'k1', key: K1 }]), dataKey, CONTEXT);
    expect(underK1.masterKeyId).toBe('k1');

    const rotated = new Keyring([{ id: 'k1', key: K1 }]).withKey('k2', K2, { primary: true });
    expect(unwrapDataKey(rotated, underK1, CONTEXT).equals(dataKey.key)).toBe(true);
    expect(wrapDataKey(rotated, createDataKey(), CONTEXT).masterKeyId).toBe('k2');

    const underK2 = rewrapDataKey(rotated, underK1, CONTEXT);
    expect(underK2).toMatchObject({ v: 1, dataKeyId: dataKey.dataKeyId, masterKeyId: 'k2' });
    expect(rewrapDataKey(rotated, underK2, CONTEXT)).toBe(underK2); // already under the primary: unchanged

    const k2Only = rotated.withoutKey('k1');
    expect(unwrapDataKey(k2Only, underK2, CONTEXT).equals(dataKey.key)).toBe(true);
    expect(() => unwrapDataKey(k2Only, underK1, CONTEXT)).toThrow(KeyUnavailableError);
  });

  it('chunks sealed before a rekey still open after it (only the wrapped key changed)', () => {
    const dataKey = createDataKey();
    const header: ObjectHeader = {
      kind: 'chunk',
      formatVersion: 1,
      codec: 0,
      dataKeyId: dataKey.dataKeyId,
      tenant: CONTEXT.tenant,
      lineage: CONTEXT.lineage,
      objectId: 'chunk-1',
    };
    const sealed = sealObject(Buffer.from('state'), dataKey.key, header);
    const v1 = new Keyring([{ id: 'k1', key: K1 }]);
    const wrapped = rewrapDataKey(v1.withKey('k2', K2, { primary: true }), wrapDataKey(v1, dataKey, CONTEXT), CONTEXT);
    const k2Only = new Keyring([{ id: 'k2', key: K2 }]);
    const keyFor = dataKeyResolver(k2Only, (id) => (id === wrapped.dataKeyId ? wrapped : undefined), CONTEXT);
    const { kind, tenant, lineage, objectId, formatVersion } = header;
    const opened = openObject(sealed, keyFor, { kind, tenant, lineage, objectId, formatVersion, encrypted: true });
    expect(opened.plaintext.toString()).toBe('state');
  });
});

describe('crypto-shredding', () => {
  const keyring = new Keyring([
    { id: 'k1', key: K1 },
    { id: 'k2', key: K2 },
  ]);
  const dataKey = createDataKey();
  const header: ObjectHeader = {
    kind: 'manifest',
    formatVersion: 1,
    codec: 0,
    dataKeyId: dataKey.dataKeyId,
    tenant: CONTEXT.tenant,
    lineage: CONTEXT.lineage,
    objectId: 'sess-a.1',
    sessionId: 'sess-a',
  };
  const expected: ExpectedBinding = { ...header, encrypted: true };
  const sealed = sealObject(Buffer.from('manifest'), dataKey.key, header);
  const wrapped = wrapDataKey(keyring, dataKey, CONTEXT);

  it('opens while the wrapped data key and its master key exist', () => {
    const store = new Map([[wrapped.dataKeyId, wrapped]]);
    const keyFor = dataKeyResolver(keyring, (id) => store.get(id), CONTEXT);
    expect(openObject(sealed, keyFor, expected).plaintext.toString()).toBe('manifest');
  });

  it('cannot open once the wrapped data key is destroyed', () => {
    const keyFor = dataKeyResolver(keyring, () => undefined, CONTEXT);
    const error = errorOf(() => openObject(sealed, keyFor, expected));
    expect(error).toBeInstanceOf(KeyUnavailableError);
    expect(error).toMatchObject({ reason: 'missing-key', keyId: dataKey.dataKeyId, keyKind: 'data' });
  });

  it('cannot open once the master key that wraps it is removed', () => {
    const keyFor = dataKeyResolver(keyring.withPrimary('k1').withoutKey('k2'), () => wrapped, CONTEXT);
    const error = errorOf(() => openObject(sealed, keyFor, expected));
    expect(error).toBeInstanceOf(KeyUnavailableError);
    expect(error).toMatchObject({ keyId: 'k2', keyKind: 'master' });
  });

  it('a wrapped key stored under another data key id is refused', () => {
    const other = wrapDataKey(keyring, createDataKey(), CONTEXT);
    const keyFor = dataKeyResolver(keyring, () => other, CONTEXT);
    expect(errorOf(() => openObject(sealed, keyFor, expected))).toMatchObject({ reason: 'tampered' });
  });
});

describe('no key material in any error', () => {
  it('holds for every failure path of wrap, unwrap and open', () => {
    const keyring = new Keyring([{ id: 'k1', key: K1 }]);
    const dataKey = createDataKey();
    const wrapped = wrapDataKey(keyring, dataKey, CONTEXT);
    const header: ObjectHeader = {
      kind: 'chunk',
      formatVersion: 1,
      codec: 0,
      dataKeyId: dataKey.dataKeyId,
      tenant: 'acme',
      lineage: 'lineage-a',
      objectId: 'chunk-1',
    };
    const sealed = sealObject(randomBytes(64), dataKey.key, header);
    const expected: ExpectedBinding = { ...header, encrypted: true };
    const errors = [
      errorOf(() => unwrapDataKey(new Keyring([{ id: 'k1', key: K2 }]), wrapped, CONTEXT)),
      errorOf(() => unwrapDataKey(keyring, { ...wrapped, tag: flipBase64(wrapped.tag) }, CONTEXT)),
      errorOf(() => unwrapDataKey(keyring, { ...wrapped, v: 3 } as unknown as WrappedDataKey, CONTEXT)),
      errorOf(() => unwrapDataKey(new Keyring([{ id: 'k2', key: K2 }]), wrapped, CONTEXT)),
      errorOf(() => openObject(sealed, () => K2, expected)),
      // The last byte flipped, not set: a byte that already was 0 (one seal in 256) left the object intact.
      errorOf(() =>
        openObject(
          Buffer.concat([sealed.subarray(0, -1), Buffer.from([sealed.at(-1)! ^ 0xff])]),
          () => dataKey.key,
          expected,
        ),
      ),
      errorOf(() => openObject(sealed.subarray(0, 30), () => dataKey.key, expected)),
      errorOf(() => Keyring.fromEnv({ DS_MASTER_KEYS: `k1:${K1.toString('base64')},k1:${K2.toString('base64')}` })),
      errorOf(() => Keyring.fromEnv({ DS_MASTER_KEYS: `${K1.toString('base64')}` })),
      errorOf(() => Keyring.fromEnv({ DS_MASTER_KEYS: `k1:${K1.toString('base64')}`, DS_MASTER_KEY_PRIMARY: 'k2' })),
      errorOf(() => sealObject(Buffer.alloc(1), K1.subarray(0, 31), header)),
    ];
    for (const error of errors) {
      const text = textOf(error);
      for (const spelling of [...spellings(K1), ...spellings(K2), ...spellings(dataKey.key)]) {
        expect(text).not.toContain(spelling);
      }
    }
  });
});
