import { CoalescedReads } from '../../src/gateway/coalesce';

/** Fetches that end when the test says, numbered in the order they began. */
function fetches() {
  const pending: { resolve: (n: number) => void; reject: (e: Error) => void }[] = [];
  const fetch = () =>
    new Promise<number>((resolve, reject) => {
      pending.push({ resolve, reject });
    });
  return { pending, fetch };
}

const tick = () => new Promise((r) => setImmediate(r));

test('readers that come while a fetch is under way share the next one, never the one that began before them', async () => {
  const reads = new CoalescedReads<number>();
  const { pending, fetch } = fetches();
  const first = reads.read('s', fetch);
  await tick();
  const late = [reads.read('s', fetch), reads.read('s', fetch), reads.read('s', fetch)];
  expect(pending).toHaveLength(1); // the late ones wait: what is under way may predate them
  pending[0]!.resolve(1);
  await expect(first).resolves.toBe(1);
  await tick();
  expect(pending).toHaveLength(2); // one fetch for all three
  const later = reads.read('s', fetch); // arrives while the second runs: it gets a third
  pending[1]!.resolve(2);
  await expect(Promise.all(late)).resolves.toEqual([2, 2, 2]);
  await tick();
  expect(pending).toHaveLength(3);
  pending[2]!.resolve(3);
  await expect(later).resolves.toBe(3);
  await tick();
  expect(reads.size).toBe(0);
});

test('readers of one turn share one fetch, sent after the last of them asked', async () => {
  const reads = new CoalescedReads<number>();
  const { pending, fetch } = fetches();
  const together = [reads.read('s', fetch), reads.read('s', fetch)];
  expect(pending).toHaveLength(0); // not sent while this turn may still bring readers
  await tick();
  expect(pending).toHaveLength(1);
  pending[0]!.resolve(1);
  await expect(Promise.all(together)).resolves.toEqual([1, 1]);
  // Readers woken by one event (the streams' poll clock) each ask in a continuation of their own, in one turn.
  let ring: () => void = () => undefined;
  const clock = new Promise<void>((r) => (ring = r));
  const woken = [1, 2, 3].map(async () => {
    await clock;
    return reads.read('s', fetch);
  });
  ring();
  await tick();
  expect(pending).toHaveLength(2);
  pending[1]!.resolve(2);
  await expect(Promise.all(woken)).resolves.toEqual([2, 2, 2]);
  await tick();
  expect(reads.size).toBe(0);
});

test('keys do not share, a failure reaches the readers of that fetch only, and a throwing fetch rejects', async () => {
  const reads = new CoalescedReads<number>();
  const { pending, fetch } = fetches();
  const a = reads.read('a', fetch);
  const b = reads.read('b', fetch);
  await tick();
  expect(pending).toHaveLength(2);
  const aLate = reads.read('a', fetch);
  pending[0]!.reject(new Error('gone'));
  await expect(a).rejects.toThrow('gone');
  await tick();
  pending[2]!.resolve(7);
  await expect(aLate).resolves.toBe(7);
  pending[1]!.resolve(5);
  await expect(b).resolves.toBe(5);
  await expect(
    reads.read('c', () => {
      throw new Error('at once');
    }),
  ).rejects.toThrow('at once');
  await tick();
  expect(reads.size).toBe(0);
});
