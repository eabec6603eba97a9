import type { RateLimitAlgorithm } from '../algorithms/algorithm';
import { type Clock, systemClock } from '../core/clock';
import { type Decision, degrade, reject } from '../core/decision';
import { describe, integerIn } from '../core/validate';

/**
 * Anything that decides synchronously per key: a `KeyedRateLimiter`, or your own.
 */
export interface RateLimiter {
  tryAcquire(key: string, permits?: number): Decision;
}

/** Anything that decides per key over a store, such as `RedisRateLimiter`. */
export interface AsyncRateLimiter {
  tryAcquire(key: string, permits?: number): Promise<Decision>;
}

/** Options of {@link KeyedRateLimiter}. */
export interface KeyedRateLimiterOptions {
  /**
   * The factory lambda: builds the fresh state of a key the first time it is seen. It gets the key,
   * so tiers can differ per key; swapping the whole fleet's algorithm is a one-line change here.
   */
  algorithm: (key: string) => RateLimitAlgorithm;
  /** Where time comes from; read once per call. @default systemClock */
  clock?: Clock;
  /**
   * The most keys kept at once. A new key arriving when the table is full takes the place of an
   * idle key; when none is idle it is refused with `degraded: 'key-table-full'`. @default Infinity
   */
  maxKeys?: number;
}

/** Entries examined each time a new key is stored: enough to keep the table within about twice its active keys. */
const SWEEP_PER_NEW_KEY = 2;
/** Entries examined, at most, to find room for a new key in a full table; a caller never waits on a full sweep. */
const SWEEP_WHEN_FULL = 32;

/**
 * One independent rate limit per key (user, API key, IP, endpoint), each built by the factory
 * lambda. Idle keys are reclaimed a few at a time as new keys arrive, with no timer per key, and
 * only a key whose state could no longer change any decision is ever forgotten.
 *
 * @example
 * ```ts
 * import { KeyedRateLimiter, TokenBucket, Rule } from 'ratekeeper';
 * const limiter = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perSecond(4)) });
 * const decision = limiter.tryAcquire('user-42');
 * decision.allowed; // true
 * decision.remaining; // 3
 * ```
 */
export class KeyedRateLimiter implements RateLimiter {
  readonly #states = new Map<string, RateLimitAlgorithm>();
  readonly #algorithm: (key: string) => RateLimitAlgorithm;
  readonly #clock: Clock;
  readonly #maxKeys: number;
  /** Where reclamation resumes: a live Map iterator survives inserts and deletes. */
  #cursor: Iterator<[string, RateLimitAlgorithm]> | undefined;

  constructor(options: KeyedRateLimiterOptions) {
    if (options === null || typeof options !== 'object') {
      throw new TypeError(`ratekeeper: KeyedRateLimiter options must be an object, got ${describe(options)}`);
    }
    const { algorithm, clock = systemClock, maxKeys = Infinity } = options;
    if (typeof algorithm !== 'function') {
      throw new TypeError(`ratekeeper: \`algorithm\` must be a function returning a fresh algorithm, got ${describe(algorithm)}`);
    }
    if (clock === null || typeof clock !== 'object' || typeof clock.now !== 'function') {
      throw new TypeError(`ratekeeper: \`clock\` must be an object with a now() method, got ${describe(clock)}`);
    }
    if (maxKeys !== Infinity) integerIn('maxKeys', maxKeys, 1, Number.MAX_SAFE_INTEGER);
    this.#algorithm = algorithm;
    this.#clock = clock;
    this.#maxKeys = maxKeys;
  }

  /** How many keys are resident. */
  get size(): number {
    return this.#states.size;
  }

  /**
   * Decides a request for `permits` (default 1) by `key`, synchronously. A refusal spends nothing.
   * @throws TypeError when `key` is not a string; RangeError when `permits` is not an integer from 1 to the limit.
   */
  tryAcquire(key: string, permits = 1): Decision {
    const now = this.#clock.now();
    const state = this.#states.get(key);
    if (state !== undefined) return state.tryAcquire(now, permits);
    return this.#admit(key, permits, now);
  }

  /**
   * Forgets every idle key now (a full pass over the table) and returns how many were removed.
   * Never needed for bounded memory; useful before measuring or shutting down.
   */
  evictIdle(nowMs: number = this.#clock.now()): number {
    let removed = 0;
    for (const [key, state] of this.#states) {
      if (state.isIdle(nowMs)) {
        this.#states.delete(key);
        removed++;
      }
    }
    return removed;
  }

  #admit(key: string, permits: number, now: number): Decision {
    if (typeof key !== 'string') throw new TypeError(`ratekeeper: \`key\` must be a string, got ${describe(key)}`);
    const state = this.#algorithm(key);
    // Decide before storing: a bad argument throws here and leaves the table as it was.
    const decision = state.tryAcquire(now, permits);
    if (!decision.allowed) return decision;
    this.#sweep(now, SWEEP_PER_NEW_KEY);
    if (this.#states.size >= this.#maxKeys) this.#sweep(now, SWEEP_WHEN_FULL, this.#maxKeys - 1);
    if (this.#states.size >= this.#maxKeys) return this.#tableFull(state, decision, permits, now);
    this.#states.set(key, state);
    return decision;
  }

  /**
   * Examines up to `budget` entries from where the last sweep stopped, removing the idle ones, and
   * stops early once no more than `until` keys are left.
   */
  #sweep(now: number, budget: number, until = 0): void {
    for (let i = 0; i < budget && this.#states.size > until; i++) {
      let step = this.#cursor?.next();
      if (step === undefined || step.done === true) {
        this.#cursor = this.#states.entries();
        step = this.#cursor.next();
        if (step.done === true) return;
      }
      const [key, state] = step.value;
      if (state.isIdle(now)) this.#states.delete(key);
    }
  }

  /**
   * Refuses a new key because every resident key is active. The retry hint is how long a key
   * emptied now stays active: an upper bound on when a resident key that goes quiet frees its slot.
   */
  #tableFull(fresh: RateLimitAlgorithm, granted: Decision, permits: number, now: number): Decision {
    const { limit } = granted;
    const emptied = permits < limit ? fresh.tryAcquire(now, limit - permits) : granted;
    return degrade(reject(limit, 0, Math.max(1, emptied.resetAfterMs), 0), 'key-table-full');
  }
}
