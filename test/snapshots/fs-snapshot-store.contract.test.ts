import { FsSnapshotStore } from '../../src/snapshots';
import { runSnapshotStoreContract } from './store.contract';

runSnapshotStoreContract({
  name: 'the format-1 file-system store',
  newStore: (rootDir) => new FsSnapshotStore(rootDir),
  capabilities: {
    formatVersion: 1,
    encryption: undefined,
    authenticatesData: false,
    maintenance: false,
    failedWritesLeaveNoFiles: true,
  },
});
