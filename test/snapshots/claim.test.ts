import { randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { ChunkedSnapshotStore } from '../../src/snapshots/engine/chunked-store';
import { Keyring } from '../../src/snapshots/engine/keyring';
import { cp, sessionIdTaken as taken } from '../helpers/checkpoints';

/** Session ids are never reused: what every store does is in store.contract.ts; here, what only the chunked store adds. */
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
