/**
 * Summarises the CPU profiles a `--profile` run writes (one per thread of the worker): where each thread's time went
 * (idle, GC, the SDK, the project, Node), the functions with the most self time, and the longest stretches the thread
 * ran without an idle sample (gaps under 20 ms joined): how long its event loop could not answer.
 *
 *   npx tsx bench/scale/profile-summary.ts .bench/scale-profile/*.cpuprofile
 */
import fs from 'node:fs';

interface Profile {
  nodes: { id: number; callFrame: { functionName: string; url: string; lineNumber: number } }[];
  startTime: number;
  samples: number[];
  timeDeltas: number[];
}

const JOIN_GAP_US = 20_000;

function category(functionName: string, url: string): string {
  if (functionName === '(idle)') return 'idle';
  if (functionName.startsWith('(')) return functionName;
  if (url.includes('@temporalio')) return 'Temporal SDK';
  if (url.includes('/src/')) return 'project';
  if (url.startsWith('node:')) return 'Node';
  return url.includes('node_modules') ? 'other packages' : 'other';
}

function summarise(file: string): void {
  const p = JSON.parse(fs.readFileSync(file, 'utf8')) as Profile;
  const frames = new Map(p.nodes.map((n) => [n.id, n.callFrame]));
  const self = new Map<string, number>();
  const byCategory = new Map<string, number>();
  const busy: [number, number][] = [];
  let t = p.startTime;
  let open: [number, number] | undefined;
  for (let i = 0; i < p.samples.length; i++) {
    t += p.timeDeltas[i]!;
    const f = frames.get(p.samples[i]!)!;
    const dt = p.timeDeltas[i + 1] ?? 0;
    const where = `${f.functionName || '(anonymous)'} ${f.url.replace(/^.*node_modules\//, '')}:${f.lineNumber}`;
    self.set(where, (self.get(where) ?? 0) + dt);
    const c = category(f.functionName, f.url);
    byCategory.set(c, (byCategory.get(c) ?? 0) + dt);
    if (c !== 'idle') {
      if (open && t - open[1] <= JOIN_GAP_US) open[1] = t;
      else busy.push((open = [t, t]));
    }
  }
  const total = [...byCategory.values()].reduce((a, b) => a + b, 0);
  const s = (us: number) => `${(us / 1e6).toFixed(1)} s`;
  console.log(`\n## ${file}: ${s(total)}\n`);
  for (const [c, us] of [...byCategory].sort((a, b) => b[1] - a[1])) {
    console.log(`${c.padEnd(22)} ${s(us).padStart(9)}  ${((us / total) * 100).toFixed(1)} %`);
  }
  console.log('\nmost self time:');
  const working = [...self].filter(([where]) => !where.startsWith('(idle) '));
  for (const [where, us] of working.sort((a, b) => b[1] - a[1]).slice(0, 15)) {
    console.log(`${s(us).padStart(9)}  ${where}`);
  }
  const longest = busy.map(([a, b]) => [b - a, a - p.startTime] as const).sort((a, b) => b[0] - a[0]);
  console.log('\nlongest busy stretches (ms, at s from the start):');
  console.log(
    longest
      .slice(0, 5)
      .map(([d, at]) => `${(d / 1000).toFixed(0)} at ${(at / 1e6).toFixed(0)}`)
      .join(' · '),
  );
}

const files = process.argv.slice(2);
if (files.length === 0) throw new Error('usage: profile-summary.ts <file.cpuprofile>…');
for (const file of files) summarise(file);
