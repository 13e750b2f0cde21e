import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';
import type { Config } from '../config';
import { isErrnoError } from '../errors';
import {
  generateArchiveKeyPair,
  KeyringConfigError,
  MissingMasterKeyError,
  openSnapshotStore,
  readArchiveHeader,
  type SnapshotStore,
} from '../snapshots';
import { CLI_ERROR_CODES, CliError, UsageError } from './errors';
import type { Invocation } from './parse';
import type { Output } from './render';
import { withSessions } from './session-commands';

/** The commands that move sessions between deployments as archives, and make the keys that seal them. */
export type ArchiveInvocation = Extract<Invocation, { command: 'export' | 'import' | 'keygen' }>;

export async function runArchiveCommand(invocation: ArchiveInvocation, config: Config): Promise<Output> {
  switch (invocation.command) {
    case 'keygen':
      return keygen(invocation.values.out);
    case 'export': {
      const { values, sessionId } = invocation;
      const out = required(values.out, 'out', 'export');
      const seal = oneOf('export', {
        'to-public-key': values['to-public-key'],
        'passphrase-file': values['passphrase-file'],
      });
      const input = {
        ...(values.checkpoint !== undefined ? { checkpointId: values.checkpoint } : {}),
        ...(values.ancestors ? { ancestors: true } : {}),
        ...(seal.name === 'to-public-key'
          ? { recipientPublicKey: readText(seal.file) }
          : { passphrase: readPassphrase(seal.file) }),
      };
      const store = await openStore(config);
      const bytes = await withSessions(config, { tenant: values.tenant, store }, async (sessions) =>
        writeWhole(out, await sessions.export(sessionId, input)),
      );
      const header = await readArchiveHeader(fs.createReadStream(out));
      const checkpoints = header.checkpoints.map((c) => c.checkpointId);
      const json = { sessionId, out, bytes, checkpoints, seal: header.seal.kind };
      return { json, text: [`exported ${checkpoints.join(', ')} of ${sessionId} to ${out} (${bytes} bytes)`] };
    }
    case 'import': {
      const { values } = invocation;
      const file = invocation.sessionId;
      const key = oneOf('import', {
        'private-key-file': values['private-key-file'],
        'passphrase-file': values['passphrase-file'],
      });
      const input = {
        ...(values.as !== undefined ? { sessionId: values.as } : {}),
        ...(values.paused ? { paused: true } : {}),
        ...(key.name === 'private-key-file'
          ? { privateKey: readText(key.file) }
          : { passphrase: readPassphrase(key.file) }),
      };
      if (!fs.existsSync(file)) throw new CliError(CLI_ERROR_CODES.Failed, `no archive at ${file}`);
      const store = await openStore(config);
      const result = await withSessions(config, { tenant: values.tenant, store }, async (sessions) => {
        const { sessionId, importedFrom, checkpoints } = await sessions.import(file, input);
        return { sessionId, importedFrom, checkpoints };
      });
      const { sessionId, importedFrom } = result;
      const how = values.paused ? 'paused at' : 'resumed from';
      return {
        json: result,
        text: [`imported session ${sessionId}, ${how} ${importedFrom.checkpointId} of ${importedFrom.sessionId}`],
      };
    }
  }
}

function keygen(out: string | undefined): Output {
  const prefix = required(out, 'out', 'keygen');
  const { publicKey, privateKey } = generateArchiveKeyPair();
  const files = { publicKey: `${prefix}.pub`, privateKey: `${prefix}.key` };
  try {
    // 'wx': an existing key is never overwritten (it may be the only way to open archives sealed to it).
    fs.writeFileSync(files.privateKey, privateKey, { flag: 'wx', mode: 0o600 });
    fs.writeFileSync(files.publicKey, publicKey, { flag: 'wx', mode: 0o644 });
  } catch (err) {
    if (isErrnoError(err, 'EEXIST'))
      throw new CliError(CLI_ERROR_CODES.Failed, `${(err as { path?: string }).path} exists already`);
    throw err;
  }
  return { json: files, text: [`wrote ${files.publicKey} (give it out) and ${files.privateKey} (keep it)`] };
}

/** Writes the stream to a temp file beside `out` and renames it: `out` is the whole archive, or untouched. */
async function writeWhole(out: string, stream: NodeJS.ReadableStream): Promise<number> {
  const temp = path.join(path.dirname(out), `.${path.basename(out)}.${randomUUID().slice(0, 8)}.tmp`);
  try {
    await pipeline(stream, fs.createWriteStream(temp, { flags: 'wx', mode: 0o600 }));
    const { size } = fs.statSync(temp);
    fs.renameSync(temp, out);
    return size;
  } catch (err) {
    fs.rmSync(temp, { force: true });
    throw err;
  }
}

async function openStore(config: Config): Promise<SnapshotStore> {
  return openSnapshotStore(config).catch((err: unknown) => {
    if (err instanceof KeyringConfigError || err instanceof MissingMasterKeyError) {
      throw new CliError(CLI_ERROR_CODES.InvalidConfig, err.message, { cause: err });
    }
    throw err;
  });
}

function required(value: string | undefined, name: string, command: 'export' | 'keygen'): string {
  if (value === undefined) throw new UsageError(`${command} needs --${name}`, command);
  return value;
}

function oneOf<N extends string>(
  command: 'export' | 'import',
  options: Record<N, string | undefined>,
): { name: N; file: string } {
  const given = (Object.entries(options) as [N, string | undefined][]).filter(([, v]) => v !== undefined);
  if (given.length !== 1) {
    const names = Object.keys(options).map((n) => `--${n}`);
    throw new UsageError(`${command} needs one of ${names.join(' and ')}`, command);
  }
  return { name: given[0]![0], file: given[0]![1]! };
}

function readText(file: string): string {
  try {
    return fs.readFileSync(file, 'utf8');
  } catch (err) {
    throw new CliError(CLI_ERROR_CODES.Failed, `cannot read ${file}: ${(err as Error).message}`, { cause: err });
  }
}

/** A passphrase file's first line (an editor's final newline is not part of it). */
function readPassphrase(file: string): string {
  return readText(file).split(/\r?\n/)[0]!;
}
