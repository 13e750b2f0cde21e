import type { CheckpointRef } from '../../src/domain/schemas';
import { byteSize, checkpointName, restoreSummary } from '../../src/domain/operator-view';

/** The activity summaries, as an operator reads them. */

const ref = (sequence: number, extra: Partial<CheckpointRef> = {}): CheckpointRef => ({
  checkpointId: `00000${sequence}-1a2b3c4${sequence}`,
  sessionId: 'build-42',
  sequence,
  parentId: null,
  trigger: 'pause',
  runtimeKind: 'memory',
  runtimeVersion: '1',
  formatVersion: 3,
  size: 1_300_000,
  digest: `sha256:${'0'.repeat(64)}`,
  createdAt: '2026-01-02T10:00:00.000Z',
  index: sequence,
  branch: 0,
  ...extra,
});

test('names checkpoints by their sequence and sizes in binary units', () => {
  expect(checkpointName('000003-1a2b3c4d')).toBe('000003');
  expect(checkpointName('planted-by-hand')).toBe('planted-by-hand');
  expect([812, 4096, 1_300_000, 5 * 1024 ** 3].map(byteSize)).toEqual(['812 B', '4.0 KiB', '1.2 MiB', '5.0 GiB']);
  expect(restoreSummary(ref(2), 'resume', ['000003-1a2b3c4d'])).toBe(
    'restore 000002 after fallback from 000003 (resume, 1.2 MiB)',
  );
});
