// No zod here: the CLI's suggestions load without it, and its start-up time is a user's wait.

/** The tenant of sessions started without one, and of every session that predates tenants. */
export const DEFAULT_TENANT = 'default';

/** Whether `tenant` is the default one: named so, or not named at all. */
export function isDefaultTenant(tenant: string | undefined): tenant is undefined | typeof DEFAULT_TENANT {
  return tenant === undefined || tenant === DEFAULT_TENANT;
}
/** What a tenant id looks like (TenantId in schemas.ts): no "." and no "@", so a session key is unambiguous. */
export const TENANT_PATTERN = /^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$/;

/**
 * The known name `key` was probably meant to be: the same once case, `_` and `-` are ignored (snake_case,
 * kebab-case), or within a small edit distance of one (`lable`, `chekpoint`). Undefined when nothing is close.
 */
export function closestName(key: string, known: readonly string[]): string | undefined {
  const target = normalize(key);
  let best: { name: string; distance: number } | undefined;
  for (const name of known) {
    const distance = editDistance(target, normalize(name));
    if (distance === 0) return name;
    if (!best || distance < best.distance) best = { name, distance };
  }
  const allowed = Math.max(1, Math.floor(target.length / 4));
  return best && best.distance <= allowed ? best.name : undefined;
}

function normalize(name: string): string {
  return name.replace(/[_-]/g, '').toLowerCase();
}

/** Optimal string alignment distance: insertions, deletions, substitutions and adjacent swaps cost one each. */
function editDistance(a: string, b: string): number {
  if (Math.abs(a.length - b.length) > 8) return Infinity;
  const d: number[][] = Array.from({ length: a.length + 1 }, (_, i) => [i, ...new Array<number>(b.length).fill(0)]);
  for (let j = 1; j <= b.length; j++) d[0]![j] = j;
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let v = Math.min(d[i - 1]![j]! + 1, d[i]![j - 1]! + 1, d[i - 1]![j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) v = Math.min(v, d[i - 2]![j - 2]! + 1);
      d[i]![j] = v;
    }
  }
  return d[a.length]![b.length]!;
}

/**
 * The ids of the sessions a fork makes: `newSessionId` (or `<source>-fork-<suffix>`), and with `count` > 1 each of
 * them `<id>-1…n`. The workflow and the client (for an ended source) name forks the same way.
 */
export function forkSessionIds(
  sourceId: string,
  newSessionId: string | undefined,
  count: number,
  suffix: string,
): string[] {
  const base = newSessionId ?? `${sourceId}-fork-${suffix}`;
  return count === 1 ? [base] : Array.from({ length: count }, (_, i) => `${base}-${i + 1}`);
}
