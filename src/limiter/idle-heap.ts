import type { RateLimitAlgorithm } from '../algorithms/algorithm';

/**
 * The keys of a bounded table ordered by the earliest time each could be idle: a binary min-heap of
 * `(at, key, state)` in three parallel arrays. `at` is a lower bound, never later than the moment
 * the state goes idle (a grant only moves that moment later), so when the top's `at` is still in
 * the future no resident key is idle, and a full table refuses a newcomer without looking further.
 * Entries are not updated when a key is used or removed: an entry whose state is no longer the
 * key's is dropped when it comes up, and one that comes up early is pushed again for later.
 */
export class IdleHeap {
  #at: number[] = [];
  #keys: string[] = [];
  #states: RateLimitAlgorithm[] = [];

  get size(): number {
    return this.#at.length;
  }

  /** The earliest `at`, or Infinity when empty. */
  get first(): number {
    return this.#at.length > 0 ? (this.#at[0] as number) : Infinity;
  }

  push(at: number, key: string, state: RateLimitAlgorithm): void {
    let i = this.#at.length;
    this.#at.push(at);
    this.#keys.push(key);
    this.#states.push(state);
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if ((this.#at[parent] as number) <= at) break;
      this.#move(parent, i);
      i = parent;
    }
    this.#place(i, at, key, state);
  }

  /** Removes the entry with the earliest `at` and returns its key and state. */
  pop(): [string, RateLimitAlgorithm] {
    const top: [string, RateLimitAlgorithm] = [this.#keys[0] as string, this.#states[0] as RateLimitAlgorithm];
    const at = this.#at.pop() as number;
    const key = this.#keys.pop() as string;
    const state = this.#states.pop() as RateLimitAlgorithm;
    if (this.#at.length > 0) this.#siftDown(0, at, key, state);
    return top;
  }

  /** Keeps only the entries `live` accepts, in heap order again (in linear time): for dropping entries of keys long gone. */
  retain(live: (key: string, state: RateLimitAlgorithm) => boolean): void {
    let n = 0;
    for (let i = 0; i < this.#at.length; i++) {
      if (live(this.#keys[i] as string, this.#states[i] as RateLimitAlgorithm)) this.#move(i, n++);
    }
    this.#at.length = n;
    this.#keys.length = n;
    this.#states.length = n;
    for (let i = (n >> 1) - 1; i >= 0; i--) this.#siftDown(i, this.#at[i] as number, this.#keys[i] as string, this.#states[i] as RateLimitAlgorithm);
  }

  /** Puts the entry at `i` or below it, moving smaller children up. */
  #siftDown(i: number, at: number, key: string, state: RateLimitAlgorithm): void {
    const n = this.#at.length;
    for (;;) {
      let child = 2 * i + 1;
      if (child >= n) break;
      if (child + 1 < n && (this.#at[child + 1] as number) < (this.#at[child] as number)) child++;
      if ((this.#at[child] as number) >= at) break;
      this.#move(child, i);
      i = child;
    }
    this.#place(i, at, key, state);
  }

  #move(from: number, to: number): void {
    this.#at[to] = this.#at[from] as number;
    this.#keys[to] = this.#keys[from] as string;
    this.#states[to] = this.#states[from] as RateLimitAlgorithm;
  }

  #place(i: number, at: number, key: string, state: RateLimitAlgorithm): void {
    this.#at[i] = at;
    this.#keys[i] = key;
    this.#states[i] = state;
  }
}
