import type { RateLimitAlgorithm } from '../algorithms/algorithm';
import { type Decision, degrade, reject } from '../core/decision';
import { typeError } from '../core/errors';
import { describe } from '../core/validate';
import { carryOver } from './carry-over';
import { ShardedMap } from './sharded-map';

type Factory = (key: string) => RateLimitAlgorithm;

/**
 * Entries examined each time a new key is stored. Two is the fewest that keep a table within twice
 * its active keys (the README's claim, tested in test/limiter/flood.test.ts): new keys arriving
 * steadily, each active for a second, kept 1.5x the active keys resident with two; with one the
 * table had reached 4.4x and was still growing.
 *
 * Under a flood of new keys into a full table, the same sweep is what admits newcomers, and most of
 * what a flood call costs beyond a resident key's (bench/flood.ts, same runs, per entry count:
 * 0: 1.6-1.7x a steady call, 17% of newcomers admitted; 1: 2.1-2.2x, 35%; 2: 2.3-2.6x, 46%; 4: 2.9x, 59%).
 */
const SWEEP_PER_NEW_KEY = 2;
/** Entries examined, at most, to find room for a new key in a full table; a caller never waits on a full sweep. */
const SWEEP_WHEN_FULL = 32;

/**
 * The resident keys of a keyed limiter, reclaimed a few at a time as new keys arrive, and carried
 * over to a new rule a few at a time after a reconfiguration.
 *
 * A reconfiguration does not touch any state: it sets the current map aside as `previous`. A key
 * found there is carried over to the new factory's state on its first use, and the sweep carries
 * over (or drops, when idle) a few more each time a new key arrives. Every carry-over is measured at
 * the moment of the switch, so the result is the same as converting every key at once.
 */
export class KeyTable {
  /** Keys under the current factory: the only map a resident key's decision reads. */
  #current: ShardedMap<RateLimitAlgorithm>;
  /** Keys from before the last reconfiguration, not yet carried over. */
  #previous: ShardedMap<RateLimitAlgorithm>;
  #factory: Factory;
  /** When the last reconfiguration happened. */
  #switchedAt = 0;
  readonly #maxKeys: number;
  /**
   * Keys someone waits on: kept even when idle, so their line never competes for a slot again. An
   * object rather than a closure: a closure per limiter made the sweep's optimized code deoptimize
   * ("wrong call target") whenever a second limiter swept, and one such call took 8 ms in
   * bench/latency.ts.
   */
  readonly #pinned: { has(key: string): boolean };
  /** The reading at which a search of a full table last found no idle key (see `add`). */
  #fullAt = Number.NaN;
  /**
   * The last key found in `#current`, and its state: a hot key skips the map lookup (one hot key:
   * 1.42-1.58x the floor without, 1.27x with, in the same kind of run). Every removal from
   * `#current` forgets it (`#removed`, `reconfigure`), so it never outlives its entry.
   */
  #lastKey: string | undefined;
  #lastState: RateLimitAlgorithm | undefined;

  constructor(factory: Factory, maxKeys: number, pinned: { has(key: string): boolean }) {
    this.#factory = factory;
    this.#maxKeys = maxKeys;
    this.#pinned = pinned;
    this.#current = new ShardedMap(maxKeys);
    this.#previous = new ShardedMap(maxKeys);
  }

  get size(): number {
    return this.#current.size + this.#previous.size;
  }

  /** The state of a key under the current factory, if resident. */
  get(key: string): RateLimitAlgorithm | undefined {
    if (key === this.#lastKey) return this.#lastState;
    const state = this.#current.get(key);
    if (state !== undefined) {
      this.#lastKey = key;
      this.#lastState = state;
    }
    return state;
  }

  /** The state of a key resident from before the last reconfiguration, carried over now. */
  carried(key: string): RateLimitAlgorithm | undefined {
    const old = this.#previous.size === 0 ? undefined : this.#previous.get(key);
    return old === undefined ? undefined : this.#carry(key, old);
  }

  /** A fresh state for a key, not stored. */
  create(key: string): RateLimitAlgorithm {
    return this.#factory(key);
  }

  /** Stores a new key's state after reclaiming a few idle keys; false when the table is full of active keys. */
  add(key: string, state: RateLimitAlgorithm, now: number): boolean {
    this.#sweep(now, SWEEP_PER_NEW_KEY);
    // A full table is searched at most once per clock reading. Under a flood of new keys, a search
    // per refused key made each call cost 5.3x a resident key's (bench/flood.ts); once per reading,
    // 2.7x. Reclaiming goes on meanwhile through the per-new-key sweep above, so an idle key missed
    // now is found a little later; a table of up to 32 keys is searched whole each time it is searched.
    if (this.size >= this.#maxKeys && now !== this.#fullAt) {
      this.#sweep(now, SWEEP_WHEN_FULL, this.#maxKeys - 1);
      if (this.size >= this.#maxKeys) this.#fullAt = now;
    }
    if (this.size >= this.#maxKeys) return false;
    this.#current.set(key, state);
    return true;
  }

  /** Switches to a new factory at `now`; keys are carried over lazily (see the class comment). */
  reconfigure(factory: Factory, now: number): void {
    // Keys still waiting from an earlier switch are carried over to that switch first, at its time.
    for (const [key, old] of this.#previous) this.#carry(key, old);
    this.#previous = this.#current;
    this.#current = new ShardedMap(this.#maxKeys);
    this.#lastKey = this.#lastState = undefined; // every key left `#current`
    this.#factory = factory;
    this.#switchedAt = now;
  }

  /**
   * Removes every idle key not waited on, in one pass; returns how many. Keys from before the last
   * switch are carried over first (those idle at the switch dropped), so a key that went idle
   * after the switch is judged now under its new state, as a key that arrived after it is.
   */
  evictIdle(now: number): number {
    let removed = 0;
    for (const [key, old] of this.#previous) {
      if (this.#forgettable(key, old, this.#switchedAt)) {
        this.#previous.delete(key);
        removed++;
      } else {
        this.#carry(key, old);
      }
    }
    for (const [key, state] of this.#current) {
      if (this.#forgettable(key, state, now)) {
        this.#current.delete(key);
        this.#removed(key);
        removed++;
      }
    }
    return removed;
  }

  /**
   * Whether a key can be forgotten: idle at `at` and not waited on. A key from before the last switch
   * is judged at the switch, where its carry-over is measured: idle only since, it may still carry
   * spent permits over to a rule with a longer window.
   */
  #forgettable(key: string, state: RateLimitAlgorithm, at: number): boolean {
    return state.isIdle(at) && !this.#pinned.has(key);
  }

  /** Called whenever `key` leaves `#current`: the last key found must not outlive its entry. */
  #removed(key: string): void {
    if (key === this.#lastKey) this.#lastKey = this.#lastState = undefined;
  }

  #carry(key: string, old: RateLimitAlgorithm): RateLimitAlgorithm {
    const fresh = this.#factory(key);
    const state = carryOver(old, fresh, this.#switchedAt) ? fresh : old;
    this.#previous.delete(key);
    this.#current.set(key, state);
    return state;
  }

  /**
   * Examines up to `budget` entries, each map resuming where its last sweep stopped: keys from before
   * a reconfiguration first (dropping those idle at the switch, carrying the rest over), then the
   * current ones (dropping the idle ones). Stops early once no more than `until` keys are left.
   */
  #sweep(now: number, budget: number, until = 0): void {
    for (let i = 0; i < budget && this.size > until; i++) {
      const old = this.#previous.nextEntry();
      if (old !== undefined) {
        const [key, state] = old;
        if (this.#forgettable(key, state, this.#switchedAt)) this.#previous.delete(key);
        else this.#carry(key, state);
        continue;
      }
      const entry = this.#current.nextEntry();
      if (entry === undefined) return;
      const [key, state] = entry;
      if (this.#forgettable(key, state, now)) {
        this.#current.delete(key);
        this.#removed(key);
      }
    }
  }
}

/** Throws a `TypeError` naming `algorithm` unless it is a function. */
export function checkFactory(algorithm: unknown): void {
  if (typeof algorithm !== 'function') {
    throw typeError(`ratekeeper: \`algorithm\` must be a function returning a fresh algorithm, got ${describe(algorithm)}`);
  }
}

/**
 * Refuses a new key because every resident key is active. The retry hint is how long a key
 * emptied now stays active: an upper bound on when a resident key that goes quiet frees its slot.
 */
export function tableFull(fresh: RateLimitAlgorithm, granted: Decision, permits: number, now: number): Decision {
  const { limit } = granted;
  const emptied = permits < limit ? fresh.tryAcquire(now, limit - permits) : granted;
  return degrade(reject(limit, 0, Math.max(1, emptied.resetAfterMs), 0), 'key-table-full');
}
