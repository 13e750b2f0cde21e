import fs from 'node:fs';

export default async function globalTeardown(): Promise<void> {
  await globalThis.__DEV_SERVER__?.stop();
  if (globalThis.__TEST_TMP__) fs.rmSync(globalThis.__TEST_TMP__, { recursive: true, force: true });
}
