import { checkCharge, type Receipt } from '../algorithms/accounting';
import type { AccountingAlgorithm, PeekableAlgorithm, RateLimitAlgorithm } from '../algorithms/algorithm';
import { type Clock, systemClock } from '../core/clock';
import { type Decision, type Rejected, reject } from '../core/decision';
import { typeError } from '../core/errors';
import { Closable } from '../core/symbols';
import { checkPermits, checkReading, checkString, describe, finiteNumber, integerIn } from '../core/validate';
import type { AcquireOptions } from './acquire-options';
import { KeyBlocks, KeyPins, MAX_BLOCK_MS } from './key-blocks';
import { checkFactory, KeyTable, tableFull } from './key-table';
import { KeyReservation, type Ledger, type Reservation } from './reservation';
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
  /**
   * The most callers that may wait in `acquire` on one key at once. One more is answered at once
   * with the key's refusal marked `degraded: 'queue-full'`, instead of joining the line.
   * @default Infinity
   */
  maxWaiters?: number | undefined;
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
  readonly #blocks = new KeyBlocks();
  /** False until the first `block`: until then no call looks at blocks. */
  #mayBlock = false;
  readonly #ledger: Ledger = { settle: (key, state, receipt, reserved, actual) => this.#settle(key, state, receipt, reserved, actual) };
  #latest = -Infinity;

  constructor(options: KeyedRateLimiterOptions) {
    super();
    if (options === null || typeof options !== 'object') {
      throw typeError(`ratekeeper: KeyedRateLimiter options must be an object, got ${describe(options)}`);
    }
    const { algorithm, clock = systemClock, maxKeys = Infinity, maxWaiters } = options;
    checkFactory(algorithm);
    if (clock === null || typeof clock !== 'object' || typeof clock.now !== 'function') {
      throw typeError(`ratekeeper: \`clock\` must be an object with a now() method, got ${describe(clock)}`);
    }
    if (maxKeys !== Infinity) integerIn('maxKeys', maxKeys, 1, Number.MAX_SAFE_INTEGER);
    this.#clock = clock;
    this.#maxKeys = maxKeys;
    this.#waiting = new WaitQueue((key, permits) => this.tryAcquire(key, permits), schedulerFor(clock), (key, permits) => this.#standing(key, permits), {
      maxWaiters,
    });
    this.#table = new KeyTable(algorithm, maxKeys, new KeyPins(this.#waiting, this.#blocks));
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
   * `tryAcquire` once a key has been blocked: the first `block` puts it in place of the plain one
   * (see `block`), so a limiter that never blocks pays nothing for blocks. Checking a flag on every
   * call cost a hot key measurably (bench/HISTORY.md): the branch alone was enough to change what V8
   * inlined.
   */
  #tryAcquireUnlessBlocked(key: string, permits = 1): Decision {
    const now = this.#read(this.#clock.now());
    const refusal = this.#whileBlocked(key, permits, now);
    if (refusal !== undefined) return refusal;
    const state = this.#table.get(key);
    if (state !== undefined) return state.tryAcquire(now, permits);
    return this.#admit(key, permits, now);
  }

  /**
   * What `tryAcquire(key, permits)` would answer now (a block included, and the `'key-table-full'`
   * refusal of a new key a full table could not store), spending nothing and storing no key.
   * `permits` 0 answers the state now, for a dashboard: `remaining` is the whole permits available
   * now, `resetAfterMs` the time until the key is as new, and `allowed` is false only while the key
   * is blocked, or for a new key the table could not store (that same refusal).
   * @throws as `tryAcquire` does; TypeError when the key's algorithm has no `peek`.
   *
   * @example
   * ```ts
   * import { KeyedRateLimiter, Rule, TokenBucket } from 'ratekeeper';
   * const limiter = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perMinute(60)) });
   * limiter.tryAcquire('user-1', 10);
   * limiter.peek('user-1', 0).remaining; // 50 left now, and nothing spent
   * ```
   */
  peek(key: string, permits = 1): Decision {
    const now = this.#read(this.#clock.now());
    // A resident key without blocks is tryAcquire's path with peek for tryAcquire (a dashboard reads often).
    const resident = this.#mayBlock ? undefined : (this.#table.get(key) as Partial<PeekableAlgorithm> | undefined);
    return resident?.peek?.(now, permits) ?? this.#peekAny(key, permits, now);
  }

  /**
   * Forgets `key`: its state and any block are gone, and every later decision is a never-seen key's.
   * Those waiting on it are tried again at once. Outstanding reservations of the key give nothing back.
   *
   * @example
   * ```ts
   * import { KeyedRateLimiter, Rule, SlidingWindowLog } from 'ratekeeper';
   * const failures = new KeyedRateLimiter({ algorithm: () => new SlidingWindowLog(Rule.perHour(10)) });
   * failures.charge('alice', 3);
   * failures.reset('alice'); // she logged in: her failures no longer count
   * failures.peek('alice', 0).remaining; // 10
   * ```
   */
  reset(key: string): void {
    checkString('key', key);
    this.#table.delete(key);
    this.#blocks.delete(key);
    this.#waiting.wake(key);
  }

  /**
   * Counts `permits` that were already used (a failed login, tokens an upstream consumed): never
   * refused, and `permits` may exceed the limit. What fits is spent exactly as `tryAcquire` would;
   * beyond that the key goes into debt, at most one full limit deep (the rest is forgiven), and is
   * refused until the debt is repaid, with exact `retryAfterMs`. Returns the key's state after, as
   * `peek(key, 0)` would without a block. A new key that finds the table full of active keys is
   * not stored: the charge is lost, and the answer is the `'key-table-full'` refusal (`allowed`
   * false, `remaining` 0), never a grant-shaped answer for a count that was not kept.
   * @throws TypeError for a non-string key or an algorithm without `charge`; RangeError when
   * `permits` is not a positive safe integer.
   *
   * @example
   * ```ts
   * import { KeyedRateLimiter, Rule, FixedWindow } from 'ratekeeper';
   * const limiter = new KeyedRateLimiter({ algorithm: () => new FixedWindow(Rule.perMinute(10)) });
   * limiter.charge('user-1', 14).remaining; // 0: 4 in debt until the minute ends
   * limiter.tryAcquire('user-1').allowed; // false
   * ```
   */
  charge(key: string, permits: number): Decision {
    checkCharge(permits);
    const now = this.#read(this.#clock.now());
    const state = this.#stateOf(key);
    if (state !== undefined) return capable(state, 'charge').charge(now, permits);
    const fresh = capable(this.#fresh(key), 'charge');
    // Room first: a charge that could not be kept must not answer as if it had been.
    if (!this.#table.room(now)) return tableFull(fresh, fresh.peek(now, 0), 0, now);
    const decision = fresh.charge(now, permits);
    this.#table.store(key, fresh, now, decision.resetAfterMs);
    return decision;
  }

  /**
   * Refuses every request of `key` for `durationMs` from now, spending nothing: each refusal's
   * `retryAfterMs` is the longer of the time left and what the key's algorithm alone would say. A
   * blocked key is never reclaimed as idle; a shorter block never shortens a longer one; only
   * `reset` lifts it (no charge, refund or reconfiguration can). `durationMs` is a whole number of
   * ms from 0 to 2^42 (about 139 years).
   *
   * @example
   * ```ts
   * import { KeyedRateLimiter, Rule, TokenBucket } from 'ratekeeper';
   * const limiter = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perMinute(60)) });
   * limiter.block('user-1', 3_600_000);
   * limiter.tryAcquire('user-1').retryAfterMs; // 3600000
   * ```
   */
  block(key: string, durationMs: number): void {
    checkString('key', key);
    integerIn('durationMs', durationMs, 0, MAX_BLOCK_MS);
    const now = this.#read(this.#clock.now());
    if (durationMs === 0) return;
    this.#blocks.add(key, now + durationMs, now);
    if (this.#mayBlock) return;
    this.#mayBlock = true;
    // From now on every decision checks blocks: the instance's own tryAcquire replaces the plain one.
    Object.defineProperty(this, 'tryAcquire', { value: this.#tryAcquireUnlessBlocked.bind(this), writable: true, configurable: true });
  }

  /**
   * Grants (or refuses) `permits` (default 1) now, exactly as `tryAcquire`, for a request whose real
   * cost is known only later: settle the reservation once with that cost. What was not used is given
   * back exactly (only what is still counted: never what time already repaid, never in another
   * window), what was over is charged.
   * @throws as `tryAcquire` does; TypeError when the key's algorithm has no `reserve`.
   *
   * @example
   * ```ts
   * import { KeyedRateLimiter, Rule, TokenBucket } from 'ratekeeper';
   * const tokens = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perMinute(10_000)) });
   * const reservation = tokens.reserve('team-1', 2000);
   * reservation.decision.remaining; // 8000
   * reservation.settle(500).remaining; // 9500: 1500 were not used
   * ```
   */
  reserve(key: string, permits = 1): Reservation {
    const now = this.#read(this.#clock.now());
    if (this.#mayBlock) {
      const refusal = this.#whileBlocked(key, permits, now);
      if (refusal !== undefined) return new KeyReservation(refusal, undefined);
    }
    let state = this.#stateOf(key);
    const stored = state !== undefined;
    state ??= this.#fresh(key);
    const accounts = capable(state, 'reserve');
    const { decision, receipt } = accounts.reserve(now, permits);
    if (receipt === undefined) return new KeyReservation(decision, undefined);
    if (!stored) {
      if (!this.#table.room(now)) return new KeyReservation(tableFull(state, decision, permits, now), undefined);
      this.#table.store(key, state, now, decision.resetAfterMs);
    }
    return new KeyReservation(decision, { ledger: this.#ledger, key, permits, state: accounts, receipt });
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
      const state = (this.#stateOf(key) ?? this.#table.create(key)) as Partial<PeekableAlgorithm>;
      try {
        // peek takes 0 (the state now); a request of 0 is checked against the limit here.
        if (permits === 0 && state.peek !== undefined) checkPermits(0, state.peek(this.#clock.now(), 1).limit);
        state.peek?.(this.#clock.now(), permits);
      } catch (error) {
        return Promise.reject(error);
      }
    }
    const waited = this.#waiting.acquire(key, permits, options);
    // A key waited on is pinned, and a full table stops looking at it: once its line ends, it must look again.
    if (this.#maxKeys !== Infinity) waited.then(this.#lineMayEnd(key), this.#lineMayEnd(key));
    return waited;
  }

  /**
   * Called as an `acquire` ends: if its key's line ended with it, the key can be reclaimed again. At
   * the latest reading, not a new one: a clock that throws here would reject a promise no one holds.
   */
  #lineMayEnd(key: string): () => void {
    return () => {
      if (!this.#waiting.has(key)) this.#table.changed(key, this.#latest);
    };
  }

  /**
   * Switches to a new factory without losing what was spent: each resident key's state is carried
   * over to a fresh state from `algorithm`, as measured now. The permits a key still counts as used
   * (its old limit minus what it has available, debt included) are charged to the new state at this
   * moment, into debt past the new limit, up to its debt bound (twice the limit); composites carry over part by part, each new part taking what the matching
   * old part (same algorithm and limit; with as many parts, else the same algorithm, else the same
   * place) used, or else the most any old part used. Keys are carried over lazily, on first use or as the
   * table is swept, so this call touches no key, except keys an earlier switch has not carried yet:
   * those are carried over first, one pass over them (docs/limiter.md). Waiters are tried
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
   * still active, and the limiter's time is never moved by this call. Blocked keys stay too;
   * expired blocks are forgotten.
   */
  evictIdle(nowMs?: number): number {
    const now = this.#read(this.#clock.now());
    // Checked here, not left to the algorithms: every state is idle at Infinity.
    const at = nowMs === undefined ? now : Math.min(finiteNumber('nowMs', nowMs), now);
    this.#blocks.sweep(at);
    return this.#table.evictIdle(at);
  }

  /**
   * How `key` stands now, spending nothing, for a caller that waits behind others (see
   * `StandingProbe`): a refusal of `permits` is that; when they fit, a request for one more than
   * is available is refused, and its refusal tells the key's remaining and reset now.
   */
  #standing(key: string, permits: number): Rejected | undefined {
    const state = (this.#stateOf(key) ?? this.#table.create(key)) as Partial<PeekableAlgorithm>;
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

  /**
   * `peek` for any key: not resident (nothing is stored), from before a reconfiguration, blocked. A
   * new key answers what `tryAcquire` would: refused as `'key-table-full'` when it could not be stored.
   */
  #peekAny(key: string, permits: number, now: number): Decision {
    const resident = this.#stateOf(key);
    const state = resident ?? this.#fresh(key);
    const decision = capable(state, 'peek').peek(now, permits);
    const blocked = this.#mayBlock ? this.#blocked(key, now, decision) : undefined;
    if (blocked !== undefined) return blocked;
    // The fresh state is not stored: tableFull may spend from it.
    if (resident === undefined && decision.allowed && !this.#table.hasRoom(now)) return tableFull(state, decision, 0, now);
    return decision;
  }

  /** A resident key's state (carried over to the current rule if it was from before a reconfiguration). */
  #stateOf(key: string): RateLimitAlgorithm | undefined {
    return this.#table.get(key) ?? this.#table.carried(key);
  }

  /** A fresh state for a key not resident, not stored. */
  #fresh(key: string): RateLimitAlgorithm {
    checkString('key', key);
    const state = this.#table.create(key);
    checkState(state);
    return state;
  }

  /** The refusal of a blocked key, or undefined when `key` is not blocked now. */
  #whileBlocked(key: string, permits: number, now: number): Decision | undefined {
    if (this.#blocks.until(key, now) === undefined) return undefined;
    const state = this.#stateOf(key) ?? this.#fresh(key);
    // Without peek the algorithm cannot say what it alone would answer without spending: the block alone answers.
    const alone = typeof (state as Partial<PeekableAlgorithm>).peek === 'function' ? (state as PeekableAlgorithm).peek(now, permits) : undefined;
    return this.#blocked(key, now, alone);
  }

  /**
   * What a block makes of the algorithm's own answer: refused, nothing available, retry when both
   * the block and the algorithm allow (its allowance only grows while nothing is granted).
   */
  #blocked(key: string, now: number, alone: Decision | undefined): Decision | undefined {
    const until = this.#blocks.until(key, now);
    if (until === undefined) return undefined;
    const left = Math.ceil(until - now);
    const { limit = 0, retryAfterMs = 0, resetAfterMs = 0 } = alone ?? {};
    return reject(limit, 0, Math.max(left, retryAfterMs), Math.max(left, resetAfterMs));
  }

  /**
   * Settles a reservation: refunds into the state it was granted from, if still the key's; charges
   * any excess. Settled at or past what it reserved, the refund of nothing still releases the receipt,
   * which the key would otherwise keep until the bound voided it.
   */
  #settle(key: string, state: AccountingAlgorithm, receipt: Receipt, reserved: number, actual: number): Decision {
    const now = this.#read(this.#clock.now());
    const current = this.#stateOf(key);
    if (current === state) state.refund(now, receipt, actual < reserved ? reserved - actual : 0);
    if (actual > reserved) return this.charge(key, actual - reserved);
    if (current === state && actual < reserved) {
      this.#table.changed(key, now);
      this.#waiting.wake(key);
    }
    const after = current ?? this.#fresh(key);
    return capable(after, 'charge').peek(now, 0);
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

  #admit(key: string, permits: number, now: number): Decision {
    checkString('key', key);
    const carried = this.#table.carried(key);
    if (carried !== undefined) return carried.tryAcquire(now, permits);
    const state = this.#table.create(key);
    checkState(state);
    // Decide before storing: a bad argument throws here and leaves the table as it was.
    const decision = state.tryAcquire(now, permits);
    if (!decision.allowed) return decision;
    if (!this.#table.room(now)) return tableFull(state, decision, permits, now);
    this.#table.store(key, state, now, decision.resetAfterMs);
    return decision;
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

/**
 * The state as one that keeps accounts, or a `TypeError` naming what `operation` needs: every
 * ratekeeper algorithm has it, a custom one may not.
 */
function capable(state: RateLimitAlgorithm, operation: 'peek' | 'charge' | 'reserve'): AccountingAlgorithm {
  if (typeof (state as Partial<AccountingAlgorithm>)[operation] !== 'function') {
    throw typeError(`ratekeeper: ${operation} needs an algorithm with a ${operation}() method; the factory's algorithm has none`);
  }
  return state as AccountingAlgorithm;
}
