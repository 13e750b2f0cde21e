import { Readable } from 'node:stream';
import type { RuntimeSpec } from '../../src/domain/schemas';
import { RuntimeBusyError, RuntimeFailedError, RuntimeNotFoundError, type SessionRuntime } from '../../src/runtimes';
import { sourceBytes } from '../../src/snapshots';
import { readAll } from '../helpers/checkpoints';

/** What a runtime can do beyond what every runtime must; a case that needs one is skipped, by name, without it. */
export interface RuntimeCapabilities<S extends RuntimeSpec> {
  /** `captureState`: captures that name what did not change since the last stored checkpoint. */
  captureState: boolean;
  /** A spec whose instance ends by itself, soon, with exit code 3; absent where an instance only ends when stopped. */
  endsBySelf?: () => S;
}

export interface SessionRuntimeContractOptions<S extends RuntimeSpec, R extends SessionRuntime<S>> {
  name: string;
  /** A fresh runtime for each case. */
  newRuntime(): R;
  /** Frees what a case's runtime holds (its instances' processes, say). */
  release?(runtime: R): Promise<void>;
  /** A spec whose instance holds some state from the start and runs until it is stopped. */
  runningSpec(): S;
  capabilities: RuntimeCapabilities<S>;
}

const SESSION = 'contract-session';

/** What each group of cases works with: the case's fresh runtime, and the calls most cases make. */
class ContractCase<S extends RuntimeSpec, R extends SessionRuntime<S>> {
  runtime!: R;
  private nextId = 0;

  constructor(readonly options: SessionRuntimeContractOptions<S, R>) {}

  newId(): string {
    return `contract-${++this.nextId}`;
  }

  start(instanceId = this.newId(), sessionId = SESSION) {
    return this.runtime.start({ sessionId, instanceId, spec: this.options.runningSpec() });
  }

  restore(state: Readable, checkpointId?: string, instanceId = this.newId()) {
    return this.runtime.restore({
      sessionId: SESSION,
      instanceId,
      spec: this.options.runningSpec(),
      state,
      ...(checkpointId === undefined ? {} : { checkpointId }),
    });
  }

  async captured(instanceId: string): Promise<Buffer> {
    return readAll(await this.runtime.capture(instanceId));
  }

  /** `test`, or `test.skip` with the missing capability in its name. */
  given(capability: keyof RuntimeCapabilities<S>) {
    const run = this.options.capabilities[capability] ? test : test.skip;
    return (name: string, fn: () => Promise<void>) => run(`${name} [needs ${capability}]`, fn);
  }
}

/**
 * The contract every {@link SessionRuntime} keeps, as a user of the interface sees it. Each runtime's test file
 * calls this once; what only that runtime does is tested beside the call.
 */
export function runSessionRuntimeContract<S extends RuntimeSpec, R extends SessionRuntime<S>>(
  options: SessionRuntimeContractOptions<S, R>,
): void {
  const c = new ContractCase(options);
  describe(`SessionRuntime contract: ${options.name}`, () => {
    beforeEach(() => {
      c.runtime = options.newRuntime();
    });

    afterEach(async () => {
      await options.release?.(c.runtime);
    });

    describe('start and restore', () => startAndRestoreCases(c));
    describe('wait, stop and dispose', () => waitStopAndDisposeCases(c));
    describe('captureState', () => captureStateCases(c));
  });
}

function startAndRestoreCases<S extends RuntimeSpec, R extends SessionRuntime<S>>(c: ContractCase<S, R>): void {
  test('start reports a running instance of this kind and version, and describe reports the same', async () => {
    const instanceId = c.newId();
    const info = await c.start(instanceId);
    expect(info).toMatchObject({
      instanceId,
      sessionId: SESSION,
      kind: c.runtime.kind,
      version: c.runtime.version,
      running: true,
    });
    expect(await c.runtime.describe(instanceId)).toEqual(info);
  });

  test('a capture restores into a new instance whose capture is the same bytes', async () => {
    const first = await c.start();
    const state = await c.captured(first.instanceId);
    const restored = await c.restore(Readable.from([state]));
    expect(restored).toMatchObject({ running: true });
    expect(restored.instanceId).not.toBe(first.instanceId);
    expect(await c.captured(restored.instanceId)).toEqual(state);
    expect(c.runtime.canRestore(c.runtime.version)).toBe(true);
    expect(c.runtime.canRestore(`${c.runtime.version}-unknown`)).toBe(false);
  });

  test('restore from a state stream that fails rejects with its error and keeps no instance', async () => {
    const bytes = await c.captured((await c.start()).instanceId);
    const error = new Error('digest mismatch');
    // Half the bytes, then the failure, once the runtime reads on: the stream fails while it is being read.
    let sent = false;
    const state = new Readable({
      read() {
        if (sent) return this.destroy(error);
        sent = true;
        this.push(bytes.subarray(0, Math.floor(bytes.length / 2)));
      },
    });
    const instanceId = c.newId();
    await expect(
      c.runtime.restore({ sessionId: SESSION, instanceId, spec: c.options.runningSpec(), state }),
    ).rejects.toBe(error);
    expect(await c.runtime.describe(instanceId)).toBeUndefined();
  });

  describe('a retried start or restore with the same instance id adopts or discards, never duplicates', () => {
    test('a start again of a live id answers with that instance, started once', async () => {
      const first = await c.start();
      const before = await c.captured(first.instanceId);
      expect(await c.start(first.instanceId)).toEqual(first);
      expect(await c.runtime.describe(first.instanceId)).toEqual(first);
      expect(await c.captured(first.instanceId)).toEqual(before);
    });

    test('a restore again of a live id answers with that instance, its state untouched, the new stream released', async () => {
      const state = await c.captured((await c.start()).instanceId);
      const instanceId = c.newId();
      const first = await c.restore(Readable.from([state]), undefined, instanceId);
      const other = Readable.from([Buffer.from('not this state')]);
      expect(await c.restore(other, undefined, instanceId)).toEqual(first);
      expect(other.destroyed).toBe(true);
      expect(await c.captured(instanceId)).toEqual(state);
    });

    test('two starts of one id at once make one instance; a loser is busy (retryable), never a second copy', async () => {
      const instanceId = c.newId();
      const outcomes = await Promise.allSettled([c.start(instanceId), c.start(instanceId)]);
      const started = outcomes.flatMap((o) => (o.status === 'fulfilled' ? [o.value] : []));
      expect(started.length).toBeGreaterThanOrEqual(1);
      for (const o of outcomes) if (o.status === 'rejected') expect(o.reason).toBeInstanceOf(RuntimeBusyError);
      for (const info of started) expect(info).toEqual(started[0]);
      // A retry of the loser, once the first has settled, adopts it.
      expect(await c.start(instanceId)).toEqual(started[0]);
    });

    test('two restores of one id at once make one instance; a loser is busy (retryable), its stream released', async () => {
      const state = await c.captured((await c.start()).instanceId);
      const instanceId = c.newId();
      const streams = [Readable.from([state]), Readable.from([state])];
      const outcomes = await Promise.allSettled(streams.map((s) => c.restore(s, undefined, instanceId)));
      const restored = outcomes.flatMap((o) => (o.status === 'fulfilled' ? [o.value] : []));
      expect(restored.length).toBeGreaterThanOrEqual(1);
      outcomes.forEach((o, i) => {
        if (o.status === 'rejected') {
          expect(o.reason).toBeInstanceOf(RuntimeBusyError);
          expect(streams[i]!.destroyed).toBe(true);
        }
      });
      for (const info of restored) expect(info).toEqual(restored[0]);
      expect(await c.captured(instanceId)).toEqual(state);
    });

    test("a start with another session's live id is refused, and that instance runs on untouched", async () => {
      const first = await c.start();
      await expect(c.start(first.instanceId, 'another-session')).rejects.toThrow(RuntimeFailedError);
      expect(await c.runtime.describe(first.instanceId)).toEqual(first);
    });

    test('a start of an id that was disposed makes a fresh instance', async () => {
      const first = await c.start();
      await c.runtime.dispose(first.instanceId);
      const again = await c.start(first.instanceId);
      expect(again).toMatchObject({ instanceId: first.instanceId, running: true });
      expect(await c.runtime.describe(first.instanceId)).toEqual(again);
    });
  });
}

function waitStopAndDisposeCases<S extends RuntimeSpec, R extends SessionRuntime<S>>(c: ContractCase<S, R>): void {
  test('waitForExit rejects with an AbortError when its signal aborts; the instance runs on', async () => {
    const info = await c.start();
    const controller = new AbortController();
    const waiting = c.runtime.waitForExit(info.instanceId, controller.signal);
    controller.abort();
    await expect(waiting).rejects.toMatchObject({ name: 'AbortError' });
    expect((await c.runtime.describe(info.instanceId))?.running).toBe(true);
  });

  test('an unknown instance is RuntimeNotFoundError; describe and dispose accept it', async () => {
    await expect(c.runtime.capture('nope')).rejects.toThrow(RuntimeNotFoundError);
    await expect(c.runtime.stop('nope')).rejects.toThrow(RuntimeNotFoundError);
    await expect(c.runtime.waitForExit('nope')).rejects.toThrow(RuntimeNotFoundError);
    if (c.runtime.captureState) await expect(c.runtime.captureState('nope')).rejects.toThrow(RuntimeNotFoundError);
    expect(await c.runtime.describe('nope')).toBeUndefined();
    await expect(c.runtime.dispose('nope')).resolves.toBeUndefined();
  });

  test('stop ends the instance as requested, once; describe and capture still see it', async () => {
    const info = await c.start();
    const state = await c.captured(info.instanceId);
    const waiting = c.runtime.waitForExit(info.instanceId);
    const exit = await c.runtime.stop(info.instanceId);
    expect(exit).toMatchObject({ requested: true });
    expect(await waiting).toEqual(exit);
    expect(await c.runtime.stop(info.instanceId)).toEqual(exit);
    expect(await c.runtime.waitForExit(info.instanceId)).toEqual(exit);
    expect(await c.runtime.describe(info.instanceId)).toMatchObject({ instanceId: info.instanceId, running: false });
    expect(await c.captured(info.instanceId)).toEqual(state);
  });

  test('dispose forgets a running instance; its id can be started again', async () => {
    const info = await c.start();
    await c.runtime.dispose(info.instanceId);
    expect(await c.runtime.describe(info.instanceId)).toBeUndefined();
    await expect(c.runtime.dispose(info.instanceId)).resolves.toBeUndefined();
    expect(await c.start(info.instanceId)).toMatchObject({ instanceId: info.instanceId, running: true });
  });

  c.given('endsBySelf')(
    'an instance that ends by itself is reported with its exit code, not as requested',
    async () => {
      const info = await c.runtime.start({
        sessionId: SESSION,
        instanceId: c.newId(),
        spec: c.options.capabilities.endsBySelf!(),
      });
      const exit = await c.runtime.waitForExit(info.instanceId);
      expect(exit).toEqual({ exitCode: 3, signal: null, requested: false });
      expect((await c.runtime.describe(info.instanceId))?.running).toBe(false);
      expect(await c.runtime.stop(info.instanceId)).toEqual(exit);
      // Its state is still there to capture.
      await expect(c.captured(info.instanceId)).resolves.toBeInstanceOf(Buffer);
    },
  );
}

function captureStateCases<S extends RuntimeSpec, R extends SessionRuntime<S>>(c: ContractCase<S, R>): void {
  const needsCaptureState = c.given('captureState');
  const captureState = (instanceId: string) => c.runtime.captureState!(instanceId);

  needsCaptureState('without a stored capture it has no base and gives the bytes of capture', async () => {
    const info = await c.start();
    const state = await captureState(info.instanceId);
    expect(state.base).toBeNull();
    expect(await readAll(sourceBytes(state))).toEqual(await c.captured(info.instanceId));
  });

  needsCaptureState('a stored capture is the next base; one closed unstored leaves the base as it was', async () => {
    const info = await c.start();
    const first = await captureState(info.instanceId);
    await readAll(sourceBytes(first));
    first.stored('cp-1');
    const abandoned = await captureState(info.instanceId);
    expect(abandoned.base).toBe('cp-1');
    abandoned.close();
    const next = await captureState(info.instanceId);
    expect(next.base).toBe('cp-1');
    next.close();
  });

  needsCaptureState('restore with a checkpoint id makes it the base; without one there is none', async () => {
    const state = await c.captured((await c.start()).instanceId);
    const based = await c.restore(Readable.from([state]), 'cp-7');
    const unbased = await c.restore(Readable.from([state]));
    const fromBased = await captureState(based.instanceId);
    const fromUnbased = await captureState(unbased.instanceId);
    expect(fromBased.base).toBe('cp-7');
    expect(fromUnbased.base).toBeNull();
    fromBased.close();
    fromUnbased.close();
  });
}
