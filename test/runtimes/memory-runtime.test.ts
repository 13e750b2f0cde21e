import * as fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { MemoryRuntime, RuntimeFailedError, RuntimeNotFoundError, type CapturedState } from '../../src/runtimes';
import { ChunkedSnapshotStore, isUnchangedRange, sourceBytes, type UnchangedRange } from '../../src/snapshots';
import { seeded } from '../helpers/bytes';
import { cp, readAll } from '../helpers/checkpoints';

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
    // No process, so no output to point at.
    expect(info.output).toBeUndefined();
    expect(runtime.read('a').toString('utf8')).toBe('héllo');

    runtime.write('a', 'one');
    const capture = await runtime.capture('a');
    runtime.write('a', Buffer.from([0, 1, 2]));
    expect((await readAll(capture)).toString()).toBe('one');
    expect(runtime.read('a')).toEqual(Buffer.from([0, 1, 2]));
    expect(await readAll(await runtime.capture('a'))).toEqual(Buffer.from([0, 1, 2]));
  });

  test('an instance without initial state starts empty and captures to an empty stream', async () => {
    await runtime.start({ sessionId: 's', instanceId: 'a', spec: { kind: 'memory' } });
    expect(await readAll(await runtime.capture('a'))).toEqual(Buffer.alloc(0));
  });

  test('stop ends the instance with exit code 0; writes are refused, the state can still be captured', async () => {
    await runtime.start({ sessionId: 's', instanceId: 'a', spec: { kind: 'memory', initialState: 'x' } });
    expect(await runtime.stop('a')).toEqual({ exitCode: 0, signal: null, requested: true });
    expect(() => runtime.write('a', 'y')).toThrow(RuntimeFailedError);
    expect((await readAll(await runtime.capture('a'))).toString()).toBe('x');
  });

  test('read and write of an unknown instance are RuntimeNotFoundError', async () => {
    expect(() => runtime.read('nope')).toThrow(RuntimeNotFoundError);
    expect(() => runtime.write('nope', 'x')).toThrow(RuntimeNotFoundError);
  });

  describe('captureState: what changed since the last stored checkpoint', () => {
    /** The pieces of a capture: bytes as they are, ranges as [baseOffset, length]. */
    async function pieces(capture: CapturedState): Promise<Array<Buffer | [number, number]>> {
      const out: Array<Buffer | [number, number]> = [];
      for await (const p of capture.pieces) out.push(isUnchangedRange(p) ? [p.baseOffset, p.length] : Buffer.from(p));
      return out;
    }

    test('the first capture is all bytes; after it is stored, only writes since are bytes', async () => {
      await runtime.start({ sessionId: 's', instanceId: 'a', spec: { kind: 'memory', initialState: 'abcdefghij' } });
      const first = await runtime.captureState('a');
      expect(first.base).toBeNull();
      expect(await pieces(first)).toEqual([Buffer.from('abcdefghij')]);
      first.stored('cp-1');

      runtime.writeAt('a', 2, 'XY');
      runtime.append('a', '++');
      const second = await runtime.captureState('a');
      expect(second.base).toBe('cp-1');
      expect(await pieces(second)).toEqual([[0, 2], Buffer.from('XY'), [4, 6], Buffer.from('++')]);
      expect(runtime.read('a').toString()).toBe('abXYefghij++');
    });

    test('a capture that is never stored leaves the base where it was', async () => {
      await runtime.start({ sessionId: 's', instanceId: 'a', spec: { kind: 'memory', initialState: 'abcdef' } });
      (await runtime.captureState('a')).stored('cp-1');
      runtime.writeAt('a', 0, 'Z');
      const abandoned = await runtime.captureState('a');
      abandoned.close();
      const next = await runtime.captureState('a');
      expect(next.base).toBe('cp-1');
      expect(await pieces(next)).toEqual([Buffer.from('Z'), [1, 5]]);
    });

    test('writes while a capture is read do not reach it, and count as changes after it', async () => {
      await runtime.start({ sessionId: 's', instanceId: 'a', spec: { kind: 'memory', initialState: 'abcdef' } });
      const first = await runtime.captureState('a');
      runtime.writeAt('a', 1, 'QQ');
      const bytes = Buffer.concat((await pieces(first)) as Buffer[]);
      expect(bytes.toString()).toBe('abcdef');
      first.stored('cp-1');
      expect(await pieces(await runtime.captureState('a'))).toEqual([[0, 1], Buffer.from('QQ'), [3, 3]]);
    });

    test.each([
      ['in order', ['a', 'b']],
      ['out of order', ['b', 'a']],
    ] as const)('two overlapping captures stored %s leave the base at the later one', async (_, storeOrder) => {
      await runtime.start({ sessionId: 's', instanceId: 'a', spec: { kind: 'memory', initialState: 'abcdef' } });
      const captures = { a: await runtime.captureState('a'), b: undefined as CapturedState | undefined };
      runtime.writeAt('a', 0, 'X');
      captures.b = await runtime.captureState('a');
      runtime.writeAt('a', 2, 'Y');
      for (const c of [captures.a, captures.b]) for await (const piece of c.pieces) void piece;
      for (const name of storeOrder) captures[name]!.stored(name === 'a' ? 'cp-1' : 'cp-2');
      const next = await runtime.captureState('a');
      expect(next.base).toBe('cp-2');
      // Only the write after capture b is a change; X (before b) is part of cp-2.
      expect(await pieces(next)).toEqual([[0, 2], Buffer.from('Y'), [3, 3]]);
    });

    test('a shrinking write or a replaced state is all change; a gap written past the end is zeros', async () => {
      await runtime.start({ sessionId: 's', instanceId: 'a', spec: { kind: 'memory', initialState: 'abcdef' } });
      (await runtime.captureState('a')).stored('cp-1');
      runtime.write('a', 'xyz');
      expect(await pieces(await runtime.captureState('a'))).toEqual([Buffer.from('xyz')]);
      runtime.writeAt('a', 5, 'k');
      expect(runtime.read('a')).toEqual(Buffer.from('xyz\0\0k'));
      expect(() => runtime.writeAt('a', -1, 'k')).toThrow(RangeError);
    });

    test('a restored instance captures relative to the checkpoint it was restored from', async () => {
      const state = Readable.from([Buffer.from('0123456789')]);
      await runtime.restore({ sessionId: 's', instanceId: 'b', spec: { kind: 'memory' }, state, checkpointId: 'cp-7' });
      runtime.append('b', 'A');
      const capture = await runtime.captureState('b');
      expect(capture.base).toBe('cp-7');
      const got = await pieces(capture);
      expect(got).toEqual([[0, 10], Buffer.from('A')]);
    });

    test('through the snapshot store: a turn appended to 8 MiB of state reads and stores about the turn', async () => {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ds-memory-'));
      try {
        const store = new ChunkedSnapshotStore({ rootDir: dir, keyring: null });
        await runtime.start({ sessionId: 's1', instanceId: 'a', spec: { kind: 'memory' } });
        runtime.write('a', seeded(1, 8 * 1024 * 1024));
        const first = await runtime.captureState('a');
        await store.write(cp(1), first);
        first.stored('cp-1');

        runtime.append('a', seeded(2, 3000));
        const second = await runtime.captureState('a');
        // Count the bytes the store reads through unchanged ranges.
        let read = 0;
        const counted: CapturedState = {
          ...second,
          pieces: (async function* () {
            for await (const p of second.pieces) {
              if (!isUnchangedRange(p)) yield p;
              else {
                const range: UnchangedRange = {
                  baseOffset: p.baseOffset,
                  length: p.length,
                  read: async function* (start, end) {
                    read += end - start;
                    yield* p.read(start, end);
                  },
                };
                yield range;
              }
            }
          })(),
        };
        await store.write(cp(2, 'cp-1'), counted);
        expect((await readAll((await store.open('s1', 'cp-2')).stream)).equals(runtime.read('a'))).toBe(true);
        expect(read).toBeLessThan(512 * 1024);
        const materialized = await readAll(sourceBytes(await runtime.captureState('a')));
        expect(materialized.equals(runtime.read('a'))).toBe(true);
      } finally {
        fs.rmSync(dir, { recursive: true, force: true });
      }
    });
  });
});
