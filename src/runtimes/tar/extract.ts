import type { Readable } from 'node:stream';
import { extract as tarExtract, type Extract, type Header } from 'tar-stream';
import { toError } from '../../errors';
import type { TarLayoutReader } from './layout-reader';

/*
 * Reading is tar-stream's: restore takes archives from any encoder (an older capture, GNU tar, tar-stream's own
 * pack), and a well-worn parser judges their headers, checksums and extensions. Only writing is this module's, where
 * the exact bytes matter (see header.ts).
 */

/** A header as the reader reports it. */
export type TarHeader = Header;
/** An entry of an archive being read: its header, and its content to read or, with `resume()`, to skip. */
export type TarReadEntry = Extract extends AsyncIterable<infer E> ? E : never;

/**
 * Reads the tar stream `state` and hands its entries, in order, to `consume`; resolves with what `consume` returns.
 * Resolves only after `state` has ended; if `state` fails, rejects with its error object unchanged (it says why, e.g.
 * a digest mismatch). `layout`, if given, is shown every byte the reader is.
 */
export async function readTarStream<T>(
  state: Readable,
  consume: (entries: AsyncIterable<TarReadEntry>) => Promise<T>,
  layout?: TarLayoutReader,
): Promise<T> {
  // The iterator in `feed` reports the state's errors while it reads; an error that arrives after it stopped
  // (the extractor failed first) must not become an unhandled 'error' event that takes the worker down.
  state.on('error', () => undefined);
  const extract = tarExtract();
  // Likewise the extractor's: its errors reach `consume` through the entries it iterates; one emitted after `consume`
  // stopped iterating (the state failed, or an entry's write did) has nobody left to tell.
  extract.on('error', () => undefined);
  let stateFailure: { error: unknown } | undefined;
  let abandoned = false;
  const feeding = feed(state, extract, layout).catch((error: unknown) => {
    if (abandoned) return; // the error of our own `state.destroy()` below
    stateFailure = { error };
    extract.destroy(toError(error));
  });
  let result: T;
  try {
    result = await consume(extract);
  } catch (error) {
    // A failing state stream is the root cause of whatever the extractor then reported.
    if (stateFailure) throw stateFailure.error;
    // Stop reading the state at once, even if its source has stalled.
    abandoned = true;
    state.destroy();
    extract.destroy();
    await feeding;
    throw error;
  }
  await feeding;
  // Unreachable while the extractor only finishes after `end()`, but accepting failed state would be the worst
  // outcome, so check rather than assume.
  if (stateFailure) throw stateFailure.error;
  return result;
}

/** Writes `source` into `sink` with backpressure, and shows it to `layout`; returns early if the sink is destroyed. */
async function feed(source: Readable, sink: Extract, layout: TarLayoutReader | undefined): Promise<void> {
  for await (const chunk of source) {
    if (sink.destroying) return;
    layout?.push(chunk);
    if (!sink.write(chunk)) await drainedOrClosed(sink);
  }
  sink.end(null);
}

/** The events of a tar-stream (streamx) writable that `drainedOrClosed` waits for. */
interface DrainEvents {
  once(event: 'drain' | 'close', listener: () => void): unknown;
  off(event: 'drain' | 'close', listener: () => void): unknown;
}

/** Waits until a full writable takes more data, or is destroyed (then 'drain' would never come). */
function drainedOrClosed(stream: DrainEvents): Promise<void> {
  return new Promise((resolve) => {
    const done = (): void => {
      stream.off('drain', done);
      stream.off('close', done);
      resolve();
    };
    stream.once('drain', done);
    stream.once('close', done);
  });
}
