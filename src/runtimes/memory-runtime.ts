import { Readable } from 'node:stream';
import type { MemoryRuntimeSpec } from '../domain/schemas';
import type { UnchangedRange } from '../snapshots';
import type {
  CapturedState,
  ExitInfo,
  RestoreRequest,
  RuntimeInstanceInfo,
  SessionRuntime,
  StartRequest,
} from './session-runtime';
import { adoptForRestore } from './session-runtime';
import { InProcessInstances, type InProcessInstance } from './in-process';

interface MemoryInstance extends InProcessInstance {
  /** The state is `buffer[0, length)`; the buffer has room to grow, so appends do not copy what is there. */
  buffer: Buffer;
  length: number;
  /** Captures still reading `buffer`: the next write copies it first (copy on write), so they see their moment. */
  readers: number;
  /**
   * The checkpoint the state was last stored as (or restored from), its size, and the number of the first write
   * that capture did not see.
   */
  base: { checkpointId: string; size: number; since: number } | null;
  /** Writes since the base: `[start, end, number of the last write in it]`; adjoining writes share an entry. */
  writes: Array<[number, number, number]>;
  /** Writes made so far (each has a number: captures stored in any order agree on what came after them). */
  writeCount: number;
  /** When the state was last written (ISO-8601): its start or restore until the first write. */
  lastWriteAt: string;
}

const VERSION = '1';

/**
 * State held in this worker's memory: a byte buffer per instance, no processes. For tests, demos and state an
 * embedding program keeps in memory (an agent's conversation, say); the state is lost with the worker unless a
 * checkpoint captured it.
 *
 * The runtime sees every write, so `captureState` names what is unchanged since the last stored checkpoint exactly:
 * a checkpoint after appending a turn to a large state reads and stores about the turn.
 */
export class MemoryRuntime implements SessionRuntime<MemoryRuntimeSpec> {
  readonly kind = 'memory';
  readonly version = VERSION;
  readonly placement = 'host';

  private readonly instances = new InProcessInstances<MemoryInstance>(this.kind, this.version);

  canRestore(version: string): boolean {
    return version === VERSION;
  }

  start(request: StartRequest<MemoryRuntimeSpec>): Promise<RuntimeInstanceInfo> {
    return settled(
      () =>
        this.instances.adopt(request) ??
        this.instances.info(this.create(request, Buffer.from(request.spec.initialState ?? '', 'utf8'))),
    );
  }

  async restore(request: RestoreRequest<MemoryRuntimeSpec>): Promise<RuntimeInstanceInfo> {
    const adopted = adoptForRestore(request, () => this.instances.adopt(request));
    if (adopted) return adopted;
    return this.instances.making(request.instanceId, async () => {
      const chunks: Buffer[] = [];
      // A failing stream rejects here with its own error object, and nothing has been kept.
      for await (const chunk of request.state) {
        chunks.push(Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk as string));
      }
      const instance = this.create(request, Buffer.concat(chunks));
      // The state is that checkpoint, byte for byte: the next capture can be relative to it.
      if (request.checkpointId !== undefined) {
        instance.base = { checkpointId: request.checkpointId, size: instance.length, since: 0 };
      }
      return this.instances.info(instance);
    });
  }

  capture(instanceId: string): Promise<Readable> {
    return settled(() => {
      // `read` copies: later writes must not change a capture in flight.
      const state = this.read(instanceId);
      return Readable.from(state.length > 0 ? [state] : [], { objectMode: false });
    });
  }

  captureState(instanceId: string): Promise<CapturedState> {
    return settled(() => {
      const instance = this.get(instanceId);
      const { buffer, length, base } = instance;
      const since = instance.writeCount;
      const changed = base ? changedRanges(instance.writes, base.size, length) : [[0, length] as [number, number]];
      instance.readers++;
      let open = true;
      const close = (): void => {
        if (!open) return;
        open = false;
        if (instance.buffer === buffer) instance.readers--;
      };
      // Views of `buffer`, which no write touches while this capture is open (copy on write).
      const view = (start: number, end: number): Buffer => buffer.subarray(start, end);
      async function* pieces(): AsyncGenerator<Uint8Array | UnchangedRange> {
        try {
          let at = 0;
          for (const [start, end] of changed) {
            if (start > at) yield unchangedRange(at, start, view);
            yield view(start, end);
            at = end;
          }
          if (at < length) yield unchangedRange(at, length, view);
        } finally {
          close();
        }
      }
      return {
        base: base?.checkpointId ?? null,
        pieces: pieces(),
        close,
        stored: (checkpointId: string) => {
          // A capture older than the base (two captures stored out of order) would take the base back: ignored.
          if (instance.base && since < instance.base.since) return;
          instance.base = { checkpointId, size: length, since };
          // Writes made while this capture was read are changes relative to it.
          instance.writes = instance.writes.filter((w) => w[2] >= since);
        },
      };
    });
  }

  stop(instanceId: string): Promise<ExitInfo> {
    return this.instances.stop(instanceId);
  }

  waitForExit(instanceId: string, signal?: AbortSignal): Promise<ExitInfo> {
    return this.instances.waitForExit(instanceId, signal);
  }

  async describe(instanceId: string): Promise<RuntimeInstanceInfo | undefined> {
    return this.instances.describe(instanceId);
  }

  /** Forgets the instance (stopping it first). Unknown ids are a no-op. */
  dispose(instanceId: string): Promise<void> {
    return this.instances.dispose(instanceId);
  }

  /** The instance's current state (a copy). */
  read(instanceId: string): Buffer {
    const { buffer, length } = this.get(instanceId);
    return Buffer.from(buffer.subarray(0, length));
  }

  /** Replaces the state of a running instance, as its program would; strings are stored as UTF-8. */
  write(instanceId: string, data: Buffer | string): void {
    const instance = this.instances.running(instanceId);
    // A new buffer: a capture still reading the old one keeps it.
    const bytes = Buffer.from(data);
    instance.buffer = bytes;
    instance.length = bytes.length;
    instance.readers = 0;
    recordWrite(instance, 0, bytes.length);
  }

  /**
   * Writes `data` at `offset` of a running instance's state, growing it if the write reaches past the end (a gap
   * before `offset` is zero-filled).
   */
  writeAt(instanceId: string, offset: number, data: Buffer | string): void {
    if (!Number.isSafeInteger(offset) || offset < 0) {
      throw new RangeError(`offset must be a non-negative integer, got ${offset}`);
    }
    const bytes = typeof data === 'string' ? Buffer.from(data, 'utf8') : data;
    const instance = this.writable(instanceId, offset + bytes.length);
    bytes.copy(instance.buffer, offset);
    if (offset > instance.length) instance.buffer.fill(0, instance.length, offset);
    recordWrite(instance, Math.min(offset, instance.length), offset + bytes.length);
    instance.length = Math.max(instance.length, offset + bytes.length);
  }

  /** Appends `data` to a running instance's state. */
  append(instanceId: string, data: Buffer | string): void {
    this.writeAt(instanceId, this.get(instanceId).length, data);
  }

  /** The newest write (or the start), for the idle-pause policy. */
  async lastActivity(instanceId: string): Promise<string | undefined> {
    return this.get(instanceId).lastWriteAt;
  }

  /** The instance, ready for a write that reaches `end`: its buffer its own (not read by a capture) and large enough. */
  private writable(instanceId: string, end: number): MemoryInstance {
    const instance = this.instances.running(instanceId);
    if (instance.readers > 0 || end > instance.buffer.length) {
      const grown = Buffer.alloc(
        end > instance.buffer.length ? Math.max(end, instance.buffer.length * 2) : instance.buffer.length,
      );
      instance.buffer.copy(grown, 0, 0, instance.length);
      instance.buffer = grown;
      instance.readers = 0;
    }
    return instance;
  }

  private get(instanceId: string): MemoryInstance {
    return this.instances.get(instanceId);
  }

  private create(request: StartRequest<MemoryRuntimeSpec>, state: Buffer): MemoryInstance {
    return this.instances.add(request, {
      buffer: state,
      length: state.length,
      readers: 0,
      base: null,
      writes: [],
      writeCount: 0,
      lastWriteAt: new Date().toISOString(),
    });
  }
}

/**
 * Records a write of `[start, end)`. One that overlaps or adjoins the last entry extends it (an appending program
 * makes one entry, not one per append); the entry then carries the newer write's number.
 */
function recordWrite(instance: MemoryInstance, start: number, end: number): void {
  const number = instance.writeCount++;
  instance.lastWriteAt = new Date().toISOString();
  const last = instance.writes[instance.writes.length - 1];
  if (last && start <= last[1] && end >= last[0]) {
    last[0] = Math.min(last[0], start);
    last[1] = Math.max(last[1], end);
    last[2] = number;
  } else {
    instance.writes.push([start, end, number]);
  }
}

/**
 * The parts of a state of `length` bytes that may differ from its base of `baseSize` bytes: every range written since,
 * and whatever lies past the base's end, merged and in order.
 */
function changedRanges(
  writes: ReadonlyArray<readonly [number, number, number]>,
  baseSize: number,
  length: number,
): Array<[number, number]> {
  const ranges = writes.map(([s, e]): [number, number] => [s, Math.min(e, length)]).filter(([s, e]) => s < e);
  if (length > baseSize) ranges.push([baseSize, length]);
  ranges.sort((a, b) => a[0] - b[0]);
  const merged: Array<[number, number]> = [];
  for (const [s, e] of ranges) {
    const last = merged[merged.length - 1];
    if (last && s <= last[1]) last[1] = Math.max(last[1], e);
    else merged.push([s, e]);
  }
  return merged;
}

function unchangedRange(start: number, end: number, view: (start: number, end: number) => Buffer): UnchangedRange {
  return {
    baseOffset: start,
    length: end - start,
    read: async function* (from: number, to: number) {
      yield view(start + from, start + to);
    },
  };
}

/** The result of `fn` as a promise, a throw becoming a rejection (what an `async` method with no `await` does). */
function settled<T>(fn: () => T): Promise<T> {
  return new Promise((resolve) => resolve(fn()));
}
