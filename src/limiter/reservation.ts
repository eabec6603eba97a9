import type { Receipt } from '../algorithms/accounting';
import type { AccountingAlgorithm } from '../algorithms/algorithm';
import { checkLeaseMs, MAX_LEASE_MS } from '../algorithms/concurrency';
import type { Decision } from '../core/decision';
import { coded } from '../core/errors';
import { integerIn } from '../core/validate';

/**
 * A request whose real cost is known only afterwards: granted (or refused) now like `tryAcquire`,
 * then settled once with what it really cost.
 *
 * @example
 * ```ts
 * import { KeyedRateLimiter, Rule, TokenBucket } from 'ratekeeper';
 * const tokens = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perMinute(10_000)) });
 * const reservation = tokens.reserve('team-1', 1500); // the estimate
 * if (reservation.decision.allowed) {
 *   reservation.settle(900); // the upstream used 900: 600 are given back
 * }
 * ```
 */
export interface Reservation {
  /** Exactly what `tryAcquire(key, permits)` would have answered; a refusal spent nothing. */
  readonly decision: Decision;
  /**
   * The real cost, once: gives back what was not used (only what is still counted) and charges
   * what was over (never refused, as `charge`). Returns the key's state after, as `charge` does;
   * a refused reservation changes nothing and returns its refusal.
   * @throws RangeError when `actualPermits` is not a safe integer of at least 0; an `Error` with
   * code `ERR_RATEKEEPER_ALREADY_SETTLED` when a granted reservation is settled a second time.
   */
  settle(actualPermits: number): Decision;
  /** `settle(0)`: the request did not happen, or must not count. */
  cancel(): void;
}

/**
 * A keyed limiter's reservation (from `reserve` or `lease`), which can also keep its in-flight
 * permits longer.
 */
export interface Lease extends Reservation {
  /**
   * Holds the reservation's in-flight permits (a `Concurrency` part's) for `ms` from now instead of
   * until its lease ends: for a holder that knows it needs longer, such as a streamed reply. Call
   * it again as often as needed. Returns false, changing nothing, when they are no longer held (the
   * lease ended, or the key was reset): they may be someone else's now. A reservation without an
   * in-flight part holds nothing that could end, and returns true; a refused one returns false.
   * `ms` is whole ms from 1 to 2^42, or `Infinity`.
   * @throws RangeError when `ms` is out of range; an `Error` with code `ERR_RATEKEEPER_ALREADY_SETTLED`
   * once the reservation is settled.
   *
   * @example
   * ```ts
   * import { Composite, Concurrency, KeyedRateLimiter, Rule, TokenBucket } from 'ratekeeper';
   * declare function streamReply(onChunk: () => void): Promise<void>;
   * const llm = new KeyedRateLimiter({
   *   algorithm: () => new Composite([new TokenBucket(Rule.perMinute(100)), new Concurrency(2, { leaseMs: 30_000 })]),
   * });
   * const lease = await llm.lease('user-1');
   * try {
   *   // Each chunk proves the holder alive: its permits are held 30 s past the latest one.
   *   await streamReply(() => lease.extend(30_000));
   * } finally {
   *   lease.settle(1);
   * }
   * ```
   */
  extend(ms: number): boolean;
}

/** The same, over a store: `settle` and `cancel` return Promises. */
export interface AsyncReservation {
  readonly decision: Decision;
  settle(actualPermits: number): Promise<Decision>;
  cancel(): Promise<void>;
}

/**
 * A store limiter's reservation (from `reserve` or `lease`), which can also keep its in-flight
 * permits longer: `extend` is `Lease.extend` over a store, resolving once the store has answered.
 *
 * @example
 * ```ts
 * import { Redis } from 'ioredis';
 * import { Concurrency, Rule } from 'ratekeeper';
 * import { RedisRateLimiter } from 'ratekeeper/redis';
 * declare function streamReply(onChunk: () => void): Promise<void>;
 * const llm = new RedisRateLimiter({
 *   client: new Redis(),
 *   algorithm: 'token-bucket',
 *   rule: Rule.perMinute(100),
 *   concurrency: new Concurrency(2, { leaseMs: 30_000 }),
 *   onStoreError: 'deny',
 * });
 * const lease = await llm.lease('user-1');
 * if (lease.decision.allowed) {
 *   try {
 *     await streamReply(() => void lease.extend(30_000)); // held 30 s past the latest chunk
 *   } finally {
 *     await lease.settle(1);
 *   }
 * }
 * ```
 */
export interface AsyncLease extends AsyncReservation {
  /**
   * Holds the in-flight permits for `ms` from now (whole ms from 1 to 2^42: a store keeps the
   * end) instead of until the lease ends. Resolves false, changing nothing, when they are no longer
   * held (the lease ended, the key was reset) or were never granted (a refused or degraded
   * reservation); true for a granted reservation of a limiter without an in-flight limit.
   * Rejects with a RangeError for `ms` out of range, `ERR_RATEKEEPER_ALREADY_SETTLED` once settled,
   * or the store's error.
   */
  extend(ms: number): Promise<boolean>;
}

/** What a reservation asks of its limiter when it is settled. */
export interface Ledger {
  settle(key: string, state: AccountingAlgorithm, receipt: Receipt, reserved: number, actual: number): Decision;
  extend(key: string, state: AccountingAlgorithm, receipt: Receipt, ms: number): boolean;
}

/** The error a second `settle` or `cancel` of a granted reservation throws. */
export function alreadySettled(): Error {
  return coded(new Error('ratekeeper: this reservation is already settled; a reservation settles once'), 'ERR_RATEKEEPER_ALREADY_SETTLED');
}

/** A keyed limiter's reservation: settles once, through the limiter, with the receipt of its grant. */
export class KeyReservation implements Lease {
  readonly decision: Decision;
  // What a granted reservation holds (where to settle, and the receipt of its grant), kept in the
  // reservation itself rather than in an object of its own: a line of leases makes one per grant.
  readonly #ledger: Ledger | undefined;
  readonly #key: string;
  readonly #permits: number;
  readonly #state: AccountingAlgorithm | undefined;
  readonly #receipt: Receipt | undefined;
  #settled = false;

  /** @param ledger undefined when refused: nothing to give back or charge. */
  constructor(decision: Decision, ledger: Ledger | undefined, key = '', permits = 0, state?: AccountingAlgorithm, receipt?: Receipt) {
    this.decision = decision;
    this.#ledger = ledger;
    this.#key = key;
    this.#permits = permits;
    this.#state = state;
    this.#receipt = receipt;
  }

  settle(actualPermits: number): Decision {
    integerIn('actualPermits', actualPermits, 0, Number.MAX_SAFE_INTEGER);
    const ledger = this.#ledger;
    if (ledger === undefined) return this.decision;
    if (this.#settled) throw alreadySettled();
    this.#settled = true;
    return ledger.settle(this.#key, this.#state as AccountingAlgorithm, this.#receipt as Receipt, this.#permits, actualPermits);
  }

  cancel(): void {
    this.settle(0);
  }

  extend(ms: number): boolean {
    checkLeaseMs('ms', ms);
    const ledger = this.#ledger;
    if (ledger === undefined) return false;
    if (this.#settled) throw alreadySettled();
    return ledger.extend(this.#key, this.#state as AccountingAlgorithm, this.#receipt as Receipt, ms);
  }
}

/**
 * A store limiter's reservation: settles once, through `settle`, which the limiter gives only to a
 * granted reservation (a refused or degraded one has nothing to give back or charge).
 */
export class AsyncKeyReservation implements AsyncLease {
  readonly decision: Decision;
  readonly #settle: ((actual: number) => Promise<Decision>) | undefined;
  /** Undefined when nothing is held in flight. */
  readonly #extend: ((ms: number) => Promise<boolean>) | undefined;
  #settled = false;

  constructor(decision: Decision, settle: ((actual: number) => Promise<Decision>) | undefined, extend?: (ms: number) => Promise<boolean>) {
    this.decision = decision;
    this.#settle = settle;
    this.#extend = extend;
  }

  async settle(actualPermits: number): Promise<Decision> {
    integerIn('actualPermits', actualPermits, 0, Number.MAX_SAFE_INTEGER);
    if (this.#settle === undefined) return this.decision;
    if (this.#settled) throw alreadySettled();
    // Marked before the store answers: a settle whose reply is lost may still have been applied.
    this.#settled = true;
    return this.#settle(actualPermits);
  }

  async cancel(): Promise<void> {
    await this.settle(0);
  }

  async extend(ms: number): Promise<boolean> {
    integerIn('ms', ms, 1, MAX_LEASE_MS);
    if (this.#settle === undefined) return false;
    if (this.#settled) throw alreadySettled();
    return this.#extend === undefined ? true : this.#extend(ms);
  }
}
