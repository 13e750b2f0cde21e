import { parseArgs, type ParseArgsConfig } from 'node:util';
import { closestName, TENANT_PATTERN } from '../domain/names';
import { messageOf } from '../errors';
import {
  COMMANDS,
  COMMAND_NAMES,
  COMMON_OPTIONS,
  isCommandName,
  type CommandName,
  type CommandSpec,
  type OptionSpec,
} from './commands';
import { UsageError } from './errors';

type OptionValue<O> = O extends { type: 'boolean' }
  ? boolean
  : O extends { choices: readonly (infer C)[] }
    ? C
    : O extends { pairs: true }
      ? Record<string, string>
      : O extends { multiple: true }
        ? string[]
        : string;

type Values<Options> = { [K in keyof Options]?: OptionValue<Options[K]> };
type Positionals<Args> = Args extends readonly [] ? object : { sessionId: string };

/** A command line that matched its command's declaration, typed by that declaration. */
export type Invocation =
  | { command: 'help'; topic?: CommandName }
  | {
      [C in CommandName]: {
        command: C;
        json: boolean;
        values: Values<(typeof COMMANDS)[C]['options'] & typeof COMMON_OPTIONS>;
        /** The words after `--`. */
        rest: string[];
      } & Positionals<(typeof COMMANDS)[C]['args']>;
    }[CommandName];

/** Whether the command line asks for JSON, even when it cannot be parsed (so its usage error is JSON too). */
export function jsonRequested(argv: readonly string[]): boolean {
  const end = argv.indexOf('--');
  return (end === -1 ? argv : argv.slice(0, end)).includes('--json');
}

/**
 * Parses a command line (without the program name) against the declarations in `commands.ts`, with `node:util`
 * parseArgs in strict mode: unknown options, missing values and stray arguments are refused. Pure: no I/O, and it
 * throws nothing but UsageError.
 */
export function parseCommandLine(argv: readonly string[]): Invocation {
  const [first, ...args] = argv;
  if (first === undefined || first === '--help' || first === '-h') return { command: 'help' };
  if (first === 'help') return parseHelp(args);
  if (first.startsWith('-')) throw new UsageError(`expected a command before ${first}`);
  if (!isCommandName(first)) throw new UsageError(`unknown command: ${first}${didYouMean(first, COMMAND_NAMES)}`);
  return parseCommand(first, args);
}

function parseHelp(args: string[]): Invocation {
  const { positionals } = strictParse(undefined, args, COMMON_OPTIONS);
  const [topic, extra] = positionals;
  if (extra !== undefined) throw new UsageError(`unexpected argument: ${extra}`);
  if (topic === undefined) return { command: 'help' };
  if (!isCommandName(topic)) throw new UsageError(`unknown command: ${topic}${didYouMean(topic, COMMAND_NAMES)}`);
  return { command: 'help', topic };
}

function parseCommand(command: CommandName, args: string[]): Invocation {
  const spec: CommandSpec = COMMANDS[command];
  const options: Record<string, OptionSpec> = { ...spec.options, ...COMMON_OPTIONS };
  // Help wins over every other mistake on the line, as people type --help to find out what the mistake is.
  if (looseTokens(args, options).some((t) => t.kind === 'option' && t.name === 'help')) {
    return { command: 'help', topic: command };
  }
  const { values, tokens } = strictParse(command, args, options);
  const end = tokens.find((t) => t.kind === 'option-terminator')?.index ?? Infinity;
  const positionals = tokens.flatMap((t) => (t.kind === 'positional' && t.index < end ? [t.value] : []));
  const rest = tokens.flatMap((t) => (t.kind === 'positional' && t.index > end ? [t.value] : []));

  if (positionals.length < spec.args.length) {
    throw new UsageError(`${command} needs ${spec.args[positionals.length]}`, command);
  }
  const extra = positionals[spec.args.length];
  if (extra !== undefined) {
    const hint = spec.rest
      ? `: put the command after --, as in: durable-sessions ${command} ${positionals[0]} -- ${positionals.slice(1).join(' ')}`
      : '';
    throw new UsageError(`unexpected argument: ${extra}${hint}`, command);
  }
  if (rest.length > 0 && !spec.rest) throw new UsageError(`${command} takes nothing after --`, command);

  const checked: Record<string, unknown> = {};
  for (const [name, value] of Object.entries(values)) {
    const option = options[name]!;
    if (option.choices && !option.choices.includes(value as string)) {
      throw new UsageError(
        `--${name} must be one of ${option.choices.join(', ')}; got ${value as string}${didYouMean(value as string, option.choices)}`,
        command,
      );
    }
    if (option.requires && values[option.requires] === undefined) {
      throw new UsageError(`--${name} needs --${option.requires}`, command);
    }
    checked[name] = option.pairs ? pairs(command, name, option, value as string[]) : value;
  }
  const { tenant } = values as { tenant?: string };
  if (tenant !== undefined && !TENANT_PATTERN.test(tenant)) {
    throw new UsageError(`--tenant must be letters, digits, "_" and "-" (at most 64), not ${JSON.stringify(tenant)}`);
  }
  if (spec.confirm && values[spec.confirm.option] !== true) {
    throw new UsageError(`${command} ${spec.confirm.why}: add --${spec.confirm.option}`, command);
  }
  return {
    command,
    json: values.json === true,
    values: checked,
    rest,
    ...(spec.args.length ? { sessionId: positionals[0] } : {}),
  } as Invocation;
}

function pairs(command: CommandName, name: string, option: OptionSpec, values: string[]): Record<string, string> {
  return Object.fromEntries(
    values.map((v) => {
      const eq = v.indexOf('=');
      if (eq <= 0) throw new UsageError(`--${name} expects ${option.value}, got ${v}`, command);
      return [v.slice(0, eq), v.slice(eq + 1)];
    }),
  );
}

function parseArgsOptions(options: Record<string, OptionSpec>): NonNullable<ParseArgsConfig['options']> {
  return Object.fromEntries(
    Object.entries(options).map(([name, o]) => [
      name,
      { type: o.type, ...(o.short ? { short: o.short } : {}), ...(o.multiple ? { multiple: true } : {}) },
    ]),
  );
}

type Token = NonNullable<ReturnType<typeof parseArgs>['tokens']>[number];

function strictParse(command: CommandName | undefined, args: string[], options: Record<string, OptionSpec>) {
  try {
    const { values, tokens, positionals } = parseArgs({
      args,
      options: parseArgsOptions(options),
      strict: true,
      allowPositionals: true,
      tokens: true,
    });
    return { values: values as Record<string, string | boolean | string[]>, tokens, positionals };
  } catch (err) {
    throw new UsageError(describeRefusal(err, args, options), command);
  }
}

/** The same line read without refusing anything, to say precisely what strict parsing refused. */
function looseTokens(args: string[], options: Record<string, OptionSpec>): Token[] {
  return parseArgs({ args, options: parseArgsOptions(options), strict: false, allowPositionals: true, tokens: true })
    .tokens;
}

function describeRefusal(err: unknown, args: string[], options: Record<string, OptionSpec>): string {
  for (const t of looseTokens(args, options)) {
    if (t.kind !== 'option') continue;
    const option = Object.hasOwn(options, t.name) ? options[t.name] : undefined;
    if (!option) {
      const near = t.rawName.startsWith('--') ? didYouMean(t.name, Object.keys(options), '--') : '';
      return `unknown option ${t.rawName}${near}`;
    }
    if (option.type === 'boolean' && t.value !== undefined) return `--${t.name} takes no value`;
    if (option.type === 'string' && t.value === undefined) return `--${t.name} needs a value (${option.value})`;
    if (option.type === 'string' && !t.inlineValue && t.value?.startsWith('-')) {
      return `--${t.name} needs a value; for one that starts with "-", write --${t.name}=${t.value}`;
    }
  }
  // Not reached for the refusals parseArgs makes today; its own message is the best there is for a new one.
  return messageOf(err).replace(/\s*\n\s*/g, ' ');
}

function didYouMean(name: string, known: readonly string[], prefix = ''): string {
  const near = closestName(name, known);
  return near ? ` (did you mean ${prefix}${near}?)` : '';
}
