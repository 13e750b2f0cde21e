import * as vm from 'node:vm';
import * as activities from '../../src/activities';
import * as cli from '../../src/cli/errors';
import * as client from '../../src/client';
import * as domain from '../../src/domain';
import * as runtimes from '../../src/runtimes';
import * as snapshots from '../../src/snapshots';
import type * as ClientErrors from '../../src/client/errors';
import { InvalidInputError, SessionError, SessionNotFoundError } from '../../src/client/errors';
import { CliError, UsageError } from '../../src/cli/errors';
import { DurableSessionsError, isErrnoError, isError, messageOf, toError } from '../../src/errors';

describe('error classes', () => {
  it('hold instanceof for their own chain only', () => {
    const err = new SessionNotFoundError('no such session', 's1');
    expect(err).toBeInstanceOf(SessionNotFoundError);
    expect(err).toBeInstanceOf(SessionError);
    expect(err).toBeInstanceOf(DurableSessionsError);
    expect(err).toBeInstanceOf(Error);
    expect(err).not.toBeInstanceOf(InvalidInputError);
    expect(err).not.toBeInstanceOf(CliError);
    expect(new UsageError('bad flag')).not.toBeInstanceOf(SessionError);
    expect({ message: 'x', name: 'SessionError' }).not.toBeInstanceOf(SessionError);
    expect(null).not.toBeInstanceOf(SessionError);
  });

  it('name themselves, carry their code and ids, keep the cause and say whether a retry may help', () => {
    const cause = new Error('root');
    const err = new SessionNotFoundError('no such session', 's1', { cause });
    expect({ name: err.name, code: err.code, sessionId: err.sessionId, retryable: err.retryable }).toEqual({
      name: 'SessionNotFoundError',
      code: 'SessionNotFound',
      sessionId: 's1',
      retryable: false,
    });
    expect(err.cause).toBe(cause);
  });

  it('hold instanceof across two loaded copies of the module', () => {
    let copy: typeof ClientErrors | undefined;
    jest.isolateModules(() => {
      // eslint-disable-next-line @typescript-eslint/no-require-imports
      copy = require('../../src/client/errors') as typeof ClientErrors;
    });
    expect(copy!.SessionNotFoundError).not.toBe(SessionNotFoundError);
    const other = new copy!.SessionNotFoundError('no such session', 's1');
    expect(other).toBeInstanceOf(SessionNotFoundError);
    expect(other).toBeInstanceOf(SessionError);
    expect(other).not.toBeInstanceOf(InvalidInputError);
  });
});

/** Whether `value` is a class whose chain reaches DurableSessionsError (tags live on instances, not prototypes). */
function extendsBase(value: unknown): value is { name: string } {
  for (let c: unknown = Object.getPrototypeOf(value); typeof c === 'function'; c = Object.getPrototypeOf(c)) {
    if (c === DurableSessionsError) return true;
  }
  return false;
}

describe('error class names', () => {
  it('are unique across the layers: instanceof goes by name', () => {
    const byName = new Map<string, Set<unknown>>();
    for (const layer of [activities, cli, client, domain, runtimes, snapshots]) {
      for (const value of Object.values(layer)) {
        if (!extendsBase(value)) continue;
        const name = value.name;
        byName.set(name, (byName.get(name) ?? new Set()).add(value));
      }
    }
    expect(byName.size).toBeGreaterThan(20);
    expect([...byName].filter(([, classes]) => classes.size > 1).map(([name]) => name)).toEqual([]);
  });
});

describe('cross-realm helpers', () => {
  const foreign = vm.runInNewContext('new TypeError("from another realm")') as unknown;
  const errno = vm.runInNewContext('Object.assign(new Error("gone"), { code: "ENOENT" })') as unknown;

  it('recognise an Error made in another realm', () => {
    expect(foreign instanceof Error).toBe(false);
    expect(isError(foreign)).toBe(true);
    expect(toError(foreign)).toBe(foreign);
    expect(messageOf(foreign)).toBe('from another realm');
  });

  it('recognise errno errors by code, from any realm', () => {
    expect(isErrnoError(errno, 'ENOENT')).toBe(true);
    expect(isErrnoError(errno)).toBe(true);
    expect(isErrnoError(errno, 'EACCES')).toBe(false);
    expect(isErrnoError({ code: 'ENOENT' }, 'ENOENT')).toBe(false);
    expect(isErrnoError(undefined)).toBe(false);
  });

  it('turn anything thrown into an Error with a message', () => {
    expect(toError('plain string').message).toBe('plain string');
    expect(messageOf(42)).toBe('42');
  });
});
