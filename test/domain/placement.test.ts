import {
  afterPlacement,
  afterReport,
  choosePlacement,
  RESERVATION_TTL_MS,
  type HostLoadReport,
  type KnownHost,
} from '../../src/domain/placement';

const report = (name: string, extra: Partial<HostLoadReport> = {}): HostLoadReport => ({
  hostTaskQueue: `q@${name}`,
  workerId: name,
  incarnation: 'i1',
  labels: [],
  running: 0,
  capacity: 10,
  draining: false,
  begun: 0,
  everyMs: 5_000,
  ...extra,
});
const known = (r: HostLoadReport, now = 0): KnownHost => afterReport(undefined, r, now);

/** Places `n` sessions one after another and returns where each went. */
function placeMany(hosts: Map<string, KnownHost>, n: number, now = 0): string[] {
  const out: string[] = [];
  for (let i = 0; i < n; i++) {
    const d = choosePlacement(hosts.values(), {}, now + i);
    if (!d.ok) throw new Error(d.message);
    hosts.set(d.hostTaskQueue, afterPlacement(hosts.get(d.hostTaskQueue)!, now + i));
    out.push(d.hostTaskQueue);
  }
  return out;
}

test('two idle hosts take placements in turn; a loaded one gets fewer until it is level', () => {
  const hosts = new Map([
    ['q@a', known(report('a'))],
    ['q@b', known(report('b'))],
  ]);
  expect(placeMany(hosts, 4)).toEqual(['q@a', 'q@b', 'q@a', 'q@b']);
  const uneven = new Map([
    ['q@a', known(report('a', { running: 3 }))],
    ['q@b', known(report('b'))],
  ]);
  expect(placeMany(uneven, 5)).toEqual(['q@b', 'q@b', 'q@b', 'q@a', 'q@b']);
});

test('load is relative to capacity; full and draining hosts are passed by', () => {
  const hosts = [
    known(report('big', { running: 5, capacity: 100 })),
    known(report('small', { running: 1, capacity: 2 })),
  ];
  expect(choosePlacement(hosts, {}, 0)).toEqual({ ok: true, hostTaskQueue: 'q@big' });
  const full = [known(report('a', { running: 2, capacity: 2 })), known(report('b', { draining: true }))];
  expect(choosePlacement(full, {}, 0)).toMatchObject({ ok: false, reason: 'busy' });
});

test('constraints: a host by id or queue, required labels; nobody matching is unsatisfiable', () => {
  const hosts = [known(report('a', { labels: ['zone=a'] })), known(report('b', { labels: ['zone=b', 'gpu'] }))];
  expect(choosePlacement(hosts, { constraints: { workerLabels: ['gpu'] } }, 0)).toMatchObject({ hostTaskQueue: 'q@b' });
  expect(choosePlacement(hosts, { constraints: { host: 'b' } }, 0)).toMatchObject({ hostTaskQueue: 'q@b' });
  expect(choosePlacement(hosts, { constraints: { host: 'q@a' } }, 0)).toMatchObject({ hostTaskQueue: 'q@a' });
  expect(choosePlacement(hosts, { constraints: { workerLabels: ['gpu', 'zone=a'] } }, 0)).toEqual({
    ok: false,
    reason: 'unsatisfiable',
    message: 'no live worker host satisfies the placement (worker labels gpu, zone=a)',
  });
});

test('a host that missed three reports, or said it is gone, is offered nothing', () => {
  const stale = known(report('a'), 0);
  const fresh = known(report('b', { running: 5 }), 14_000);
  expect(choosePlacement([stale, fresh], {}, 16_000)).toMatchObject({ hostTaskQueue: 'q@b' });
  expect(choosePlacement([known(report('a', { gone: true }))], {}, 0)).toMatchObject({ ok: false, reason: 'none' });
});

test('hosts to avoid are tried last', () => {
  const hosts = [known(report('a')), known(report('b', { running: 4 }))];
  expect(choosePlacement(hosts, { avoid: ['q@a'] }, 0)).toMatchObject({ hostTaskQueue: 'q@b' });
  expect(choosePlacement([known(report('a'))], { avoid: ['q@a'] }, 0)).toMatchObject({ hostTaskQueue: 'q@a' });
});

test('reservations count until the host reports the work begun, a new incarnation, or their time is over', () => {
  let h = known(report('a'));
  h = afterPlacement(afterPlacement(h, 1), 2);
  expect(h.reserved).toHaveLength(2);
  h = afterReport(h, report('a', { running: 1, begun: 1 }), 3);
  expect(h.reserved).toEqual([2]);
  expect(afterReport(h, report('a', { incarnation: 'i2' }), 4).reserved).toEqual([]);
  expect(afterReport(h, report('a', { running: 1, begun: 1 }), 2 + RESERVATION_TTL_MS + 1).reserved).toEqual([]);
});
