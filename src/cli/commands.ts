import { PHASES } from '../domain/session-state';

/** One option of one command, as `node:util` parseArgs takes it plus what usage and validation need. */
export interface OptionSpec {
  type: 'string' | 'boolean';
  short?: string;
  multiple?: boolean;
  /** The value's placeholder in usage (`TEXT`, `PATH=TEXT`). */
  value?: string;
  help: string;
  /** The only values accepted: an enumeration of the domain, checked before anything is sent. */
  choices?: readonly string[];
  /** Every value is `NAME=VALUE`. */
  pairs?: boolean;
  /** Another option this one means nothing without. */
  requires?: string;
}

export interface CommandSpec {
  /** Positional arguments before `--`, as usage names them; each is required. */
  args: readonly string[];
  /** What goes after `--`, for the one command that takes it. */
  rest?: string;
  summary: string;
  /** Talks to the snapshot store directly rather than to Temporal (both for `verify`, chosen by a flag). */
  store?: boolean;
  options: Readonly<Record<string, OptionSpec>>;
  /** Boolean options that must be given, with the reason (a confirmation). */
  confirm?: { option: string; why: string };
  notes?: readonly string[];
}

const KEY = {
  type: 'string',
  value: 'KEY',
  help: 'idempotency key: the same control sent twice with one key has one effect',
} as const;

/** What fork and branch share: where the new sessions go and how many. */
const FORK_OPTIONS = {
  as: { type: 'string', value: 'SESSION-ID', help: 'the new session id (with --count, each is ID-N)' },
  count: { type: 'string', value: 'N', help: 'make N sessions at once' },
  paused: { type: 'boolean', help: 'leave them paused at their first checkpoint' },
  key: KEY,
} as const;

/** The policies of a session, as `start` sets them and `configure` replaces them (durations in ms). */
const POLICY_OPTIONS = {
  'checkpoint-every': { type: 'string', value: 'MS', help: 'automatic checkpoint after MS of running' },
  'only-if-active': { type: 'boolean', help: 'skip an automatic checkpoint when nothing happened' },
  'idle-pause-after': { type: 'string', value: 'MS', help: 'pause after MS without activity' },
  'stop-paused-after': { type: 'string', value: 'MS', help: 'stop after MS paused' },
  'no-checkpoint-before-stop': { type: 'boolean', help: 'stop without a final checkpoint by default' },
} as const;

/** Options every command takes. */
export const COMMON_OPTIONS = {
  tenant: {
    type: 'string',
    value: 'TENANT',
    help: 'work on the sessions (or the store) of this tenant instead of "default"',
  },
  json: { type: 'boolean', help: 'print the result, or the error, as one JSON document on stdout' },
  help: { type: 'boolean', short: 'h', help: 'show this help' },
} as const satisfies Record<string, OptionSpec>;

export const COMMANDS = {
  start: {
    args: ['<session-id>'],
    rest: '<command...>',
    summary: 'start a session running <command> in a working directory of its own',
    options: {
      memory: {
        type: 'boolean',
        help: 'run in the in-process memory runtime instead; the words after -- are its initial state',
      },
      conversation: {
        type: 'boolean',
        help: 'a conversation instead (messages, with append and regenerate); the words after -- its system message',
      },
      remote: {
        type: 'boolean',
        help: 'run <command> in a sandbox on a sandbox host (workers with DS_SANDBOX_HOSTS) instead of on the worker',
      },
      file: {
        type: 'string',
        multiple: true,
        pairs: true,
        value: 'PATH=TEXT',
        help: 'a file to write into the working directory before the first start (repeatable)',
      },
      env: {
        type: 'string',
        multiple: true,
        pairs: true,
        value: 'NAME=VALUE',
        help: 'an environment variable (repeatable)',
      },
      description: { type: 'string', value: 'TEXT', help: 'shown next to the session in the Temporal Web UI' },
      label: {
        type: 'string',
        multiple: true,
        value: 'LABEL',
        help: 'a label of the session, searchable as SessionLabels (repeatable)',
      },
      host: { type: 'string', value: 'WORKER', help: 'run only on this worker (its worker id or host task queue)' },
      'worker-label': {
        type: 'string',
        multiple: true,
        value: 'LABEL',
        help: 'run only on workers with this label (DS_WORKER_LABELS; repeatable)',
      },
      ...POLICY_OPTIONS,
    },
    notes: [
      'The command goes after --: durable-sessions start build-42 -- npm run dev',
      'Policies are off unless given; "configure" replaces them later.',
    ],
  },
  checkpoint: {
    args: ['<session-id>'],
    summary: "capture the running session's state as a new checkpoint",
    options: {
      label: { type: 'string', value: 'TEXT', help: 'a name for the checkpoint (kept by retention)' },
      key: KEY,
    },
  },
  pause: {
    args: ['<session-id>'],
    summary: 'checkpoint, then stop the runtime to free its compute',
    options: { reason: { type: 'string', value: 'TEXT', help: 'why, kept in the timeline' }, key: KEY },
  },
  resume: {
    args: ['<session-id>'],
    summary: 'restore the newest checkpoint that verifies into a fresh runtime',
    options: {
      checkpoint: { type: 'string', value: 'CHECKPOINT-ID', help: 'restore this checkpoint instead of the newest' },
      key: KEY,
    },
  },
  stop: {
    args: ['<session-id>'],
    summary: 'end the session, with a final checkpoint of a running session',
    options: {
      'no-checkpoint': { type: 'boolean', help: 'stop without a final checkpoint' },
      reason: { type: 'string', value: 'TEXT', help: 'why, kept in the timeline' },
      key: KEY,
    },
  },
  status: {
    args: ['<session-id>'],
    summary: "the session's phase, runtime, output file, head checkpoint and snapshot I/O in progress",
    options: {},
  },
  timeline: {
    args: ['<session-id>'],
    summary: 'what happened to the session, oldest first, with stable indices (older pages read by a worker)',
    options: {
      from: { type: 'string', value: 'INDEX', help: 'the first index to show' },
      limit: { type: 'string', value: 'N', help: 'at most N entries (default 100)' },
      branch: { type: 'string', value: 'N', help: 'only entries of branch N (0 is the first)' },
      all: { type: 'boolean', help: 'also show checkpoints replaced by regenerate' },
    },
  },
  rewind: {
    args: ['<session-id>'],
    summary: 'go back to a checkpoint (--to a timeline index or a checkpoint id) in place; a new branch starts there',
    options: {
      to: {
        type: 'string',
        value: 'INDEX|CHECKPOINT-ID',
        help: 'the checkpoint to go back to: its timeline index or id (required)',
      },
      reason: { type: 'string', value: 'TEXT', help: 'why, kept in the timeline' },
      'if-head': { type: 'string', value: 'CHECKPOINT-ID', help: 'refuse (Conflict) unless this is the head' },
      key: KEY,
    },
    notes: ['A running session is checkpointed first (trigger rewind-safety): rewinding to that restores it.'],
  },
  fork: {
    args: ['<session-id>'],
    summary: 'start new sessions from a checkpoint of this one (chunks shared, nothing copied)',
    options: {
      from: {
        type: 'string',
        value: 'INDEX|CHECKPOINT-ID',
        help: 'fork this checkpoint, by its timeline index or id (default: the current state)',
      },
      ...FORK_OPTIONS,
    },
  },
  branch: {
    args: ['<session-id>'],
    summary: 'fork the current state (a running session is checkpointed first)',
    options: FORK_OPTIONS,
  },
  configure: {
    args: ['<session-id>'],
    summary: "replace the live session's policies (durations in ms; a policy not given is off)",
    options: { ...POLICY_OPTIONS, key: KEY },
  },
  touch: { args: ['<session-id>'], summary: 'say the session is in use: its idle timer starts again', options: {} },
  append: {
    args: ['<session-id>'],
    summary: 'conversation runtime: append messages, with a checkpoint after them when asked (trigger turn)',
    options: {
      message: {
        type: 'string',
        multiple: true,
        value: 'ROLE=TEXT',
        help: 'a message, in order (repeatable; ROLE is system, user, assistant or tool)',
      },
      checkpoint: { type: 'boolean', help: 'checkpoint once the messages are stored' },
      label: { type: 'string', value: 'TEXT', help: 'a name for that checkpoint', requires: 'checkpoint' },
      key: KEY,
    },
    notes: ['durable-sessions append chat-7 --message user="What is 2+2?" --checkpoint'],
  },
  regenerate: {
    args: ['<session-id>'],
    summary: 'conversation runtime: fork from just before the last assistant turn, to answer it again',
    options: FORK_OPTIONS,
  },
  list: {
    args: [],
    summary: 'sessions on this task queue, newest first',
    options: {
      phase: { type: 'string', value: 'PHASE', choices: PHASES, help: 'only sessions in this phase' },
      host: { type: 'string', value: 'WORKER', help: 'only sessions on this worker (worker id or host task queue)' },
    },
  },
  verify: {
    args: ['<session-id>'],
    store: true,
    summary: "check every checkpoint of a session: manifest, chain link, every chunk's authentication tag",
    options: {
      'through-session': {
        type: 'boolean',
        help: 'read the checkpoints back on a worker instead (no keys needed here)',
      },
      checkpoint: {
        type: 'string',
        value: 'CHECKPOINT-ID',
        requires: 'through-session',
        help: 'only this checkpoint',
      },
    },
    notes: [
      'Exit code 1 when a checkpoint does not verify.',
      'With --through-session a worker reads them back, also once the session has ended: this machine then needs',
      'only Temporal, no store setting and no master key.',
    ],
  },
  gc: {
    args: [],
    store: true,
    summary: 'remove packs no checkpoint references (safe while checkpoints are written)',
    options: { 'dry-run': { type: 'boolean', help: 'say what would be removed, remove nothing' } },
  },
  rekey: {
    args: [],
    store: true,
    summary: 're-wrap every data key under the primary master key (chunks are not rewritten)',
    options: {},
  },
  shred: {
    args: ['<session-id>'],
    store: true,
    summary: 'destroy the data key of the session and its forks: their checkpoints become unreadable, for good',
    options: { yes: { type: 'boolean', help: 'confirm' } },
    confirm: { option: 'yes', why: 'destroys every checkpoint of the session' },
  },
  export: {
    args: ['<session-id>'],
    store: true,
    summary: 'write a portable archive of a checkpoint, sealed for a public key or a passphrase',
    options: {
      checkpoint: { type: 'string', value: 'CHECKPOINT-ID', help: 'the checkpoint (default: the newest)' },
      ancestors: { type: 'boolean', help: 'include its ancestors (parent, grandparent…), oldest first' },
      'to-public-key': { type: 'string', value: 'FILE', help: 'seal for this X25519 public key (PEM; see keygen)' },
      'passphrase-file': { type: 'string', value: 'FILE', help: 'seal with the passphrase in FILE (first line)' },
      out: {
        type: 'string',
        value: 'FILE',
        help: 'where to write the archive (required; written whole or not at all)',
      },
    },
    notes: [
      'Give one of --to-public-key and --passphrase-file. The archive holds no key of this deployment.',
      'A paused, stopped or failed session exports too: no worker of the session is needed.',
    ],
  },
  import: {
    args: ['<archive-file>'],
    store: true,
    summary: 'start a new session from an archive, after verifying all of it',
    options: {
      as: { type: 'string', value: 'SESSION-ID', help: 'the new session id (default: <exported>-imported-<random>)' },
      'private-key-file': { type: 'string', value: 'FILE', help: 'the X25519 private key the archive is sealed to' },
      'passphrase-file': { type: 'string', value: 'FILE', help: 'the passphrase it is sealed with (first line)' },
      paused: { type: 'boolean', help: 'leave the new session paused at its checkpoint' },
    },
    notes: [
      'A damaged, cut or wrongly keyed archive is refused (SnapshotTampered, SnapshotCorrupt, SnapshotIncompatible)',
      'and changes nothing: no session, nothing in the store.',
    ],
  },
  keygen: {
    args: [],
    summary: 'make an X25519 key pair to receive archives: FILE.pub to give out, FILE.key to keep',
    options: {
      out: { type: 'string', value: 'FILE', help: 'writes FILE.pub and FILE.key (mode 0600); never overwrites' },
    },
  },
} as const satisfies Record<string, CommandSpec>;

export type CommandName = keyof typeof COMMANDS;
export const COMMAND_NAMES = Object.keys(COMMANDS) as CommandName[];

export function isCommandName(name: string): name is CommandName {
  return Object.hasOwn(COMMANDS, name);
}

const BIN = 'durable-sessions';

/** `checkpoint <session-id> [options]`. */
export function synopsis(name: CommandName): string {
  const spec: CommandSpec = COMMANDS[name];
  const confirm = spec.confirm ? ` --${spec.confirm.option}` : '';
  const rest = spec.rest ? ` -- ${spec.rest}` : '';
  return [name, ...spec.args].join(' ') + confirm + ' [options]' + rest;
}

function optionRows(options: Readonly<Record<string, OptionSpec>>): string[] {
  const rows = Object.entries(options).map(([name, o]) => {
    const flag = `${o.short ? `-${o.short}, ` : ''}--${name}${o.value ? ` ${o.value}` : ''}`;
    const extra = [
      o.choices ? `one of ${o.choices.join(', ')}` : undefined,
      o.requires ? `with --${o.requires}` : undefined,
    ].filter(Boolean);
    return [flag, o.help + (extra.length ? ` (${extra.join('; ')})` : '')] as const;
  });
  const width = Math.max(...rows.map(([flag]) => flag.length)) + 2;
  return rows.map(([flag, help]) => `  ${flag.padEnd(width)}${help}`);
}

const FOOTER = [
  'exit codes: 0 done, 1 refused or failed (the error names its code), 2 usage error.',
  'Connects to TEMPORAL_ADDRESS, or else to the embedded server of "npm start" at DS_DEV_SERVER_IP:DS_DEV_SERVER_PORT',
  '(default 127.0.0.1:7233).',
];

/** `durable-sessions <command> --help`. */
export function commandUsage(name: CommandName): string {
  const spec: CommandSpec = COMMANDS[name];
  return [
    `usage: ${BIN} ${synopsis(name)}`,
    '',
    spec.summary,
    ...(spec.notes ?? []),
    ...(spec.store ? ['', STORE_NEEDS] : []),
    '',
    'options:',
    ...optionRows({ ...spec.options, ...COMMON_OPTIONS }),
    '',
    ...FOOTER,
  ].join('\n');
}

/** What a store command needs of the machine it runs on. */
const STORE_NEEDS =
  'Opens the snapshot store itself, as a worker does: run it on a worker host, where the store (DS_SNAPSHOT_DIR,\n' +
  'or DS_SNAPSHOT_STORE=s3://... with its AWS credentials) and the master keys (DS_MASTER_KEYS or\n' +
  'DS_MASTER_KEY_DIR) are configured.';

/** `durable-sessions --help`. */
export function topUsage(): string {
  const rows = (store: boolean) => {
    const names = COMMAND_NAMES.filter(
      (n) => ((COMMANDS[n] as CommandSpec).store ?? false) === store || n === 'verify',
    );
    const width = Math.max(...COMMAND_NAMES.map((n) => synopsis(n).length)) + 2;
    return names.map((n) => {
      const line = `  ${synopsis(n).padEnd(width)}`;
      if (n !== 'verify' || store) return line + COMMANDS[n].summary;
      return line + 'with --through-session: the same, read back on a worker (no keys needed here)';
    });
  };
  return [
    `usage: ${BIN} <command> [options]`,
    '',
    'sessions (through Temporal):',
    ...rows(false),
    '',
    'snapshot store (opens DS_SNAPSHOT_DIR or DS_SNAPSHOT_STORE with the master keys, as a worker would):',
    ...rows(true),
    '',
    `Every command takes --json and -h, --help; "${BIN} <command> --help" lists its options.`,
    ...FOOTER,
  ].join('\n');
}
