import { PHASES, planControl, transition, type Phase, type SessionEvent } from '../../src/domain/session-state';

const simpleEvents: SessionEvent['type'][] = [
  'started',
  'checkpointRequested',
  'checkpointSucceeded',
  'checkpointFailed',
  'pauseRequested',
  'pauseSucceeded',
  'pauseFailed',
  'resumeRequested',
  'resumeSucceeded',
  'resumeFailed',
  'stopRequested',
  'stopSucceeded',
  'stopFailed',
  'runtimeLost',
];

/** The whole legal table, written out independently of the implementation's. */
const LEGAL: Record<string, Phase> = {
  'starting|started': 'running',
  'running|checkpointRequested': 'checkpointing',
  'checkpointing|checkpointSucceeded': 'running',
  'checkpointing|checkpointFailed': 'running',
  'running|pauseRequested': 'pausing',
  'pausing|pauseSucceeded': 'paused',
  'pausing|pauseFailed': 'running',
  'paused|resumeRequested': 'resuming',
  'resuming|resumeSucceeded': 'running',
  'resuming|resumeFailed': 'paused',
  'running|stopRequested': 'stopping',
  'paused|stopRequested': 'stopping',
  'stopping|stopSucceeded': 'completed',
  'stopping|stopFailed': 'running',
  'running|runtimeLost': 'resuming',
  'checkpointing|runtimeLost': 'resuming',
  'pausing|runtimeLost': 'resuming',
};

describe('transition', () => {
  for (const phase of PHASES) {
    for (const type of simpleEvents) {
      const expected = LEGAL[`${phase}|${type}`];
      test(`${phase} + ${type} → ${expected ?? 'rejected'}`, () => {
        const result = transition(phase, { type } as SessionEvent);
        if (expected) {
          expect(result).toEqual({ ok: true, phase: expected });
        } else {
          expect(result.ok).toBe(false);
          if (!result.ok) expect(result.reason).toContain(phase);
        }
      });
    }
  }

  test.each(PHASES.filter((p) => p !== 'completed' && p !== 'failed'))(
    '%s + failed → failed with the reason',
    (phase) => {
      expect(transition(phase, { type: 'failed', reason: 'disk gone' })).toEqual({
        ok: true,
        phase: 'failed',
        failureReason: 'disk gone',
      });
    },
  );

  test.each(['completed', 'failed'] as const)('a %s session cannot fail again', (phase) => {
    expect(transition(phase, { type: 'failed', reason: 'x' }).ok).toBe(false);
  });

  test('a runtime that exits 0 by itself completes the session', () => {
    expect(transition('running', { type: 'runtimeExited', exitCode: 0, signal: null })).toEqual({
      ok: true,
      phase: 'completed',
    });
  });

  test('a runtime that exits non-zero fails the session with the exit code', () => {
    expect(transition('running', { type: 'runtimeExited', exitCode: 3, signal: null })).toEqual({
      ok: true,
      phase: 'failed',
      failureReason: 'the runtime process exited with code 3',
    });
    expect(transition('checkpointing', { type: 'runtimeExited', exitCode: null, signal: 'SIGKILL' })).toEqual({
      ok: true,
      phase: 'failed',
      failureReason: 'the runtime process was killed by SIGKILL',
    });
  });

  test.each(['starting', 'pausing', 'paused', 'resuming', 'stopping', 'completed', 'failed'] as const)(
    'an unrequested exit while %s is not a transition',
    (phase) => {
      expect(transition(phase, { type: 'runtimeExited', exitCode: 0, signal: null }).ok).toBe(false);
    },
  );
});

describe('planControl', () => {
  test('pause then resume then stop are legal back to back from running', () => {
    const a = planControl('running', 'pause');
    expect(a).toEqual({ ok: true, projected: 'paused' });
    const b = planControl('paused', 'resume');
    expect(b).toEqual({ ok: true, projected: 'running' });
    expect(planControl('running', 'stop')).toEqual({ ok: true, projected: 'completed' });
  });

  test('checkpoint keeps a running session running', () => {
    expect(planControl('running', 'checkpoint')).toEqual({ ok: true, projected: 'running' });
  });

  test.each([
    ['running', 'resume'],
    ['paused', 'pause'],
    ['paused', 'checkpoint'],
    ['completed', 'checkpoint'],
    ['completed', 'pause'],
    ['completed', 'resume'],
    ['completed', 'stop'],
    ['failed', 'resume'],
    ['failed', 'stop'],
  ] as const)('%s rejects %s with a reason naming both', (phase, control) => {
    const result = planControl(phase, control);
    expect(result).toEqual({ ok: false, reason: `cannot ${control} while the session is ${phase}` });
  });

  test('stop is legal from paused', () => {
    expect(planControl('paused', 'stop')).toEqual({ ok: true, projected: 'completed' });
  });
});
