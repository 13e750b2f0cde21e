/**
 * Reads of one thing that arrive together share one fetch, and no reader gets what was fetched before it asked: a
 * fetch is sent at the end of the turn it was asked in, shared by every reader of that turn; a request that finds a
 * fetch already sent waits for it to end and then shares the next one with every other request that came meanwhile.
 * So each answer was read after its request arrived (a client that just sent a control sees its effect), and a burst
 * of N readers of one session costs one query, and at most two at a time, not N.
 */
export class CoalescedReads<T> {
  private readonly slots = new Map<string, Slot<T>>();

  read(key: string, fetch: () => Promise<T>): Promise<T> {
    const slot = this.slots.get(key);
    if (!slot) return this.begin(key, fetch);
    if (!slot.sent) return slot.running;
    const next = () => this.begin(key, fetch);
    slot.queued ??= slot.running.then(next, next);
    return slot.queued;
  }

  /** Keys with a fetch under way or queued (for tests: an idle key holds nothing). */
  get size(): number {
    return this.slots.size;
  }

  private begin(key: string, fetch: () => Promise<T>): Promise<T> {
    // Sent once the readers of this turn have asked (a microtask runs after them); a fetch that throws at once fails
    // its readers like one that rejects.
    const slot: Slot<T> = {
      sent: false,
      running: Promise.resolve().then(() => {
        slot.sent = true;
        return fetch();
      }),
    };
    const { running } = slot;
    this.slots.set(key, slot);
    // Registered before any queued read's continuation, so it runs first: it leaves a slot that has one queued.
    const settle = () => {
      if (this.slots.get(key) === slot && !slot.queued) this.slots.delete(key);
    };
    running.then(settle, settle);
    return running;
  }
}

interface Slot<T> {
  running: Promise<T>;
  /** Whether the fetch has gone out: until then, a reader shares it. */
  sent: boolean;
  queued?: Promise<T>;
}
