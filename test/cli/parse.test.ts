import fc from 'fast-check';
import { COMMANDS, COMMAND_NAMES, COMMON_OPTIONS, type CommandName, type CommandSpec } from '../../src/cli/commands';
import { UsageError } from '../../src/cli/errors';
import { jsonRequested, parseCommandLine, type Invocation } from '../../src/cli/parse';

const runs = { numRuns: 500 };

/** The parser's only way to refuse: a UsageError. Anything else thrown is a crash. */
function parseOrRefuse(argv: string[]): Invocation | UsageError {
  try {
    return parseCommandLine(argv);
  } catch (err) {
    if (err instanceof UsageError) return err;
    throw err;
  }
}

function refusal(argv: string[]): UsageError {
  const result = parseOrRefuse(argv);
  if (!(result instanceof UsageError)) throw new Error(`accepted: ${JSON.stringify(argv)}`);
  return result;
}

/** Words that look like what people type, and what they should not: flags, near-flags, `--`, prototype names. */
const word = fc.oneof(
  fc.string(),
  fc.constantFrom(
    '--',
    '-',
    '-h',
    '--help',
    '--json',
    '--json=1',
    '--label',
    '--label=',
    '--lable',
    '--phase',
    '--no-checkpoint',
    '--checkpoint',
    '--through-session',
    '--file',
    '--env',
    'A=1',
    '=x',
    '--yes',
    '-x',
    '-hx',
    '---',
    '--=',
    '--__proto__',
    '--constructor',
    '--toString',
    '__proto__',
    'help',
    ...COMMAND_NAMES,
  ),
  fc.string().map((s) => `--${s}`),
  fc.string().map((s) => `-${s}`),
  fc.tuple(fc.string(), fc.string()).map(([name, value]) => `--${name}=${value}`),
);

test('any argv is parsed or refused with a UsageError: nothing else is thrown', () => {
  fc.assert(
    fc.property(fc.array(word, { maxLength: 10 }), (argv) => {
      parseOrRefuse(argv);
    }),
    runs,
  );
  fc.assert(
    fc.property(fc.constantFrom(...COMMAND_NAMES, 'help'), fc.array(word, { maxLength: 10 }), (command, args) => {
      const result = parseOrRefuse([command, ...args]);
      if (result instanceof UsageError || result.command === 'help') return;
      // What is accepted holds only options the command declares.
      const known = { ...(COMMANDS[result.command] as CommandSpec).options, ...COMMON_OPTIONS };
      for (const name of Object.keys(result.values)) expect(Object.hasOwn(known, name)).toBe(true);
    }),
    runs,
  );
});

/** One option as the words that give it, and the value the parser must hand back for it. */
interface Given {
  words: string[];
  value: unknown;
}

const text = fc.string();
/** A value as a separate word when it cannot be read as an option, else inline (`--label=-x`). */
function valueWords(name: string, value: string): fc.Arbitrary<string[]> {
  if (value.startsWith('-')) return fc.constant([`--${name}=${value}`]);
  return fc.constantFrom([`--${name}`, value], [`--${name}=${value}`]);
}

function givenOption(name: string, spec: CommandSpec['options'][string]): fc.Arbitrary<Given> {
  if (spec.type === 'boolean') return fc.constant({ words: [`--${name}`], value: true });
  if (spec.pairs) {
    const pair = fc.tuple(
      fc.string({ minLength: 1 }).filter((k) => !k.includes('=')),
      text,
    );
    return fc
      .array(pair, { minLength: 1, maxLength: 3 })
      .chain((pairs) =>
        fc
          .tuple(...pairs.map(([k, v]) => valueWords(name, `${k}=${v}`)))
          .map((words) => ({ words: words.flat(), value: Object.fromEntries(pairs) })),
      );
  }
  const value = spec.choices ? fc.constantFrom(...spec.choices) : text;
  if (spec.multiple) {
    // A repeatable option (`--label a --label b`): every value, in the order given.
    return fc
      .array(value, { minLength: 1, maxLength: 3 })
      .chain((values) =>
        fc.tuple(...values.map((v) => valueWords(name, v))).map((words) => ({ words: words.flat(), value: values })),
      );
  }
  return value.chain((v) => valueWords(name, v).map((words) => ({ words, value: v })));
}

/** A command line that matches the command's declaration, in any order, and what parsing it must give. */
function validInvocation(command: CommandName) {
  const spec: CommandSpec = COMMANDS[command];
  const options: CommandSpec['options'] = { ...spec.options, json: COMMON_OPTIONS.json };
  const chosen = Object.fromEntries(
    Object.entries(options).map(([name, o]) => {
      const must = spec.confirm?.option === name;
      return [name, must ? givenOption(name, o) : fc.option(givenOption(name, o), { nil: undefined })];
    }),
  );
  const sessionId = text.filter((s) => !s.startsWith('-'));
  return fc
    .record({
      options: fc.record(chosen),
      sessionId,
      rest: spec.rest ? fc.array(text, { maxLength: 4 }) : fc.constant<string[]>([]),
    })
    .map(({ options: chosenOptions, sessionId, rest }) => {
      const given = { ...chosenOptions };
      // An option that means nothing without another brings it along.
      for (const [name, o] of Object.entries(options)) {
        if (given[name] && o.requires && !given[o.requires])
          given[o.requires] = { words: [`--${o.requires}`], value: true };
      }
      return { given, sessionId, rest };
    })
    .chain(({ given, sessionId, rest }) => {
      const groups = Object.values(given).flatMap((g) => (g ? [g.words] : []));
      if (spec.args.length) groups.push([sessionId]);
      return fc.shuffledSubarray(groups, { minLength: groups.length, maxLength: groups.length }).map((ordered) => ({
        groups: ordered,
        rest,
        expected: {
          command,
          json: given.json !== undefined,
          values: Object.fromEntries(Object.entries(given).flatMap(([k, g]) => (g ? [[k, g.value]] : []))),
          rest,
          ...(spec.args.length ? { sessionId } : {}),
        },
      }));
    });
}

const anyValidInvocation = fc.constantFrom(...COMMAND_NAMES).chain(validInvocation);

function argvOf(command: string, groups: string[][], rest: string[]): string[] {
  return [command, ...groups.flat(), ...(rest.length ? ['--', ...rest] : [])];
}

test('a command line that matches its declaration parses to exactly what it says, in any order', () => {
  fc.assert(
    fc.property(anyValidInvocation, ({ groups, rest, expected }) => {
      expect(parseCommandLine(argvOf(expected.command, groups, rest))).toEqual(expected);
    }),
    runs,
  );
});

test('an unknown option is always refused, by name, wherever it stands before --', () => {
  fc.assert(
    fc.property(
      anyValidInvocation,
      fc.string({ minLength: 1 }).filter((s) => !s.includes('=')),
      fc.option(text, { nil: undefined }),
      fc.nat(),
      ({ groups, rest, expected }, name, inline, at) => {
        const known = { ...(COMMANDS[expected.command] as CommandSpec).options, ...COMMON_OPTIONS };
        fc.pre(!Object.hasOwn(known, name));
        const flag = `--${name}${inline === undefined ? '' : `=${inline}`}`;
        const withUnknown = [...groups];
        withUnknown.splice(at % (groups.length + 1), 0, [flag]);
        const error = refusal(argvOf(expected.command, withUnknown, rest));
        expect(error.message).toContain(`unknown option --${name}`);
        expect(error.command).toBe(expected.command);
      },
    ),
    runs,
  );
});

test('--help and -h anywhere before -- answer with the usage of the command', () => {
  fc.assert(
    fc.property(anyValidInvocation, fc.constantFrom('--help', '-h'), fc.nat(), ({ groups, rest, expected }, h, at) => {
      const withHelp = [...groups];
      withHelp.splice(at % (groups.length + 1), 0, [h]);
      expect(parseCommandLine(argvOf(expected.command, withHelp, rest))).toEqual({
        command: 'help',
        topic: expected.command,
      });
    }),
    runs,
  );
  expect(parseCommandLine(['--help'])).toEqual({ command: 'help' });
  expect(parseCommandLine(['-h'])).toEqual({ command: 'help' });
  expect(parseCommandLine([])).toEqual({ command: 'help' });
  expect(parseCommandLine(['help', 'list'])).toEqual({ command: 'help', topic: 'list' });
});

test('the mistakes people make are refused with what to type instead', () => {
  expect(refusal(['checkpoint', 'counter', '--lable', 'warm']).message).toBe(
    'unknown option --lable (did you mean --label?)',
  );
  expect(refusal(['stop', 'counter', '--no_checkpoint']).message).toBe(
    'unknown option --no_checkpoint (did you mean --no-checkpoint?)',
  );
  expect(refusal(['status', 'counter', '-x']).message).toBe('unknown option -x');
  expect(refusal(['stauts', 'counter']).message).toBe('unknown command: stauts (did you mean status?)');
  expect(refusal(['start', 's1', 'node', 'app.js']).message).toBe(
    'unexpected argument: node: put the command after --, as in: durable-sessions start s1 -- node app.js',
  );
  expect(refusal(['list', '--phase', 'bogus']).message).toBe(
    '--phase must be one of starting, running, checkpointing, pausing, paused, resuming, rewinding, stopping, completed, ' +
      'failed; got bogus',
  );
  expect(refusal(['list', '--phase', 'runing']).message).toMatch(/got runing \(did you mean running\?\)$/);
  expect(refusal(['checkpoint', 'counter', '--label']).message).toBe('--label needs a value (TEXT)');
  expect(refusal(['checkpoint', 'counter', '--label', '--json']).message).toBe(
    '--label needs a value; for one that starts with "-", write --label=--json',
  );
  expect(refusal(['status', 'counter', '--json=yes']).message).toBe('--json takes no value');
  expect(refusal(['status']).message).toBe('status needs <session-id>');
  expect(refusal(['status', 'a', 'b']).message).toBe('unexpected argument: b');
  expect(refusal(['status', 'a', '--', 'b']).message).toBe('status takes nothing after --');
  expect(refusal(['start', 's1', '--env', 'PATH', '--', 'sh']).message).toBe('--env expects NAME=VALUE, got PATH');
  expect(refusal(['verify', 's1', '--checkpoint', '000001-abcdef12']).message).toBe(
    '--checkpoint needs --through-session',
  );
  expect(refusal(['shred', 's1']).message).toBe('shred destroys every checkpoint of the session: add --yes');
  expect(refusal(['--json', 'status', 's1']).message).toBe('expected a command before --json');
});

test('an inline value keeps the session id where it is', () => {
  expect(parseCommandLine(['checkpoint', '--label=warm', 'counter'])).toEqual({
    command: 'checkpoint',
    sessionId: 'counter',
    json: false,
    values: { label: 'warm' },
    rest: [],
  });
});

test('--json is seen even on a line that cannot be parsed, but not after --', () => {
  expect(jsonRequested(['status', '--lable', '--json'])).toBe(true);
  expect(jsonRequested(['start', 's1', '--', 'tool', '--json'])).toBe(false);
  expect(parseCommandLine(['start', 's1', '--', 'tool', '--json'])).toMatchObject({
    json: false,
    rest: ['tool', '--json'],
  });
});
