import type { RateLimitAlgorithm } from '../algorithms/algorithm';

/** Lanes of entries queued in time order: one per rule whose new keys arrive together, at most. */
const LANES = 4;
/** A lane's first capacity (a power of two: its indices wrap with a mask). */
const FIRST_CAPACITY = 1024;

/**
 * The keys of a bounded table ordered by the earliest time each could be idle: `(at, key, state)`
 * entries, taken out earliest first. `at` is a lower bound, never later than the moment the state
 * goes idle (a grant only moves that moment later), so when the first `at` is still in the future no
 * resident key is idle, and a full table refuses a newcomer without looking further. Entries are not
 * updated when a key is used or removed: an entry whose state is no longer the key's is dropped when
 * it comes up, and one that comes up early is pushed again for later.
 *
 * New keys are `queue`d: new keys of one rule arrive in the order they go idle, so each goes to the
 * end of a lane (a ring buffer in time order), and comes out of its front. Only entries that fit no
 * lane, and those `push`ed again out of order, go to a binary min-heap. A flood of new keys then
 * costs a lane step each way, not a heap's ~17 levels over three arrays of 100 000 entries, where
 * the heap was a large part of a flood's CPU (bench/HISTORY.md). Several lanes keep the new keys
 * of a few rules apart (a flood of anonymous keys beside new signed-in users with a longer window);
 * a lane is given to the entry it delays least.
 */
export class IdleHeap {
  /** What `pop` returns, filled again by each pop: a pair per pop was much of a flood's allocation. */
  readonly #popped: Popped = { at: 0, key: '', state: undefined as unknown as RateLimitAlgorithm };
  #at: number[] = [];
  #keys: string[] = [];
  #states: RateLimitAlgorithm[] = [];
  readonly #lanes: Lane[] = [];

  get size(): number {
    let size = this.#at.length;
    for (const lane of this.#lanes) size += lane.count;
    return size;
  }

  /** Whether some entry's `at` is `now` or earlier. */
  hasDue(now: number): boolean {
    const lane = this.#earliestLane();
    return lane !== undefined ? (lane.at[lane.head] as number) <= now : this.#at.length > 0 && (this.#at[0] as number) <= now;
  }

  /**
   * Adds a new key's entry: at the end of the lane whose last entry is latest but not after `at`, or
   * of an empty lane, or to the heap when no lane can take it in order.
   */
  queue(at: number, key: string, state: RateLimitAlgorithm): void {
    let best: Lane | undefined;
    let empty: Lane | undefined;
    for (const lane of this.#lanes) {
      if (lane.count === 0) empty ??= lane;
      else if (lane.last <= at && (best === undefined || lane.last > best.last)) best = lane;
    }
    best ??= empty ?? (this.#lanes.length < LANES ? this.#lanes[this.#lanes.push(new Lane()) - 1] : undefined);
    if (best === undefined) this.push(at, key, state);
    else best.push(at, key, state);
  }

  /** Adds an entry in no particular order, to the heap. */
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

  /** Removes the entry with the earliest `at` and returns it, valid until the next pop. */
  pop(): Readonly<Popped> {
    const popped = this.#popped;
    const lane = this.#earliestLane();
    if (lane !== undefined) {
      lane.shift(popped);
      return popped;
    }
    popped.at = this.#at[0] as number;
    popped.key = this.#keys[0] as string;
    popped.state = this.#states[0] as RateLimitAlgorithm;
    const at = this.#at.pop() as number;
    const key = this.#keys.pop() as string;
    const state = this.#states.pop() as RateLimitAlgorithm;
    if (this.#at.length > 0) this.#siftDown(0, at, key, state);
    return popped;
  }

  /** Keeps only the entries `live` accepts, in order again (in linear time): for dropping entries of keys long gone. */
  retain(live: (key: string, state: RateLimitAlgorithm) => boolean): void {
    let n = 0;
    for (let i = 0; i < this.#at.length; i++) {
      if (live(this.#keys[i] as string, this.#states[i] as RateLimitAlgorithm)) this.#move(i, n++);
    }
    this.#at.length = n;
    this.#keys.length = n;
    this.#states.length = n;
    for (let i = (n >> 1) - 1; i >= 0; i--) this.#siftDown(i, this.#at[i] as number, this.#keys[i] as string, this.#states[i] as RateLimitAlgorithm);
    for (const lane of this.#lanes) lane.retain(live);
  }

  /** The lane whose front is earliest, when it is no later than the heap's top (or the heap is empty). */
  #earliestLane(): Lane | undefined {
    let earliest: Lane | undefined;
    let first = this.#at.length > 0 ? (this.#at[0] as number) : Infinity;
    for (const lane of this.#lanes) {
      if (lane.count > 0 && (lane.at[lane.head] as number) <= first) {
        earliest = lane;
        first = lane.at[lane.head] as number;
      }
    }
    return earliest;
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

/** An entry taken out of the heap. */
interface Popped {
  at: number;
  key: string;
  state: RateLimitAlgorithm;
}

/**
 * Entries in time order, in a ring buffer that doubles when full: `count` entries from `head`.
 * `IdleHeap` reads the front's time in place (`at[head]`): returned by a method, a time was boxed in
 * a heap number, 48 B of allocation per flood call.
 */
class Lane {
  count = 0;
  head = 0;
  /** The back's `at`, once something was pushed. */
  last = -Infinity;
  at = new Float64Array(FIRST_CAPACITY);
  #keys = new Array<string | undefined>(FIRST_CAPACITY);
  #states = new Array<RateLimitAlgorithm | undefined>(FIRST_CAPACITY);

  /** Adds an entry at the back; `at` is no earlier than `last`. */
  push(at: number, key: string, state: RateLimitAlgorithm): void {
    if (this.count === this.at.length) this.#rebuild(2 * this.count, () => true);
    const i = (this.head + this.count++) & (this.at.length - 1);
    this.at[i] = this.last = at;
    this.#keys[i] = key;
    this.#states[i] = state;
  }

  /** Removes the front entry into `into`; only when not empty. */
  shift(into: Popped): void {
    const head = this.head;
    into.at = this.at[head] as number;
    into.key = this.#keys[head] as string;
    into.state = this.#states[head] as RateLimitAlgorithm;
    this.#keys[head] = this.#states[head] = undefined; // the slot does not keep a reclaimed state alive
    this.head = (head + 1) & (this.at.length - 1);
    this.count--;
  }

  /** Keeps the entries `live` accepts, in the same order. */
  retain(live: (key: string, state: RateLimitAlgorithm) => boolean): void {
    this.#rebuild(this.at.length, live);
  }

  /** Moves the entries `live` accepts, in order, to the start of new arrays of `capacity` slots. */
  #rebuild(capacity: number, live: (key: string, state: RateLimitAlgorithm) => boolean): void {
    const at = new Float64Array(capacity);
    const keys = new Array<string | undefined>(capacity);
    const states = new Array<RateLimitAlgorithm | undefined>(capacity);
    let kept = 0;
    for (let i = 0; i < this.count; i++) {
      const from = (this.head + i) & (this.at.length - 1);
      const key = this.#keys[from] as string;
      const state = this.#states[from] as RateLimitAlgorithm;
      if (!live(key, state)) continue;
      at[kept] = this.at[from] as number;
      keys[kept] = key;
      states[kept++] = state;
    }
    this.at = at;
    this.#keys = keys;
    this.#states = states;
    this.head = 0;
    this.count = kept;
  }
}
