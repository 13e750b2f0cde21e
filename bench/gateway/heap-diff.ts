/**
 * What the soak's "after" heap holds that its "before" did not: the objects of `.bench/soak-after.heapsnapshot` whose
 * ids are not in `.bench/soak-before.heapsnapshot` (V8 keeps an object's id across the snapshots of one process),
 * grouped by type and constructor, largest first.
 *
 *   npx tsx bench/gateway/soak.ts --heap && node --max-old-space-size=4096 -r tsx/cjs bench/gateway/heap-diff.ts
 */
import * as fs from 'node:fs';
import * as path from 'node:path';

const RESULTS_DIR = path.resolve(__dirname, '..', '..', '.bench');

interface Snapshot {
  snapshot: { meta: { node_fields: string[]; node_types: [string[]] } };
  nodes: number[];
  strings: string[];
}

function objects(file: string): {
  ids: Set<number>;
  each: (fn: (id: number, key: string, size: number) => void) => void;
} {
  const s = JSON.parse(fs.readFileSync(file, 'utf8')) as Snapshot;
  const fields = s.snapshot.meta.node_fields;
  const [typeAt, nameAt, idAt, sizeAt] = ['type', 'name', 'id', 'self_size'].map((f) => fields.indexOf(f)) as [
    number,
    number,
    number,
    number,
  ];
  const types = s.snapshot.meta.node_types[0];
  const each = (fn: (id: number, key: string, size: number) => void) => {
    for (let i = 0; i < s.nodes.length; i += fields.length) {
      const type = types[s.nodes[i + typeAt]!] ?? '?';
      const name = s.strings[s.nodes[i + nameAt]!] ?? '?';
      // Strings and code are grouped by type only: their names are their contents.
      const key = ['object', 'closure', 'native', 'hidden'].includes(type) ? `${type} ${name.slice(0, 60)}` : type;
      fn(s.nodes[i + idAt]!, key, s.nodes[i + sizeAt]!);
    }
  };
  const ids = new Set<number>();
  each((id) => ids.add(id));
  return { ids, each };
}

const before = objects(path.join(RESULTS_DIR, 'soak-before.heapsnapshot')).ids;
const groups = new Map<string, { count: number; size: number }>();
let total = 0;
objects(path.join(RESULTS_DIR, 'soak-after.heapsnapshot')).each((id, key, size) => {
  if (before.has(id)) return;
  const g = groups.get(key) ?? { count: 0, size: 0 };
  g.count++;
  g.size += size;
  total += size;
  groups.set(key, g);
});
console.log(`objects in "after" that were not in "before": ${(total / 1024 / 1024).toFixed(1)} MiB`);
for (const [key, g] of [...groups].sort((a, b) => b[1].size - a[1].size).slice(0, 40)) {
  console.log(`${(g.size / 1024).toFixed(0).padStart(8)} KiB ${String(g.count).padStart(8)}  ${key}`);
}
