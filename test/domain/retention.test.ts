import { checkpointsToDelete } from '../../src/domain/retention';
import type { CheckpointRef } from '../../src/domain/schemas';

const DAY = 24 * 60 * 60_000;
const NOW = Date.parse('2026-11-29T12:00:00Z');

function ref(sequence: number, ageDays: number, label?: string): CheckpointRef {
  return {
    checkpointId: `cp-${sequence}`,
    sessionId: 's',
    sequence,
    parentId: sequence > 1 ? `cp-${sequence - 1}` : null,
    trigger: 'manual',
    ...(label ? { label } : {}),
    runtimeKind: 'memory',
    runtimeVersion: '1',
    formatVersion: 2,
    size: 1,
    digest: `sha256:${'0'.repeat(64)}`,
    createdAt: new Date(NOW - ageDays * DAY).toISOString(),
  };
}

const ids = (refs: CheckpointRef[]) => refs.map((r) => r.checkpointId).sort();
const five = [ref(1, 5), ref(2, 4, 'release'), ref(3, 3), ref(4, 2), ref(5, 1)];

test('no policy, or an empty one, deletes nothing', () => {
  expect(checkpointsToDelete(five, 'cp-5', undefined, NOW)).toEqual([]);
  expect(checkpointsToDelete(five, 'cp-5', {}, NOW)).toEqual([]);
});

test('keepLast keeps the newest N, labelled ones and the head', () => {
  expect(ids(checkpointsToDelete(five, 'cp-5', { keepLast: 2 }, NOW))).toEqual(['cp-1', 'cp-3']);
  // After a resume of an older checkpoint, the head is kept even beyond N.
  expect(ids(checkpointsToDelete(five, 'cp-1', { keepLast: 2 }, NOW))).toEqual(['cp-3']);
});

test('keepLabelled: false lets labelled checkpoints go too', () => {
  expect(ids(checkpointsToDelete(five, 'cp-5', { keepLast: 2, keepLabelled: false }, NOW))).toEqual([
    'cp-1',
    'cp-2',
    'cp-3',
  ]);
});

test('maxAgeMs deletes what is older, with the same protections', () => {
  expect(ids(checkpointsToDelete(five, 'cp-5', { maxAgeMs: 2.5 * DAY }, NOW))).toEqual(['cp-1', 'cp-3']);
  expect(ids(checkpointsToDelete(five, 'cp-1', { maxAgeMs: 0.5 * DAY }, NOW))).toEqual(['cp-3', 'cp-4', 'cp-5']);
});
