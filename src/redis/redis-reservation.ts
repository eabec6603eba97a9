import type { Decision } from '../core/decision';
import { integerIn } from '../core/validate';
import { alreadySettled, type AsyncReservation } from '../limiter/reservation';

/**
 * A reservation over a store: granted (or refused) like `tryAcquire`, then settled once through
 * `settle`, which the limiter gives only to a granted reservation (a refusal, or a decision of the
 * outage policy, spent nothing the store could give back).
 */
export class StoreReservation implements AsyncReservation {
  readonly decision: Decision;
  readonly #settle: ((actualPermits: number) => Promise<Decision>) | undefined;
  #settled = false;

  constructor(decision: Decision, settle: ((actualPermits: number) => Promise<Decision>) | undefined) {
    this.decision = decision;
    this.#settle = settle;
  }

  /**
   * The real cost, once, as `Reservation.settle`; the promise rejects with a RangeError for a bad
   * count and with an `ERR_RATEKEEPER_ALREADY_SETTLED` error the second time.
   */
  settle(actualPermits: number): Promise<Decision> {
    try {
      integerIn('actualPermits', actualPermits, 0, Number.MAX_SAFE_INTEGER);
    } catch (error) {
      return Promise.reject(error);
    }
    if (this.#settle === undefined) return Promise.resolve(this.decision);
    if (this.#settled) return Promise.reject(alreadySettled());
    this.#settled = true;
    return this.#settle(actualPermits);
  }

  cancel(): Promise<void> {
    return this.settle(0).then(() => undefined);
  }
}
