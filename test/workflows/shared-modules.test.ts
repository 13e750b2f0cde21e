import fs from 'node:fs';
import vm from 'node:vm';
import { reusableContext } from '../helpers/reusable-context';

/**
 * The session bundle as the tests and the worker build it, loaded by the SDK's own reusable context (no workflow yet):
 * what the modules shared by every workflow look like after the SDK's freeze. A frozen regex or zod schema fails the
 * first input that reaches it, in every workflow of the worker; this finds one before a user does.
 */

interface Shared {
  shared: string[];
  frozen: string[];
  threw: string[];
}

// Runs inside the context: walks every shared module of ours, and every schema in it, as a workflow would reach them.
const INSPECT = `(() => {
  const cache = globalThis.__webpack_module_cache__;
  const shared = [], frozen = [], threw = [];
  const seen = new WeakSet();
  const walk = (value, path) => {
    if (value === null || typeof value !== 'object' || seen.has(value)) return;
    seen.add(value);
    const zod = '_zod' in value;
    if ((value instanceof RegExp || zod) && Object.isFrozen(value)) frozen.push(path);
    // Parsed as a caller would: the schemas the modules hand out, not the parts inside them (a refinement alone).
    if (zod && !path.includes('._zod.') && typeof value.safeParse === 'function') {
      try { value.safeParse(undefined); value.safeParse({}); } catch (err) { threw.push(path + ': ' + err.message); }
    }
    if (value instanceof Set || value instanceof Map) {
      let i = 0;
      for (const item of value.values()) walk(item, path + '[' + i++ + ']');
    }
    for (const key of Reflect.ownKeys(value)) {
      let next;
      try { next = value[key]; } catch { continue; }
      walk(next, path + '.' + String(key));
    }
  };
  for (const id of IDS) {
    const module = cache[id];
    if (!module) continue;
    shared.push(id);
    walk(module.exports, id);
  }
  return JSON.stringify({ shared, frozen, threw });
})()`;

let inspected: Shared;

beforeAll(async () => {
  const code = fs.readFileSync(process.env.DS_TEST_WORKFLOW_BUNDLE!, 'utf8');
  const ids = [...code.matchAll(/^\/\*\*\*\/ "(\.\/src\/[^"]+)"/gm)].map((m) => m[1]!);
  const creator = await reusableContext(code);
  inspected = JSON.parse(
    vm.runInContext(INSPECT.replace('IDS', JSON.stringify(ids)), creator.context) as string,
  ) as Shared;
});

test('the schema modules are shared by every workflow of a thread', () => {
  expect(inspected.shared).toEqual(
    expect.arrayContaining([
      './src/workflows/preload.ts',
      './src/domain/schemas.ts',
      './src/domain/records.ts',
      './src/api/controls.ts',
    ]),
  );
  // Workflow code proper is evaluated per workflow, never shared.
  expect(inspected.shared).not.toContain('./src/workflows/session-workflow.ts');
});

test('no regex or zod schema a shared module reaches is frozen, and every shared schema parses', () => {
  expect(inspected.frozen).toEqual([]);
  expect(inspected.threw).toEqual([]);
});
