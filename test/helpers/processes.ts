import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';

/** Running: a zombie (killed, not yet reaped by whichever process adopted it) is not. Linux (`/proc`). */
export function alive(pid: number): boolean {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return false;
  }
}

/** kill -9 a child this process started, if it still runs; resolves once it has exited (been reaped). */
export async function killChild(child: ChildProcess | undefined): Promise<void> {
  if (!child || child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGKILL');
  await exited;
}
