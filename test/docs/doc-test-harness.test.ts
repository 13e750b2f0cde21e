import { consoleSteps, markdownBlocks, normaliseOutput } from '../helpers/doc-test';

/** The doc test's own rules: what a marker means, what a console block expects, what normalisation keeps. */

test('a marker before a fence, blank lines between or not, says how the block is treated', () => {
  const blocks = markdownBlocks(
    [
      '<!-- doc-test: skip (needs Docker) -->',
      '',
      '```sh',
      'docker compose up',
      '```',
      'text',
      '<!-- doc-test: prelude',
      'KEY=$(cat data/gateway-dev-key)',
      '-->',
      '```sh',
      'echo "$KEY"',
      '```',
      '',
      '```console',
      '$ echo hi',
      'hi',
      '```',
    ].join('\n'),
  );
  expect(blocks).toEqual([
    { lang: 'sh', code: 'docker compose up', line: 3, marker: { kind: 'skip', reason: 'needs Docker' } },
    {
      lang: 'sh',
      code: 'echo "$KEY"',
      line: 10,
      marker: { kind: 'prelude', code: 'KEY=$(cat data/gateway-dev-key)' },
    },
    { lang: 'console', code: '$ echo hi\nhi', line: 14, marker: undefined },
  ]);
});

test('an unclosed fence is an error, not a block that silently runs to the end', () => {
  expect(() => markdownBlocks('```sh\nls\n')).toThrow('unclosed fence at line 1');
});

test('a console block pairs each command with the lines under it', () => {
  expect(consoleSteps('$ a\none\ntwo\n$ b')).toEqual([
    { command: 'a', expected: ['one', 'two'] },
    { command: 'b', expected: [] },
  ]);
});

test('normalisation keeps the words and drops what differs between runs', () => {
  const a = normaliseOutput(
    '2026-12-01T09:47:55.724Z  checkpoint #1 000001-ae1cc5f8 ← (root)  manual "warm"  2048 B\n' +
      'runtime           workspace counter-787b8874 on durable-sessions@vm-c278fbea\n' +
      'location          /…/data/workspaces/counter/counter-787b8874\n' +
      'paused; checkpoint 000002-903dc264 (#2, 2048 bytes, sha256:' +
      'bcf69eba5318177750580b616f99c796a3d4cd3f8fe630e0d730481c8e63a6e5)',
  );
  const b = normaliseOutput(
    '2026-12-06T02:48:09.875Z  checkpoint #4 000003-a13a008b ← (root)  manual "warm"  4096 B\n' +
      'runtime  workspace counter-256c5640 on durable-sessions@host-b\n' +
      'location /tmp/ds-doc-x/data/workspaces/counter/counter-256c5640\n' +
      'paused; checkpoint 000005-9cf90da9 (#5, 11 bytes, sha256:' +
      '9821d59f9d8d7785456445bc6630036e9fe56779771db66c37448e5574e3a70e)',
    '/tmp/ds-doc-x',
  );
  expect(b).toBe(a);
  expect(a).toMatchInlineSnapshot(`
   "<time> checkpoint #N <checkpoint> ← (root) manual "warm" N B
   runtime workspace counter-<hex> on durable-sessions@<host>
   location /…/data/workspaces/counter/counter-<hex>
   paused; checkpoint <checkpoint> (#N, N bytes, <digest>)"
  `);
  // A word that changed is still seen.
  expect(normaliseOutput('phase running')).not.toBe(normaliseOutput('phase paused'));
});
