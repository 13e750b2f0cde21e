import fc from 'fast-check';
import { printable, table } from '../../src/cli/text';

const UNSAFE = /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/;

test('controls and bidirectional overrides become visible escapes', () => {
  expect(printable('\x1b]0;owned\x07\x1b[2Jwarm')).toBe('\\x1b]0;owned\\x07\\x1b[2Jwarm');
  expect(printable('abc\u202edcba\u2066x\u2069')).toBe('abc\\u202edcba\\u2066x\\u2069');
  expect(printable('a\nb\tc\rd\x00\x7f\x9b')).toBe('a\\nb\\tc\\rd\\x00\\x7f\\x9b');
  expect(printable('plain — ünïcödé, emoji 🙂')).toBe('plain — ünïcödé, emoji 🙂');
});

test('no string keeps an unsafe character; safe strings and printed strings are left as they are', () => {
  fc.assert(
    fc.property(fc.string({ unit: 'binary' }), (s) => {
      const shown = printable(s);
      expect(shown).not.toMatch(UNSAFE);
      expect(printable(shown)).toBe(shown);
      if (!UNSAFE.test(s)) expect(shown).toBe(s);
    }),
    { numRuns: 1000 },
  );
});

test('tables align on the escaped text', () => {
  expect(
    table(
      ['ID', 'PHASE'],
      [
        ['a\u202eb', 'running'],
        ['long-name', 'x'],
      ],
    ),
  ).toEqual(['ID         PHASE', 'a\\u202eb   running', 'long-name  x']);
});
