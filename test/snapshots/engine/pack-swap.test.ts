import { createHash, randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { ChunkedSnapshotStore } from '../../../src/snapshots/engine/chunked-store';
import { Keyring } from '../../../src/snapshots/engine/keyring';
import { seeded } from '../../helpers/bytes';
import { cp, readAll } from '../../helpers/checkpoints';

/**
 * A pack put in another's place is tampering, whatever its length; a pack cut short is corruption; a missing one is
 * not found. Each pack begins with a header naming it (packs.ts), which the reader checks before it uses a chunk.
 */
let dir: string;
beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ds-pack-swap-'));
});
afterEach(() => {
  fs.rmSync(dir, { recursive: true, force: true });
});

const keyring = new Keyring([{ id: 'k1', key: randomBytes(32) }]);
const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');

/** The packs of a lineage, oldest first. */
function packsOf(lineage: string): string[] {
  const packs = path.join(dir, lineage, 'packs');
  return fs
    .readdirSync(packs)
    .filter((n) => n.endsWith('.pack'))
    .map((n) => path.join(packs, n))
    .sort((a, b) => fs.statSync(a).mtimeMs - fs.statSync(b).mtimeMs);
}

/** s1: cp-1 (1 MB) and cp-2 (new bytes, in a second pack); s2 with a longer pack, s3 with a much shorter one. */
async function stores(encrypted: boolean) {
  const s = new ChunkedSnapshotStore({ rootDir: dir, keyring: encrypted ? keyring : null });
  await s.write(cp(1), Readable.from([seeded(1, 1_000_000)]));
  await s.write(cp(2, 'cp-1'), Readable.from([seeded(2, 1_000_000)]));
  await s.write(cp(1, null, 's2'), Readable.from([seeded(3, 3_000_000)]));
  await s.write(cp(1, null, 's3'), Readable.from([seeded(4, 50_000)]));
  const [cp1Pack, cp2Pack] = packsOf('s1');
  return { s, cp1Pack: cp1Pack!, cp2Pack: cp2Pack!, longer: packsOf('s2')[0]!, shorter: packsOf('s3')[0]! };
}

async function restoreError(s: ChunkedSnapshotStore): Promise<unknown> {
  try {
    const bytes = await readAll((await s.open('s1', 'cp-1')).stream);
    return new Error(`restored ${bytes.length} bytes`);
  } catch (err) {
    return err;
  }
}

describe.each([
  ['encrypted', true],
  ['plaintext', false],
])('%s', (_mode, encrypted) => {
  test.each([
    ["another session's longer pack", 'longer'],
    ["another session's pack, shorter than the offsets the manifest needs", 'shorter'],
    ['another pack of the same lineage', 'cp2Pack'],
  ] as const)('a pack replaced by %s is SnapshotTampered, naming the pack', async (_what, which) => {
    const packs = await stores(encrypted);
    fs.copyFileSync(packs[which], packs.cp1Pack);
    const packId = path.basename(packs.cp1Pack, '.pack');
    expect(await restoreError(packs.s)).toMatchObject({
      code: 'SnapshotTampered',
      sessionId: 's1',
      checkpointId: 'cp-1',
      message: expect.stringContaining(`pack ${packId} needed by checkpoint cp-1 is not this pack`),
    });
    // A new store reads the same; the checkpoint that does not use the pack is untouched.
    const fresh = new ChunkedSnapshotStore({ rootDir: dir, keyring: encrypted ? keyring : null });
    expect(await restoreError(fresh)).toMatchObject({ code: 'SnapshotTampered' });
    expect((await fresh.verifyLineage('s1')).map((r) => [r.checkpointId, r.status])).toEqual([
      ['cp-1', 'tampered'],
      ['cp-2', 'ok'],
    ]);
  });

  test('a shorter pack is told apart: another pack is tampered, this pack cut short corrupt, none not found', async () => {
    const { s, cp1Pack, shorter } = await stores(encrypted);
    const whole = fs.readFileSync(cp1Pack);
    const other = fs.readFileSync(shorter);
    // The same length each time: what decides is whose bytes they are, not how many.
    fs.writeFileSync(cp1Pack, other);
    expect(await restoreError(s)).toMatchObject({ code: 'SnapshotTampered' });
    fs.writeFileSync(cp1Pack, whole.subarray(0, other.length));
    expect(await restoreError(s)).toMatchObject({ code: 'SnapshotCorrupt', reason: 'truncated' });
    // Cut inside its header: this pack's bytes as far as they go, still corrupt.
    fs.truncateSync(cp1Pack, 20);
    expect(await restoreError(s)).toMatchObject({ code: 'SnapshotCorrupt', reason: 'truncated' });
    fs.rmSync(cp1Pack);
    expect(await restoreError(s)).toMatchObject({ code: 'SnapshotNotFound' });
    // Put back, it restores: nothing of the damaged reads was kept.
    fs.writeFileSync(cp1Pack, whole);
    expect(sha(await readAll((await s.open('s1', 'cp-1')).stream))).toBe(sha(seeded(1, 1_000_000)));
  });
});
