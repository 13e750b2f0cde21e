import type { CheckpointRef } from '../../src/domain/schemas';
import {
  byteSize,
  checkpointName,
  describeSession,
  restoreSummary,
  type SessionView,
} from '../../src/domain/operator-view';

/** The markdown of the Web UI's current details and the activity summaries, as an operator reads them. */

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

function view(overrides: Partial<SessionView['state']> = {}, pending?: SessionView['pending']): SessionView {
  return {
    state: {
      spec: { sessionId: 'build-42', runtime: { kind: 'memory' } },
      phase: 'running',
      runtime: null,
      head: null,
      checkpoints: [],
      timeline: [],
      nextSequence: 1,
      failure: null,
      lastRestore: null,
      lastRejectedSignal: null,
      results: [],
      startedAt: '2026-01-02T09:00:00.000Z',
      updatedAt: '2026-01-02T09:00:00.000Z',
      runControl: { checkpointCount: 0 } as SessionView['state']['runControl'],
      ...overrides,
    },
    pending: pending ?? { operations: [], waitingSignals: [] },
    lastVerification: null,
  };
}

test('names checkpoints by their sequence and sizes in binary units', () => {
  expect(checkpointName('000003-1a2b3c4d')).toBe('000003');
  expect(checkpointName('planted-by-hand')).toBe('planted-by-hand');
  expect([812, 4096, 1_300_000, 5 * 1024 ** 3].map(byteSize)).toEqual(['812 B', '4.0 KiB', '1.2 MiB', '5.0 GiB']);
  expect(restoreSummary(ref(2), 'resume', ['000003-1a2b3c4d'])).toBe(
    'restore 000002 after fallback from 000003 (resume, 1.2 MiB)',
  );
});

test('a running session with work queued shows what runs, what waits and the newest entries', () => {
  const cp = ref(1, { trigger: 'manual', label: 'before upgrade' });
  const details = describeSession(
    view(
      {
        head: cp,
        runtime: {
          instanceId: 'build-42-aa',
          kind: 'memory',
          hostTaskQueue: 'q@host-1',
          location: '',
          startedAt: '2026-01-02T09:00:00.000Z',
        },
        runControl: {
          checkpointCount: 1,
          deferredSignals: [{ signal: 'requestStop', input: {} }],
        } as SessionView['state']['runControl'],
        timeline: [{ kind: 'checkpoint', index: 1, branch: 0, at: '2026-01-02T10:00:01.000Z', checkpoint: cp }],
      },
      {
        operations: [
          { what: 'pause', running: true },
          { what: 'resume', running: false },
        ],
        waitingSignals: ['requestStop'],
      },
    ),
  );
  expect(details).toBe(
    [
      '**running** · memory runtime · 1 checkpoint(s)',
      'head: `000001-1a2b3c41` (#1, 1.2 MiB, manual, "before upgrade", 2026-01-02T10:00:00.000Z)',
      'runtime: `build-42-aa` on `q@host-1`',
      'pending: pause (running), resume · 1 signal(s) waiting (requestStop)',
      'recent:\n- #1 10:00:01 checkpoint (manual, 1.2 MiB) "before upgrade"',
    ].join('\n\n'),
  );
});

test('only the newest five entries are shown, and text from callers stays on one line', () => {
  const timeline = Array.from({ length: 7 }, (_, i) => ({
    kind: 'signal-rejected' as const,
    index: i + 1,
    at: '2026-01-02T10:00:00.000Z',
    signal: 'requestPause',
    reason: `line one\nline two ${i}`,
  }));
  const details = describeSession(view({ timeline }));
  expect(details.split('\n').filter((l) => l.startsWith('- '))).toEqual(
    [3, 4, 5, 6, 7].map((n) => `- #${n} 10:00:00 signal requestPause rejected: line one line two ${n - 1}`),
  );
});

test('entries name the checkpoints they concern by timeline index, the number every surface takes back', () => {
  const at = '2026-01-02T10:00:01.000Z';
  const paused = ref(2, { index: 4 });
  const markdown = describeSession(
    view({
      phase: 'running',
      head: paused,
      checkpoints: [paused],
      timeline: [
        { kind: 'checkpoint', at, index: 4, checkpoint: paused },
        { kind: 'restored', at, index: 5, checkpointId: paused.checkpointId, instanceId: 'i-1', cause: 'resume' },
        { kind: 'verified', at, index: 6, cause: 'request', checkpointId: paused.checkpointId, status: 'ok' },
      ],
    }),
  );
  expect(markdown).toContain('head: `000002-1a2b3c42` (#4, ');
  expect(markdown).toContain('last restore: restored #4 (resume, ');
  expect(markdown).toContain('- #5 10:00:01 restored #4 (resume)');
  expect(markdown).toContain('- #6 10:00:01 verified #4: ok (request)');
  expect(markdown).not.toMatch(/000002 /);
});
