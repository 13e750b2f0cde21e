import { randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { FsSnapshotStore, SessionIdTakenError, type SnapshotStore } from '../../src/snapshots';
import { ChunkedSnapshotStore } from '../../src/snapshots/engine/chunked-store';
import { Keyring } from '../../src/snapshots/engine/keyring';
import { cp } from '../helpers/checkpoints';

/** Session ids are never reused: both stores record who owns an id, once, and refuse anyone else. */
let dir: string;
beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ds-claim-'));
});
afterEach(() => {
  fs.rmSync(dir, { recursive: true, force: true });
});

const keyring = new Keyring([{ id: 'k1', key: randomBytes(32) }]);
const chunked = () => new ChunkedSnapshotStore({ rootDir: dir, keyring, gcGraceMs: 0 });
const claimFile = (session = 's1') => path.join(dir, session, 'claim.json');

const taken = (message: RegExp) => ({
  code: 'SessionAlreadyExists',
  name: 'SessionIdTakenError',
  sessionId: 's1',
  checkpointId: '',
  message: expect.stringMatching(message),
});

describe.each([
  ['the chunked store', chunked],
  ['the format-1 store', (): SnapshotStore => new FsSnapshotStore(dir)],
])('%s', (_kind, storeFor) => {
  test('the first claim wins; the same owner again is a no-op; another owner is refused', async () => {
    const s = storeFor();
    await s.claim('s1', 'run-a');
    const recorded = fs.readFileSync(claimFile(), 'utf8');
    expect(JSON.parse(recorded)).toEqual({ owner: 'run-a', claimedAt: expect.any(String) });
    // A retried activity: accepted, and the claim is not rewritten.
    await s.claim('s1', 'run-a');
    expect(fs.readFileSync(claimFile(), 'utf8')).toBe(recorded);
    const refused = s.claim('s1', 'run-b');
    await expect(refused).rejects.toBeInstanceOf(SessionIdTakenError);
    await expect(refused).rejects.toMatchObject(
      taken(/session id s1 is taken: it was claimed by "run-a", not "run-b"/),
    );
    // A claim is no checkpoint: the session lists none, and its checkpoints are written beside it as usual.
    expect(await s.list('s1')).toEqual([]);
    await s.write(cp(1), Readable.from([randomBytes(10_000)]));
    expect((await s.list('s1')).map((m) => m.checkpointId)).toEqual(['cp-1']);
    await s.claim('s1', 'run-a');
  });

  test('a session with checkpoints from before claims is taken, even for its first claimer', async () => {
    const s = storeFor();
    await s.write(cp(1), Readable.from([randomBytes(10_000)]));
    await expect(s.claim('s1', 'run-a')).rejects.toMatchObject(taken(/taken: the store holds .*cp-1/));
    expect(fs.existsSync(claimFile())).toBe(false);
  });

  test('racing claimers: exactly one owner wins, every caller of that owner succeeds', async () => {
    const s = storeFor();
    const owners = ['run-a', 'run-b', 'run-a', 'run-c', 'run-b', 'run-a'];
    const results = await Promise.allSettled(owners.map((owner) => s.claim('s1', owner)));
    const winner = (JSON.parse(fs.readFileSync(claimFile(), 'utf8')) as { owner: string }).owner;
    expect(results.map((r) => r.status)).toEqual(owners.map((o) => (o === winner ? 'fulfilled' : 'rejected')));
    expect(fs.readdirSync(path.join(dir, 's1'))).toEqual(['claim.json']);
  });

  test('the claim outlives every checkpoint of the session: the id stays used', async () => {
    const s = storeFor();
    await s.claim('s1', 'run-a');
    await s.write(cp(1), Readable.from([randomBytes(10_000)]));
    await s.delete('s1', 'cp-1');
    await expect(s.claim('s1', 'run-b')).rejects.toMatchObject(taken(/claimed by "run-a"/));
  });

  test('a claim that cannot be read still takes the id; bad ids and owners are refused before anything', async () => {
    const s = storeFor();
    fs.mkdirSync(path.join(dir, 's1'), { recursive: true });
    fs.writeFileSync(claimFile(), '{"owner":');
    await expect(s.claim('s1', 'run-a')).rejects.toMatchObject(taken(/its claim is unreadable/));
    await expect(s.claim('../escape', 'run-a')).rejects.toThrow(TypeError);
    await expect(s.claim('s2', '')).rejects.toThrow(TypeError);
    await expect(s.claim('s2', 'line\nbreak')).rejects.toThrow(TypeError);
    expect(fs.readdirSync(dir)).toEqual(['s1']);
  });
});

describe('the chunked store: a data key or a lineage pointer without a claim also takes the id', () => {
  test('a fork target is taken once forked; a claimed, empty session can be forked into', async () => {
    const s = chunked();
    await s.write(cp(1), Readable.from([randomBytes(10_000)]));
    await s.fork(
      { sessionId: 's1', checkpointId: 'cp-1' },
      { sessionId: 's2', checkpointId: 'f-1', trigger: 'manual' },
    );
    await expect(s.claim('s2', 'run-a')).rejects.toMatchObject({
      code: 'SessionAlreadyExists',
      message: expect.stringMatching(/session id s2 is taken: the store holds .*lineage\.json/),
    });
    await s.claim('s3', 'run-c');
    await s.fork(
      { sessionId: 's1', checkpointId: 'cp-1' },
      { sessionId: 's3', checkpointId: 'f-1', trigger: 'manual' },
    );
    await s.claim('s3', 'run-c');
  });

  test('a lineage whose checkpoints are all deleted, collected and shredded keeps its id', async () => {
    const s = chunked();
    await s.write(cp(1), Readable.from([randomBytes(10_000)]));
    await s.delete('s1', 'cp-1');
    await s.gc({ now: Date.now() + 1000 });
    // Its data key is still there: the id was used.
    await expect(s.claim('s1', 'run-a')).rejects.toMatchObject(taken(/taken: the store holds .*keys/));

    await s.claim('s2', 'run-b');
    await s.write(cp(1, null, 's2'), Readable.from([randomBytes(10_000)]));
    await s.shred('s2');
    await s.delete('s2', 'cp-1');
    await s.gc({ now: Date.now() + 1000 });
    expect(fs.existsSync(claimFile('s2'))).toBe(true);
    await s.claim('s2', 'run-b');
    await expect(s.claim('s2', 'run-x')).rejects.toMatchObject({ code: 'SessionAlreadyExists' });
  });
});
