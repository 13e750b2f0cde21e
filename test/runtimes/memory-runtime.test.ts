import { Readable } from 'node:stream';
import { MemoryRuntime, RuntimeFailedError, RuntimeNotFoundError } from '../../src/runtimes';

async function collect(stream: Readable): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

describe('MemoryRuntime', () => {
  let runtime: MemoryRuntime;
  beforeEach(() => {
    runtime = new MemoryRuntime();
  });

  test('start holds the initial state; write replaces it; capture streams a point-in-time copy', async () => {
    const info = await runtime.start({
      sessionId: 's',
      instanceId: 'a',
      spec: { kind: 'memory', initialState: 'héllo' },
    });
    expect(info).toMatchObject({
      instanceId: 'a',
      sessionId: 's',
      kind: 'memory',
      version: '1',
      location: 'memory',
      running: true,
    });
    expect(runtime.read('a').toString('utf8')).toBe('héllo');

    runtime.write('a', 'one');
    const capture = await runtime.capture('a');
    runtime.write('a', Buffer.from([0, 1, 2]));
    expect((await collect(capture)).toString()).toBe('one');
    expect(runtime.read('a')).toEqual(Buffer.from([0, 1, 2]));
    expect(await collect(await runtime.capture('a'))).toEqual(Buffer.from([0, 1, 2]));
  });

  test('an instance without initial state starts empty and captures to an empty stream', async () => {
    await runtime.start({ sessionId: 's', instanceId: 'a', spec: { kind: 'memory' } });
    expect(await collect(await runtime.capture('a'))).toEqual(Buffer.alloc(0));
  });

  test('restore rebuilds the state in a new instance', async () => {
    await runtime.start({ sessionId: 's', instanceId: 'a', spec: { kind: 'memory', initialState: 'state' } });
    const state = await runtime.capture('a');
    const info = await runtime.restore({ sessionId: 's', instanceId: 'b', spec: { kind: 'memory' }, state });
    expect(info).toMatchObject({ instanceId: 'b', running: true });
    expect(runtime.read('b').toString()).toBe('state');
    expect(runtime.canRestore('1')).toBe(true);
    expect(runtime.canRestore('2')).toBe(false);
  });

  test('restore from a failing stream rejects with its error and keeps nothing', async () => {
    const error = new Error('digest mismatch');
    const state = new Readable({ read() {} });
    state.push('partial');
    setImmediate(() => state.destroy(error));
    await expect(runtime.restore({ sessionId: 's', instanceId: 'b', spec: { kind: 'memory' }, state })).rejects.toBe(
      error,
    );
    expect(runtime.describe('b')).toBeUndefined();
  });

  test('stop ends the instance: waitForExit resolves, writes are refused, the state can still be captured', async () => {
    await runtime.start({ sessionId: 's', instanceId: 'a', spec: { kind: 'memory', initialState: 'x' } });
    const waiting = runtime.waitForExit('a');
    const exit = await runtime.stop('a');
    expect(exit).toEqual({ exitCode: 0, signal: null, requested: true });
    expect(await waiting).toEqual(exit);
    expect(await runtime.stop('a')).toEqual(exit);
    expect(runtime.describe('a')?.running).toBe(false);
    expect(() => runtime.write('a', 'y')).toThrow(RuntimeFailedError);
    expect((await collect(await runtime.capture('a'))).toString()).toBe('x');
  });

  test('waitForExit rejects with an AbortError when its signal aborts', async () => {
    await runtime.start({ sessionId: 's', instanceId: 'a', spec: { kind: 'memory' } });
    const controller = new AbortController();
    const waiting = runtime.waitForExit('a', controller.signal);
    controller.abort();
    await expect(waiting).rejects.toMatchObject({ name: 'AbortError' });
  });

  test('a second instance with the same id is refused; dispose forgets the instance', async () => {
    await runtime.start({ sessionId: 's', instanceId: 'a', spec: { kind: 'memory' } });
    await expect(runtime.start({ sessionId: 's', instanceId: 'a', spec: { kind: 'memory' } })).rejects.toThrow(
      RuntimeFailedError,
    );
    await runtime.dispose('a');
    expect(runtime.describe('a')).toBeUndefined();
    await expect(runtime.dispose('a')).resolves.toBeUndefined();
  });

  test('an unknown instance is RuntimeNotFoundError', async () => {
    await expect(runtime.capture('nope')).rejects.toThrow(RuntimeNotFoundError);
    await expect(runtime.stop('nope')).rejects.toThrow(RuntimeNotFoundError);
    await expect(runtime.waitForExit('nope')).rejects.toThrow(RuntimeNotFoundError);
    expect(() => runtime.read('nope')).toThrow(RuntimeNotFoundError);
    expect(() => runtime.write('nope', 'x')).toThrow(RuntimeNotFoundError);
    expect(runtime.describe('nope')).toBeUndefined();
  });
});
