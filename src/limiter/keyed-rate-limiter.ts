import type { PeekableAlgorithm, RateLimitAlgorithm } from '../algorithms/algorithm';
import { type Clock, systemClock } from '../core/clock';
import { type Decision, type Rejected, reject } from '../core/decision';
import { typeError } from '../core/errors';
import { Closable } from '../core/symbols';
import { checkReading, checkString, describe, finiteNumber, integerIn } from '../core/validate';
import type { AcquireOptions } from './acquire-options';
import { checkFactory, KeyTable, tableFull } from './key-table';
import { type Scheduler, schedulerFor } from './scheduler';
import { WaitQueue } from './wait-queue';

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
  /**
   * Where time comes from; read once per call. When it also sets timers (a `Scheduler`, such as
   * `ManualScheduler` in tests), waits use its timers, so the clock and the timers always agree;
   * otherwise waits use the global `setTimeout`. @default systemClock
   */
  clock?: Clock | Scheduler | undefined;
  /**
   * The most keys kept at once. A new key arriving when the table is full takes the place of an
   * idle key whenever one is resident (found without a search); only when none is idle is it
   * refused with `degraded: 'key-table-full'`. @default Infinity
   */
  maxKeys?: number | undefined;
}

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
export class KeyedRateLimiter extends Closable implements RateLimiter {
  readonly #table: KeyTable;
  readonly #clock: Clock;
  readonly #waiting: WaitQueue;
  readonly #maxKeys: number;
  #latest = -Infinity;

  constructor(options: KeyedRateLimiterOptions) {
    super();
    if (options === null || typeof options !== 'object') {
      throw typeError(`ratekeeper: KeyedRateLimiter options must be an object, got ${describe(options)}`);
    }
    const { algorithm, clock = systemClock, maxKeys = Infinity } = options;
    checkFactory(algorithm);
    if (clock === null || typeof clock !== 'object' || typeof clock.now !== 'function') {
      throw typeError(`ratekeeper: \`clock\` must be an object with a now() method, got ${describe(clock)}`);
    }
    if (maxKeys !== Infinity) integerIn('maxKeys', maxKeys, 1, Number.MAX_SAFE_INTEGER);
    this.#clock = clock;
    this.#maxKeys = maxKeys;
    this.#waiting = new WaitQueue((key, permits) => this.tryAcquire(key, permits), schedulerFor(clock), (key, permits) => this.#standing(key, permits));
    this.#table = new KeyTable(algorithm, maxKeys, this.#waiting);
  }

  /** How many keys are resident. */
  get size(): number {
    return this.#table.size;
  }

  /**
   * Decides a request for `permits` (default 1) by `key`, synchronously. A refusal spends nothing.
   * @throws TypeError when `key` is not a string; RangeError when `permits` is not an integer from 1 to the limit.
   */
  tryAcquire(key: string, permits = 1): Decision {
    const now = this.#read(this.#clock.now());
    const state = this.#table.get(key);
    if (state !== undefined) return state.tryAcquire(now, permits);
    return this.#admit(key, permits, now);
  }

  /**
   * Waits until `permits` (default 1) are granted to `key`, first in first out per key, and resolves
   * with the `Allowed` decision. If the wait would exceed `maxWaitMs` it resolves with the `Rejected`
   * decision instead, as soon as that is known; if `signal` aborts it rejects with `signal.reason`.
   * A waiter holds no permits, so leaving spends nothing and never delays those behind it. Plain
   * `tryAcquire` calls do not queue. Waits use the clock's timers when it has them (a `Scheduler`).
   *
   * @example
   * ```ts
   * import { KeyedRateLimiter, Rule, TokenBucket } from 'ratekeeper';
   * const limiter = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perSecond(2)) });
   * for (let i = 0; i < 4; i++) await limiter.acquire('uploads'); // the last two wait 500 ms each
   * ```
   */
  acquire(key: string, permits = 1, options?: AcquireOptions): Promise<Decision> {
    if (this.#waiting.has(key)) {
      // Behind others, a request larger than the limit would hear so only at its turn: check it now,
      // on a fresh state when the key waits without being resident (its first try found the table full).
      try {
        (this.#stateOf(key) as Partial<PeekableAlgorithm>).peek?.(this.#clock.now(), permits);
      } catch (error) {
        return Promise.reject(error);
      }
    }
    return this.#waiting.acquire(key, permits, options);
  }

  /**
   * Switches to a new factory without losing what was spent: each resident key's state is carried
   * over to a fresh state from `algorithm`, as measured now. The permits a key still counts as used
   * (its old limit minus what it has available) are spent in the new state at this moment, capped
   * at the new limit; composites carry over part by part, each new part taking what the matching
   * old part (same algorithm and limit; with as many parts, else the same algorithm, else the same
   * place) used, or else the most any old part used. Keys are carried over lazily, on first use or as the
   * table is swept, so this call touches no key, except keys an earlier switch has not carried yet:
   * those are carried over first, one pass over them (288 ms for 300 000 keys). Waiters are tried
   * again at once under the new rule. A custom algorithm without `peek` keeps its state until it is idle.
   *
   * @example
   * ```ts
   * import { KeyedRateLimiter, Rule, TokenBucket } from 'ratekeeper';
   * const limiter = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perMinute(10)) });
   * limiter.tryAcquire('user-1', 4);
   * limiter.reconfigure(() => new TokenBucket(Rule.perMinute(100)));
   * limiter.tryAcquire('user-1').remaining; // 95: the 4 spent still count
   * ```
   */
  reconfigure(algorithm: (key: string) => RateLimitAlgorithm): void {
    checkFactory(algorithm);
    this.#table.reconfigure(algorithm, this.#read(this.#clock.now()));
    this.#waiting.wake();
  }

  /**
   * Forgets every key idle at `nowMs` (a full pass over the table) and returns how many were removed.
   * Keys someone waits on stay. Never needed for bounded memory; useful before measuring or shutting down.
   * A `nowMs` ahead of the clock is read as the clock's reading: a key idle only in the future is
   * still active, and the limiter's time is never moved by this call.
   */
  evictIdle(nowMs?: number): number {
    const now = this.#read(this.#clock.now());
    // Checked here, not left to the algorithms: every state is idle at Infinity.
    const at = nowMs === undefined ? now : Math.min(finiteNumber('nowMs', nowMs), now);
    return this.#table.evictIdle(at);
  }

  /**
   * Ends waiting: every `acquire` still waiting rejects with a `ClosedError` (code
   * `ERR_RATEKEEPER_CLOSED`) and spends nothing, its timer is cleared, and later `acquire` calls
   * reject the same way at once, so nothing this limiter set keeps the process alive. `tryAcquire`
   * and the other calls that do not wait keep answering: they hold no timer, and a limiter shut down
   * under requests still in flight should refuse or allow them, not throw. Calling it again does nothing.
   *
   * @example
   * ```ts
   * import { KeyedRateLimiter, Rule, TokenBucket } from 'ratekeeper';
   * {
   *   using limiter = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perSecond(5)) });
   *   limiter.tryAcquire('k');
   * } // closed here, as by limiter.close()
   * ```
   */
  override close(): void {
    this.#waiting.close();
  }

  /** A summary for logs and `JSON.stringify`: resident keys and the bound; never the keys themselves. */
  override toJSON(): { size: number; maxKeys: number } {
    return { size: this.size, maxKeys: this.#maxKeys };
  }

  /**
   * Takes a clock reading, treating one earlier than the latest as no time passing. Keys are
   * reclaimed when idle at the latest reading; a key forgotten then and decided at an earlier
   * reading would otherwise start fresh and be granted what it had already spent.
   */
  #read(reading: number): number {
    // A reading that is no number (a string compares as one), not finite or past 2^53 must never
    // become the latest reading, which every later call would then be held to, nor pass as an earlier one.
    checkReading(reading);
    if (reading < this.#latest) return this.#latest;
    this.#latest = reading;
    return reading;
  }

  /**
   * How `key` stands now, spending nothing, for a caller that waits behind others (see
   * `StandingProbe`): a refusal of `permits` is that; when they fit, a request for one more than
   * is available is refused, and its refusal tells the key's remaining and reset now.
   */
  #standing(key: string, permits: number): Rejected | undefined {
    const state = this.#stateOf(key) as Partial<PeekableAlgorithm>;
    if (typeof state.peek !== 'function') return undefined;
    const now = this.#read(this.#clock.now());
    const decision = state.peek(now, permits);
    if (!decision.allowed) return decision;
    const { limit, remaining, resetAfterMs } = decision;
    const available = remaining + permits;
    if (available === limit) return reject(limit, available, 0, 0);
    try {
      const more = state.peek(now, available + 1);
      return reject(limit, available, 0, more.resetAfterMs);
    } catch {
      // A composite's binding limit may exceed its smallest part's: the reset after this request is the nearest known.
      return reject(limit, available, 0, resetAfterMs);
    }
  }

  /** The state a key is decided by now: resident, carried over from before a switch, or fresh (not stored). */
  #stateOf(key: string): RateLimitAlgorithm {
    return this.#table.get(key) ?? this.#table.carried(key) ?? this.#table.create(key);
  }

  #admit(key: string, permits: number, now: number): Decision {
    checkString('key', key);
    const carried = this.#table.carried(key);
    if (carried !== undefined) return carried.tryAcquire(now, permits);
    const state = this.#table.create(key);
    checkState(state);
    // Decide before storing: a bad argument throws here and leaves the table as it was.
    const decision = state.tryAcquire(now, permits);
    if (!decision.allowed || this.#table.add(key, state, now, decision.resetAfterMs)) return decision;
    return tableFull(state, decision, permits, now);
  }
}

/**
 * Throws a `TypeError` naming `algorithm` unless the factory made something the table can keep: a
 * state without `isIdle` would fail later, in the sweep of some other key's call.
 */
function checkState(state: unknown): void {
  const s = state as Partial<RateLimitAlgorithm> | null;
  if (s === null || typeof s !== 'object' || typeof s.tryAcquire !== 'function' || typeof s.isIdle !== 'function') {
    throw typeError(`ratekeeper: \`algorithm\` must return an algorithm, got ${describe(state)}`);
  }
}
