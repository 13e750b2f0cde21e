import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { FsBlobBackend } from '../../../src/snapshots/blob/fs-backend';
import { describeBlobBackendContract } from './backend-contract';

describeBlobBackendContract('filesystem', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ds-blob-contract-'));
  const backend = new FsBlobBackend(dir);
  return {
    backend,
    cleanup: async () => {
      await backend.close();
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
});
