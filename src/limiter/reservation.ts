import type { Receipt } from '../algorithms/accounting';
import type { AccountingAlgorithm } from '../algorithms/algorithm';
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

/** The same, over a store: `settle` and `cancel` return Promises. */
export interface AsyncReservation {
  readonly decision: Decision;
  settle(actualPermits: number): Promise<Decision>;
  cancel(): Promise<void>;
}

/** What a reservation asks of its limiter when it is settled. */
export interface Ledger {
  settle(key: string, state: AccountingAlgorithm, receipt: Receipt, reserved: number, actual: number): Decision;
}

/** The error a second `settle` or `cancel` of a granted reservation throws. */
export function alreadySettled(): Error {
  return coded(new Error('ratekeeper: this reservation is already settled; a reservation settles once'), 'ERR_RATEKEEPER_ALREADY_SETTLED');
}

/** What a granted reservation holds: where to settle, and the receipt of its grant. */
export interface Grant {
  readonly ledger: Ledger;
  readonly key: string;
  readonly permits: number;
  readonly state: AccountingAlgorithm;
  readonly receipt: Receipt;
}

/** A keyed limiter's reservation: settles once, through the limiter, with the receipt of its grant. */
export class KeyReservation implements Reservation {
  readonly decision: Decision;
  readonly #grant: Grant | undefined;
  #settled = false;

  /** @param grant undefined when refused: nothing to give back or charge. */
  constructor(decision: Decision, grant: Grant | undefined) {
    this.decision = decision;
    this.#grant = grant;
  }

  settle(actualPermits: number): Decision {
    integerIn('actualPermits', actualPermits, 0, Number.MAX_SAFE_INTEGER);
    const grant = this.#grant;
    if (grant === undefined) return this.decision;
    if (this.#settled) throw alreadySettled();
    this.#settled = true;
    return grant.ledger.settle(grant.key, grant.state, grant.receipt, grant.permits, actualPermits);
  }

  cancel(): void {
    this.settle(0);
  }
}

/**
 * A store limiter's reservation: settles once, through `settle`, which the limiter gives only to a
 * granted reservation (a refused or degraded one has nothing to give back or charge).
 */
export class AsyncKeyReservation implements AsyncReservation {
  readonly decision: Decision;
  readonly #settle: ((actual: number) => Promise<Decision>) | undefined;
  #settled = false;

  constructor(decision: Decision, settle: ((actual: number) => Promise<Decision>) | undefined) {
    this.decision = decision;
    this.#settle = settle;
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
}
