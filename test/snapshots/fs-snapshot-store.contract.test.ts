import { FsSnapshotStore } from '../../src/snapshots';
import type { FsBlobBackend } from '../../src/snapshots/blob/fs-backend';
import { fsBackend } from './blob/backends';
import { runSnapshotStoreContract } from './store.contract';

runSnapshotStoreContract({
  name: 'the format-1 file-system store',
  // Format 1 is files in a directory, written before blob backends: it runs on the local one only.
  backends: [fsBackend],
  newStore: (backend) => new FsSnapshotStore((backend as FsBlobBackend).root),
  capabilities: {
    formatVersion: 1,
    encryption: undefined,
    authenticatesData: false,
    maintenance: false,
    failedWritesLeaveNoFiles: true,
  },
});
