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
