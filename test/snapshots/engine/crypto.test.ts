import { createHash, randomBytes } from 'node:crypto';
import {
  type CryptoFailureReason,
  KeyUnavailableError,
  SnapshotIncompatibleError,
  SnapshotTamperedError,
} from '../../../src/snapshots/errors';
import {
  keyCommitment,
  ObjectSealer,
  openObject,
  sealedLength,
  sealObject,
  sealObjectInto,
  sealPlaintextObject,
  sealPlaintextObjectInto,
  type ExpectedBinding,
  type ObjectHeader,
  type PlaintextObjectHeader,
} from '../../../src/snapshots/engine/crypto';

const KEY = randomBytes(32);
const DATA_KEY_ID = 'dk-0001';

function chunkHeader(overrides: Partial<ObjectHeader> = {}): ObjectHeader {
  return {
    kind: 'chunk',
    formatVersion: 1,
    codec: 0,
    dataKeyId: DATA_KEY_ID,
    tenant: 'acme',
    lineage: 'lineage-a',
    objectId: 'chunk-1',
    ...overrides,
  };
}

function manifestHeader(overrides: Partial<ObjectHeader> = {}): ObjectHeader {
  return chunkHeader({ kind: 'manifest', objectId: 'sess-a.3', sessionId: 'sess-a', ...overrides });
}

/** What a reader of `header` expects: the same binding. */
function expectationOf(header: ObjectHeader, encrypted = true): ExpectedBinding {
  const { kind, tenant, lineage, objectId, sessionId, formatVersion } = header;
  return { kind, tenant, lineage, objectId, formatVersion, encrypted, ...(sessionId ? { sessionId } : {}) };
}

const keyFor = (dataKeyId: string): Buffer => {
  if (dataKeyId !== DATA_KEY_ID) throw new KeyUnavailableError(`no data key ${dataKeyId}`, dataKeyId, 'data');
  return KEY;
};

function plaintextHeaderOf({
  kind,
  formatVersion,
  codec,
  tenant,
  lineage,
  objectId,
}: ObjectHeader): PlaintextObjectHeader {
  return { kind, formatVersion, codec, tenant, lineage, objectId };
}

function sha256(bytes: Buffer): string {
  return createHash('sha256').update(bytes).digest('hex');
}

/** Runs `open` and returns the typed error it must throw; fails the test if it returns anything. */
function failureOf(open: () => unknown): SnapshotTamperedError {
  let result: unknown;
  try {
    result = open();
  } catch (error) {
    expect(error).toBeInstanceOf(SnapshotTamperedError);
    return error as SnapshotTamperedError;
  }
  throw new Error(`expected a SnapshotTamperedError, got a result: ${typeof result}`);
}

function reasonOf(open: () => unknown): CryptoFailureReason {
  return failureOf(open).reason;
}

function flipBit(bytes: Buffer, bit: number): Buffer {
  const copy = Buffer.from(bytes);
  copy[bit >> 3]! ^= 1 << (bit & 7);
  return copy;
}

/** Offsets in a sealed object, from its header length (bytes 4..5). */
function layout(sealed: Buffer): { headerEnd: number; bodyStart: number; tagStart: number } {
  const headerEnd = 6 + sealed.readUInt16BE(4);
  return { headerEnd, bodyStart: headerEnd + 12, tagStart: sealed.length - 16 };
}

describe('sealObject / openObject (AES-256-GCM)', () => {
  it.each([0, 1, 1000, 64 * 1024, 1024 * 1024])('round-trips %i bytes', (size) => {
    const plaintext = randomBytes(size);
    const header = chunkHeader();
    const sealed = sealObject(plaintext, KEY, header);
    const opened = openObject(sealed, keyFor, expectationOf(header));
    expect(sha256(opened.plaintext)).toBe(sha256(plaintext));
    expect(opened.header).toEqual({ ...header, encrypted: true });
  });

  it('round-trips a manifest with its session id, codec and format version', () => {
    const header = manifestHeader({ codec: 3, formatVersion: 7 });
    const plaintext = Buffer.from('{"files":[]}');
    const opened = openObject(sealObject(plaintext, KEY, header), keyFor, expectationOf(header));
    expect(opened.plaintext.toString()).toBe('{"files":[]}');
    expect(opened.header).toEqual({ ...header, encrypted: true });
  });

  it('accepts any of several expected format versions', () => {
    const header = chunkHeader({ formatVersion: 2 });
    const sealed = sealObject(Buffer.from('x'), KEY, header);
    expect(openObject(sealed, keyFor, { ...expectationOf(header), formatVersion: [1, 2] }).plaintext.toString()).toBe(
      'x',
    );
  });

  it('seals into a given buffer at an offset, touching only the bytes it reports, or refuses when it does not fit', () => {
    const header = chunkHeader({ objectId: 'c'.repeat(64), codec: 2 });
    const plaintext = randomBytes(5000);
    const length = sealedLength(header, plaintext.length);
    expect(length).toBe(sealObject(plaintext, KEY, header).length);
    const out = Buffer.alloc(100 + length + 50, 0xee);
    expect(sealObjectInto(plaintext, KEY, header, out, 100)).toBe(length);
    expect(out.subarray(0, 100).equals(Buffer.alloc(100, 0xee))).toBe(true);
    expect(out.subarray(100 + length).equals(Buffer.alloc(50, 0xee))).toBe(true);
    const opened = openObject(out.subarray(100, 100 + length), keyFor, expectationOf(header));
    expect(opened.plaintext.equals(plaintext)).toBe(true);

    const tight = Buffer.alloc(length - 1, 0xee);
    expect(() => sealObjectInto(plaintext, KEY, header, tight, 0)).toThrow(RangeError);
    expect(() => sealObjectInto(plaintext, KEY, header, out, -1)).toThrow(RangeError);
    expect(tight.equals(Buffer.alloc(length - 1, 0xee))).toBe(true);

    // Plaintext mode, the same way.
    const plain = plaintextHeaderOf(header);
    const plainLength = sealedLength(plain, plaintext.length);
    expect(plainLength).toBe(sealPlaintextObject(plaintext, plain).length);
    const into = Buffer.alloc(plainLength + 8, 0xee);
    expect(sealPlaintextObjectInto(plaintext, plain, into, 8)).toBe(plainLength);
    expect(into.subarray(0, 8).equals(Buffer.alloc(8, 0xee))).toBe(true);
    expect(into.subarray(8).equals(sealPlaintextObject(plaintext, plain))).toBe(true);
    expect(() => sealPlaintextObjectInto(plaintext, plain, into, 9)).toThrow(RangeError);
  });

  it('never hands out one nonce twice, across many objects', () => {
    const seen = new Set<string>();
    for (let i = 0; i < 2000; i++) {
      const sealed = sealObject(Buffer.from('x'), KEY, chunkHeader());
      const { headerEnd, bodyStart } = layout(sealed);
      seen.add(sealed.subarray(headerEnd, bodyStart).toString('hex'));
    }
    expect(seen.size).toBe(2000);
  });

  it('hides the plaintext and uses a fresh nonce for every object', () => {
    const plaintext = Buffer.from('attack at dawn; '.repeat(64));
    const a = sealObject(plaintext, KEY, chunkHeader());
    const b = sealObject(plaintext, KEY, chunkHeader());
    expect(a.includes(Buffer.from('attack at dawn'))).toBe(false);
    expect(a.length).toBe(b.length);
    const { headerEnd, bodyStart } = layout(a);
    expect(a.subarray(headerEnd, bodyStart).equals(b.subarray(headerEnd, bodyStart))).toBe(false);
    expect(a.equals(b)).toBe(false);
  });

  it('has the documented layout: magic, u16 header length, header, nonce, ciphertext, tag', () => {
    const plaintext = randomBytes(100);
    const sealed = sealObject(plaintext, KEY, chunkHeader());
    expect(sealed.subarray(0, 4).toString('latin1')).toBe('DSO\x01');
    const { bodyStart } = layout(sealed);
    expect(sealed.length).toBe(bodyStart + plaintext.length + 16);
  });

  describe('tampering', () => {
    const header = manifestHeader();
    const plaintext = randomBytes(256);
    const sealed = sealObject(plaintext, KEY, header);
    const expected = expectationOf(header);
    const open = (bytes: Buffer) => () => openObject(bytes, keyFor, expected);

    it('a bit flip in a header string (tenant) is refused as tampered', () => {
      const at = sealed.indexOf(Buffer.from('acme'));
      expect(at).toBeGreaterThan(0);
      expect(reasonOf(open(flipBit(sealed, at * 8)))).toBe('tampered');
    });

    it('a bit flip in a header field that still parses (codec) fails authentication', () => {
      // flags at 6, kind at 7, codec at 8
      expect(reasonOf(open(flipBit(sealed, 8 * 8)))).toBe('tampered');
    });

    it('a bit flip in the key commitment reads as a wrong key', () => {
      // commitment after flags, kind, codec, formatVersion (2), body length (4): offset 6 + 9
      expect(reasonOf(open(flipBit(sealed, 15 * 8 + 3)))).toBe('wrong-key');
    });

    it('a bit flip in the nonce, the body or the tag fails authentication', () => {
      const { headerEnd, bodyStart, tagStart } = layout(sealed);
      for (const byte of [headerEnd, bodyStart, bodyStart + 100, tagStart - 1, tagStart, sealed.length - 1]) {
        expect(reasonOf(open(flipBit(sealed, byte * 8 + 5)))).toBe('tampered');
      }
    });

    it('every single-bit flip anywhere in the object is refused', () => {
      const small = sealObject(randomBytes(16), KEY, header);
      for (let bit = 0; bit < small.length * 8; bit++) {
        const flipped = flipBit(small, bit);
        let outcome: unknown = 'returned';
        try {
          openObject(flipped, keyFor, { ...expected, dataKeyId: DATA_KEY_ID });
        } catch (error) {
          outcome = error;
        }
        // Flipping the envelope version byte of the magic reads as a newer envelope; everything else as tampering.
        const ok =
          outcome instanceof SnapshotTamperedError || (bit >> 3 === 3 && outcome instanceof SnapshotIncompatibleError);
        if (!ok) throw new Error(`bit ${bit}: ${String(outcome)}`);
      }
    });

    it('an altered data key id is tampering when the reader knows the key id, a missing key otherwise', () => {
      const at = sealed.indexOf(Buffer.from(DATA_KEY_ID));
      const flipped = flipBit(sealed, at * 8);
      expect(reasonOf(() => openObject(flipped, keyFor, { ...expected, dataKeyId: DATA_KEY_ID }))).toBe('tampered');
      expect(() => openObject(flipped, keyFor, expected)).toThrow(KeyUnavailableError);
    });

    it('every truncation is reported as truncated', () => {
      const small = sealObject(randomBytes(40), KEY, header);
      for (let length = 0; length < small.length; length++) {
        expect([length, reasonOf(open(small.subarray(0, length)))]).toEqual([length, 'truncated']);
      }
    });

    it('a truncated large object is reported as truncated', () => {
      const big = sealObject(randomBytes(1024 * 1024), KEY, chunkHeader());
      expect(reasonOf(() => openObject(big.subarray(0, big.length - 1), keyFor, expectationOf(chunkHeader())))).toBe(
        'truncated',
      );
    });

    it('trailing bytes, bad magic and garbage are malformed', () => {
      expect(reasonOf(open(Buffer.concat([sealed, Buffer.from([0])])))).toBe('malformed');
      expect(reasonOf(open(Buffer.concat([Buffer.from('XSO\x01'), sealed.subarray(4)])))).toBe('malformed');
      expect(reasonOf(open(Buffer.from('{"not":"a sealed object"}')))).toBe('malformed');
      expect(reasonOf(open(randomBytes(3)))).toBe('malformed');
    });

    it('an unknown envelope version is incompatible, not tampered', () => {
      const v2 = Buffer.from(sealed);
      v2[3] = 2;
      expect(() => openObject(v2, keyFor, expected)).toThrow(SnapshotIncompatibleError);
    });

    it('a header length pointing past the object is truncated; one inside a field is malformed', () => {
      const longer = Buffer.from(sealed);
      longer.writeUInt16BE(0xffff, 4);
      expect(reasonOf(open(longer))).toBe('truncated');
      const shorter = Buffer.from(sealed);
      shorter.writeUInt16BE(sealed.readUInt16BE(4) - 3, 4);
      expect(reasonOf(open(shorter))).toBe('malformed');
    });

    it('errors carry the expected ids and the SnapshotTampered wire code, and no plaintext', () => {
      const error = failureOf(open(flipBit(sealed, (sealed.length - 1) * 8)));
      expect(error).toMatchObject({
        name: 'SnapshotTamperedError',
        code: 'SnapshotTampered',
        reason: 'tampered',
        sessionId: 'sess-a',
        checkpointId: 'sess-a.3',
        objectId: 'sess-a.3',
      });
      expect(error.message).toContain('manifest "sess-a.3" of lineage "lineage-a"');
      expect(error.message).not.toContain(plaintext.toString('hex').slice(0, 16));
    });
  });

  describe('binding: an authentic object in the wrong place is refused', () => {
    const header = manifestHeader();
    const sealed = sealObject(Buffer.from('manifest of sess-a.3'), KEY, header);
    const expected = expectationOf(header);

    it.each<[string, Partial<ExpectedBinding>]>([
      ['another session', { sessionId: 'sess-b' }],
      ['another lineage', { lineage: 'lineage-b' }],
      ['another tenant', { tenant: 'globex' }],
      ['another checkpoint', { objectId: 'sess-a.2' }],
      ['another kind', { kind: 'chunk', sessionId: undefined }],
      ['another format version', { formatVersion: 2 }],
    ])('swapped from %s', (_what, change) => {
      const keyForSpy = jest.fn(keyFor);
      const error = failureOf(() => openObject(sealed, keyForSpy, { ...expected, ...change }));
      expect(error.reason).toBe('tampered');
      expect(keyForSpy).not.toHaveBeenCalled(); // no key is unwrapped for an object that is not the one asked for
    });

    it('a chunk swapped between checkpoints of a lineage (objectId) is refused', () => {
      const chunk = sealObject(Buffer.from('chunk'), KEY, chunkHeader({ objectId: 'chunk-aaa' }));
      expect(reasonOf(() => openObject(chunk, keyFor, expectationOf(chunkHeader({ objectId: 'chunk-bbb' }))))).toBe(
        'tampered',
      );
    });

    it('a plaintext object where an encrypted one is expected is refused (no downgrade)', () => {
      const plain = sealPlaintextObject(Buffer.from('forged'), header); // its dataKeyId is ignored
      const error = failureOf(() => openObject(plain, keyFor, expected));
      expect(error.reason).toBe('tampered');
      expect(error.message).toContain('is not encrypted');
    });

    it('an encrypted object where a plaintext one is expected is refused', () => {
      expect(reasonOf(() => openObject(sealed, keyFor, { ...expected, encrypted: false }))).toBe('tampered');
    });
  });

  describe('keys', () => {
    const header = chunkHeader();
    const sealed = sealObject(Buffer.from('secret'), KEY, header);

    it('a wrong data key is reported as wrong-key', () => {
      expect(reasonOf(() => openObject(sealed, () => randomBytes(32), expectationOf(header)))).toBe('wrong-key');
    });

    it('asks keyFor for the data key named in the header', () => {
      const keyForSpy = jest.fn(keyFor);
      openObject(sealed, keyForSpy, expectationOf(header));
      expect(keyForSpy).toHaveBeenCalledWith(DATA_KEY_ID);
    });

    it('a missing data key propagates KeyUnavailableError', () => {
      const other = sealObject(Buffer.from('secret'), KEY, chunkHeader({ dataKeyId: 'dk-gone' }));
      expect(() => openObject(other, keyFor, expectationOf(header))).toThrow(KeyUnavailableError);
    });

    it('the key commitment follows a key mutated in place', () => {
      const key = randomBytes(32);
      const before = Buffer.from(keyCommitment(key));
      key[0]! ^= 1;
      expect(keyCommitment(key).equals(before)).toBe(false);
    });
  });

  describe('seal input validation (programming errors, not snapshot errors)', () => {
    it.each<[string, () => unknown]>([
      ['a short key', () => sealObject(Buffer.alloc(1), Buffer.alloc(16), chunkHeader())],
      ['a bad data key id', () => sealObject(Buffer.alloc(1), KEY, chunkHeader({ dataKeyId: 'a b' }))],
      ['an empty tenant', () => sealObject(Buffer.alloc(1), KEY, chunkHeader({ tenant: '' }))],
      ['a manifest without session', () => sealObject(Buffer.alloc(1), KEY, manifestHeader({ sessionId: undefined }))],
      ['a codec out of range', () => sealObject(Buffer.alloc(1), KEY, chunkHeader({ codec: 256 }))],
      ['a fractional version', () => sealObject(Buffer.alloc(1), KEY, chunkHeader({ formatVersion: 1.5 }))],
      ['a lone surrogate', () => sealObject(Buffer.alloc(1), KEY, chunkHeader({ objectId: 'a\ud800' }))],
      ['an unknown kind', () => sealObject(Buffer.alloc(1), KEY, chunkHeader({ kind: 'blob' as 'chunk' }))],
    ])('refuses %s', (_what, seal) => {
      expect(seal).toThrow(/must|needs|unknown|not well-formed/);
      expect(seal).not.toThrow(SnapshotTamperedError);
    });
  });
});

describe('plaintext mode (explicit, integrity against corruption only)', () => {
  const header = plaintextHeaderOf(chunkHeader());
  const plaintext = randomBytes(4096);
  const sealed = sealPlaintextObject(plaintext, header);
  const expected = { ...expectationOf({ ...header, dataKeyId: '' }), encrypted: false };
  const noKeys = (): Buffer => {
    throw new Error('plaintext objects need no key');
  };

  it('round-trips without asking for a key', () => {
    const opened = openObject(sealed, noKeys, expected);
    expect(sha256(opened.plaintext)).toBe(sha256(plaintext));
    expect(opened.header).toEqual({ ...header, encrypted: false });
  });

  it('detects a corrupted body, header or digest', () => {
    const { headerEnd } = layout(sealed);
    expect(reasonOf(() => openObject(flipBit(sealed, (headerEnd + 10) * 8), noKeys, expected))).toBe('corrupt');
    expect(reasonOf(() => openObject(flipBit(sealed, (sealed.length - 1) * 8), noKeys, expected))).toBe('corrupt');
    expect(reasonOf(() => openObject(flipBit(sealed, 8 * 8), noKeys, expected))).toBe('corrupt'); // codec
    expect(reasonOf(() => openObject(sealed.subarray(0, sealed.length - 1), noKeys, expected))).toBe('truncated');
  });

  it('does NOT detect tampering: whoever can write the store can forge a body and its digest', () => {
    const { headerEnd } = layout(sealed);
    const forged = Buffer.from(sealed);
    forged.fill(0x41, headerEnd, forged.length - 32);
    createHash('sha256')
      .update(forged.subarray(0, forged.length - 32))
      .digest()
      .copy(forged, forged.length - 32);
    expect(openObject(forged, noKeys, expected).plaintext.every((byte) => byte === 0x41)).toBe(true);
  });
});

describe('ObjectSealer (one header per batch, patched per object)', () => {
  const id = (n: number) => createHash('sha256').update(String(n)).digest('hex');
  const sample = chunkHeader({ objectId: id(0), tenant: 'acmé', lineage: 'lineage-ß' });

  it('writes the bytes sealObjectInto writes, but for the nonce and what it encrypts', () => {
    const sealer = new ObjectSealer(sample, KEY);
    const body = randomBytes(3000);
    const header = { ...sample, objectId: id(7), codec: 2 };
    const out = Buffer.alloc(sealer.sealedLength(body.length) + 5);
    const length = sealer.sealInto(body, header.objectId, header.codec, out, 5);
    const reference = Buffer.alloc(sealedLength(header, body.length));
    expect(sealObjectInto(body, KEY, header, reference, 0)).toBe(length);
    const { headerEnd } = layout(reference);
    expect(out.subarray(5, 5 + headerEnd)).toEqual(reference.subarray(0, headerEnd));
    const opened = openObject(out.subarray(5, 5 + length), keyFor, expectationOf(header));
    expect(opened.plaintext).toEqual(body);
    expect(opened.header).toEqual({ ...header, encrypted: true });
  });

  it('writes the bytes sealPlaintextObjectInto writes in plaintext mode', () => {
    const header = plaintextHeaderOf({ ...sample, objectId: id(9), codec: 1 });
    const sealer = new ObjectSealer(plaintextHeaderOf(sample), null);
    const body = randomBytes(1000);
    const out = Buffer.alloc(sealer.sealedLength(body.length));
    const reference = Buffer.alloc(sealedLength(header, body.length));
    expect(sealer.sealInto(body, header.objectId, header.codec, out, 0)).toBe(
      sealPlaintextObjectInto(body, header, reference, 0),
    );
    expect(out).toEqual(reference);
  });

  it('seals an id of another length with a header of its own', () => {
    const sealer = new ObjectSealer(sample, KEY);
    const body = randomBytes(100);
    const header = { ...sample, objectId: 'short-id', codec: 0 };
    const out = Buffer.alloc(sealedLength(header, body.length));
    sealer.sealInto(body, header.objectId, 0, out, 0);
    expect(openObject(out, keyFor, expectationOf(header)).plaintext).toEqual(body);
  });
});
