import { appliesTo, CONTROL_NAMES, CONTROLS, phasesFrom, type ControlSpec } from '../../src/api/controls';
import { planControl, STABLE_PHASES, type Control } from '../../src/domain/session-state';
import { describeEntry, nearestIndex } from '../../src/domain/timeline';

const specs = CONTROL_NAMES.map((name) => [name, CONTROLS[name] as ControlSpec] as const);

test('wire names are a public API: every update and signal keeps its name', () => {
  expect(Object.fromEntries(specs.map(([name, s]) => [name, [s.update.name, s.signal?.name ?? null]]))).toEqual({
    checkpoint: ['checkpoint', 'requestCheckpoint'],
    pause: ['pause', 'requestPause'],
    resume: ['resume', 'requestResume'],
    stop: ['stop', 'requestStop'],
    verify: ['verify', null],
    rewind: ['rewind', null],
    fork: ['fork', null],
    branch: ['branch', null],
    configure: ['configure', 'requestConfigure'],
    touch: ['touch', 'touch'],
    append: ['append', 'requestAppend'],
    regenerate: ['regenerate', null],
  });
});

test('a control is named as its update is (its HTTP operationId too)', () => {
  for (const [name, spec] of specs) expect(spec.update.name).toBe(name);
});

test.each(specs.filter(([, s]) => s.queued))('%s is legal from the phases of the state table', (name) => {
  const legal = STABLE_PHASES.filter((p) => planControl(p, name as Control).ok);
  expect(phasesFrom(name)).toEqual(legal);
  expect(legal.length).toBeGreaterThan(0);
});

test('where each control may be sent from, as an operator reads it', () => {
  expect(Object.fromEntries(CONTROL_NAMES.map((n) => [n, phasesFrom(n)]))).toEqual({
    checkpoint: ['running'],
    pause: ['running'],
    resume: ['paused'],
    stop: ['running', 'paused'],
    verify: ['running', 'paused'],
    rewind: ['running', 'paused'],
    fork: ['running', 'paused'],
    branch: ['running', 'paused'],
    configure: ['running', 'paused'],
    touch: ['running', 'paused'],
    append: ['running'],
    regenerate: ['running', 'paused'],
  });
});

test('append and regenerate apply to conversation sessions only; the rest to every kind', () => {
  const kinds = ['workspace', 'memory', 'conversation'] as const;
  const served = Object.fromEntries(CONTROL_NAMES.map((n) => [n, kinds.filter((k) => appliesTo(n, k))]));
  expect(served).toMatchObject({ append: ['conversation'], regenerate: ['conversation'], checkpoint: kinds });
  for (const [name, spec] of specs) expect({ name, runtimes: spec.runtimes.length }).not.toEqual({ name, runtimes: 0 });
});

test.each(specs)('every example of %s parses with its input schema, and names only its fields', (_, spec) => {
  expect(spec.doc.examples.length).toBeGreaterThan(0);
  for (const example of spec.doc.examples) {
    expect({ example, issues: spec.input.safeParse(example).error?.issues }).toEqual({ example, issues: undefined });
    for (const field of Object.keys(example as object)) expect(Object.keys(spec.doc.fields)).toContain(field);
  }
});

describe('naming what is at a timeline index', () => {
  const at = '2026-12-01T00:00:00.000Z';
  const indexOf = (id: string) => ({ '000002-aaaaaaaa': 2 })[id];

  test('a restore, a rewind and a fork name the checkpoint they concern by its index', () => {
    expect(
      describeEntry(
        { kind: 'restored', at, index: 3, checkpointId: '000002-aaaaaaaa', instanceId: 'x', cause: 'resume' },
        indexOf,
      ),
    ).toBe('a restore of the checkpoint at index 2');
    expect(
      describeEntry(
        { kind: 'rewound', at, index: 5, to: '000009-bbbbbbbb', toIndex: 4, fromBranch: 0, fromHead: null },
        indexOf,
      ),
    ).toBe('a rewind to the checkpoint at index 4');
    expect(describeEntry({ kind: 'runtime-lost', at, index: 6, instanceId: 'x', reason: 'gone' }, indexOf)).toBe(
      'a runtime-lost entry',
    );
  });

  test('the nearest checkpoint index: the closest, the earlier of two as close', () => {
    expect(nearestIndex([1, 2, 6], 3)).toBe(2);
    expect(nearestIndex([2, 4], 3)).toBe(2);
    expect(nearestIndex([2, 4], 9)).toBe(4);
    expect(nearestIndex([], 3)).toBeUndefined();
  });
});
