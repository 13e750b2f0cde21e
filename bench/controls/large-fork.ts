/**
 * Fork into ten of a large memory session and of a 16 MiB one: a fork writes manifests over the source checkpoint's
 * chunks, so its time should not depend on the state's size.
 */
import { randomFillSync } from 'node:crypto';
import { timed } from './stats';
import type { ControlsSystem } from './system';

export interface LargeFork {
  mib: number;
  /** The one checkpoint of the whole state the forks start from. */
  checkpointMs: number;
  forkMs: number;
  forks: number;
}

const FORKS = 10;

/** Random bytes (incompressible), filled in pieces so that no single call holds the event loop for seconds. */
function randomState(mib: number): Buffer {
  const state = Buffer.allocUnsafe(mib * 1024 * 1024);
  const piece = 64 * 1024 * 1024;
  for (let at = 0; at < state.length; at += piece) randomFillSync(state, at, Math.min(piece, state.length - at));
  return state;
}

export async function measureLargeFork(sys: ControlsSystem, mib: number): Promise<LargeFork> {
  const session = await sys.sessions.start({
    sessionId: `large-${mib}-${sys.runId}`,
    runtime: { kind: 'memory', initialState: 'x' },
  });
  const { runtime } = await session.status();
  sys.memory.write(runtime!.instanceId, randomState(mib));
  const checkpoint = await timed(() => session.checkpoint());
  const fork = await timed(() => session.fork({ from: checkpoint.value.index!, count: FORKS, paused: true }));
  // Frees the state (the forks are paused: they hold none).
  await session.stop({ checkpoint: false });
  return { mib, checkpointMs: checkpoint.ms, forkMs: fork.ms, forks: fork.value.forks.length };
}
