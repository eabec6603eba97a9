/**
 * Gathers the calls made in one tick into batches, one per group, and sends each batch once the
 * tick's synchronous code and microtasks so far have run (a microtask, so nothing waits for a
 * timer and no call is held back for later ticks). A group is a hash slot on a Redis Cluster, where
 * one script may only touch keys of one slot, and a single group elsewhere. A batch is sent at
 * once when it reaches `maxBatch`, which bounds how long one script holds Redis and lets the next
 * batch travel while Redis runs the previous one.
 *
 * Batches leave in the order they were started and one client sends them in that order, so calls
 * on one key reach Redis in the order they were made.
 */
export class Coalescer<T> {
  readonly #send: (batch: T[]) => void;
  readonly #maxBatch: number;
  #open = new Map<number, T[]>();
  #scheduled = false;

  constructor(send: (batch: T[]) => void, maxBatch: number) {
    this.#send = send;
    this.#maxBatch = maxBatch;
  }

  add(item: T, group: number): void {
    const batch = this.#open.get(group);
    if (batch === undefined) {
      this.#open.set(group, [item]);
    } else {
      batch.push(item);
      if (batch.length >= this.#maxBatch) {
        this.#open.delete(group);
        this.#send(batch);
        return;
      }
    }
    if (!this.#scheduled) {
      this.#scheduled = true;
      queueMicrotask(this.#flush);
    }
  }

  readonly #flush = (): void => {
    this.#scheduled = false;
    const open = this.#open;
    this.#open = new Map();
    for (const batch of open.values()) this.#send(batch);
  };
}
