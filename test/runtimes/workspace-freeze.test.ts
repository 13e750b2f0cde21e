import { readdirSync, readFileSync } from 'node:fs';
import * as fsp from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { WorkspaceRuntime } from '../../src/runtimes';
import { sourceBytes } from '../../src/snapshots';
import { readAll } from '../helpers/checkpoints';

/** The freeze around a capture waits for every process of the group to stop, watching /proc. Linux only. */

/** A group of three: the shell and two children. */
const GROUP = ['sh', '-c', 'sleep 1000 & sleep 1000 & wait'];

let tmp: string;
let runtime: WorkspaceRuntime;

beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'workspace-freeze-'));
  // Without pre-copy a captureState returns frozen, so the wait for the group to stop can be watched.
  runtime = new WorkspaceRuntime({ rootDir: path.join(tmp, 'root'), defaultStopGraceMs: 2_000, precopy: false });
});

afterAll(async () => {
  await runtime.stopAll();
  await fsp.rm(tmp, { recursive: true, force: true });
});

/** The states of the processes of group `pgid`, zombies left out, from a scan of /proc. */
function statesOf(pgid: number): string[] {
  const states: string[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    let text: string;
    try {
      text = readFileSync(`/proc/${name}/stat`, 'utf8');
    } catch {
      continue;
    }
    const [state, , pgrp] = text.slice(text.lastIndexOf(')') + 2).split(' ');
    if (Number(pgrp) === pgid && !'ZX'.includes(state!)) states.push(state!);
  }
  return states;
}

async function waitFor(probe: () => boolean, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!probe()) {
    if (Date.now() > deadline) throw new Error('timed out waiting');
    await delay(20);
  }
}

(process.platform === 'linux' ? test : test.skip)(
  '50 captures at once freeze every process and keep the open files bounded, not one per process per capture',
  async () => {
    const sessions = 50;
    const infos = await Promise.all(
      Array.from({ length: sessions }, (_, i) =>
        runtime.start({
          sessionId: `session-${i}`,
          instanceId: `inst-${i}`,
          spec: { kind: 'workspace', command: GROUP, files: { 'a.txt': 'a'.repeat(1000), 'sub/b.txt': 'b' } },
        }),
      ),
    );
    for (const { pid } of infos) await waitFor(() => statesOf(pid!).length === 3);

    const open = (): number => readdirSync('/proc/self/fd').length;
    const baseline = open();
    let peak = baseline;
    const sampler = setInterval(() => (peak = Math.max(peak, open())), 2);
    try {
      const captures = await Promise.all(infos.map(({ instanceId }) => runtime.captureState(instanceId)));
      // The state's first piece comes once its whole group has stopped: the children too, not only the leader.
      const pieces = captures.map((capture) => sourceBytes(capture));
      const firsts = await Promise.all(pieces.map((piece) => piece.next()));
      expect(infos.flatMap(({ pid }) => statesOf(pid!)).filter((state) => state !== 'T')).toEqual([]);
      const archives = await Promise.all(
        pieces.map(async (rest, i) =>
          Buffer.concat([Buffer.from(firsts[i]!.value as Uint8Array), await readAll(rest)]),
        ),
      );
      expect(new Set(archives.map((archive) => archive.length)).size).toBe(1);
    } finally {
      clearInterval(sampler);
    }
    console.log(
      `open files during ${sessions} captures of ${3 * sessions} processes: ${baseline} before, at most ${peak}`,
    );
    // Each capture holds at most two files at once (the file it reads, its clock reading), the shared /proc scan
    // eight; 64 more for whatever else the process opens meanwhile. Before, every capture's scan opened every
    // process's stat file at once: 11,623 here.
    expect(peak - baseline).toBeLessThan(2 * sessions + 8 + 64);
  },
);
