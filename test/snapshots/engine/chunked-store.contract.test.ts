import { randomBytes } from 'node:crypto';
import { ChunkedSnapshotStore, Keyring } from '../../../src/snapshots';
import { runSnapshotStoreContract } from '../store.contract';

runSnapshotStoreContract({
  name: 'the chunked store, encrypted',
  newStore: (backend) =>
    new ChunkedSnapshotStore({ backend, keyring: new Keyring([{ id: 'k1', key: randomBytes(32) }]) }),
  capabilities: {
    formatVersion: 3,
    encryption: 'aes-256-gcm',
    authenticatesData: true,
    maintenance: true,
    failedWritesLeaveNoFiles: false,
  },
});

runSnapshotStoreContract({
  name: 'the chunked store, plaintext',
  newStore: (backend) => new ChunkedSnapshotStore({ backend, keyring: null }),
  capabilities: {
    formatVersion: 3,
    encryption: 'none',
    authenticatesData: false,
    maintenance: true,
    failedWritesLeaveNoFiles: true,
  },
});
