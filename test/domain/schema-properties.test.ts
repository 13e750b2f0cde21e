import fc from 'fast-check';
import type { z } from 'zod';
import {
  CarriedState,
  CheckpointInput,
  PauseInput,
  ResumeInput,
  SessionWorkflowInput,
  StartSessionInput,
  StopInput,
  VerifyInput,
} from '../../src/domain';

/**
 * Every schema at an edge, against arbitrary JSON: it answers (never throws), what it accepts it accepts again
 * unchanged (nothing is silently dropped or rewritten), and a key it does not know is always refused.
 */
const SCHEMAS: [string, z.ZodType, unknown][] = [
  ['StartSessionInput', StartSessionInput, { sessionId: 's1', runtime: { kind: 'memory' } }],
  ['SessionWorkflowInput', SessionWorkflowInput, { spec: { sessionId: 's1', runtime: { kind: 'memory' } } }],
  ['CheckpointInput', CheckpointInput, { label: 'warm' }],
  ['PauseInput', PauseInput, { reason: 'night' }],
  ['ResumeInput', ResumeInput, { checkpointId: '000001-abcdef12' }],
  ['StopInput', StopInput, { checkpoint: false }],
  ['VerifyInput', VerifyInput, {}],
  [
    'CarriedState',
    CarriedState,
    {
      spec: { sessionId: 's1', runtime: { kind: 'memory' } },
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
      startedAt: '2026-01-01T00:00:00.000Z',
      updatedAt: '2026-01-01T00:00:00.000Z',
    },
  ],
];

const runs = { numRuns: 300 };

describe.each(SCHEMAS)('%s', (_, schema, valid) => {
  test('answers any JSON value without throwing, and what it accepts parses again to itself', () => {
    fc.assert(
      fc.property(fc.jsonValue(), (value) => {
        const result = schema.safeParse(value);
        if (result.success) expect(schema.parse(result.data)).toEqual(result.data);
      }),
      runs,
    );
  });

  test('the valid example parses unchanged', () => {
    expect(schema.parse(valid)).toEqual(valid);
  });

  test('an unknown key beside valid fields is always refused, and named', () => {
    const known = new Set(Object.keys(valid as object));
    fc.assert(
      fc.property(
        fc.string({ minLength: 1, maxLength: 20 }).filter((k) => !known.has(k) && k !== '__proto__'),
        fc.jsonValue(),
        (key, value) => {
          const result = schema.safeParse({ ...(valid as object), [key]: value });
          expect(result.success).toBe(false);
          expect(result.error?.issues.some((i) => i.code === 'unrecognized_keys' && i.keys.includes(key))).toBe(true);
        },
      ),
      runs,
    );
  });

  test('arbitrary objects shaped like the valid one never throw', () => {
    const keys = Object.keys(valid as object);
    fc.assert(
      fc.property(fc.dictionary(fc.constantFrom(...(keys.length ? keys : ['x'])), fc.jsonValue()), (value) => {
        expect(() => schema.safeParse(value)).not.toThrow();
      }),
      runs,
    );
  });
});
