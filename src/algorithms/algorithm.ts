import type { Decision } from '../core/decision';
import type { Receipt, Reserved } from './accounting';

/**
 * The state of one key under one algorithm. Time is an argument: an algorithm never reads a clock,
 * which is what makes every decision reproducible in a test.
 *
 * @example
 * ```ts
 * import { TokenBucket, Rule, type RateLimitAlgorithm } from 'ratekeeper';
 * const bucket: RateLimitAlgorithm = new TokenBucket(Rule.perSecond(4));
 * bucket.tryAcquire(0).allowed; // true
 * ```
 */
export interface RateLimitAlgorithm {
  /**
   * Decides a request for `permits` (default 1) at `nowMs`. A refusal changes no state.
   * @throws RangeError when `permits` is not an integer from 1 to the rule's limit, or `nowMs` is not finite.
   */
  tryAcquire(nowMs: number, permits?: number): Decision;
  /** True when forgetting this state could not change any future decision. */
  isIdle(nowMs: number): boolean;
}

/**
 * An algorithm that can also tell what it would decide without spending anything: every ratekeeper
 * algorithm is one. A `Composite` is made of these, since deciding all-or-nothing needs every
 * part's answer before any part spends.
 *
 * @example
 * ```ts
 * import { SlidingWindowLog, Rule, type PeekableAlgorithm } from 'ratekeeper';
 * const log: PeekableAlgorithm = new SlidingWindowLog(Rule.perSecond(2));
 * log.peek(0, 2).allowed; // true, and still nothing spent
 * log.tryAcquire(0, 2).allowed; // true
 * ```
 */
export interface PeekableAlgorithm extends RateLimitAlgorithm {
  /**
   * The decision `tryAcquire(nowMs, permits)` would return now, without spending or storing anything.
   * `permits` 0 answers the state now (for a dashboard): `remaining` is the whole permits available
   * now, `resetAfterMs` the time until the state is as new, and it is allowed (even in debt).
   * @throws RangeError as `tryAcquire` does.
   */
  peek(nowMs: number, permits?: number): Decision;
}

/**
 * An algorithm that can also account for costs known only later: every ratekeeper algorithm is
 * one. The keyed limiter's `charge` and `reserve` need it; each algorithm keeps its own rules for
 * debt and refunds in its own file.
 *
 * @example
 * ```ts
 * import { FixedWindow, Rule, type AccountingAlgorithm } from 'ratekeeper';
 * const window: AccountingAlgorithm = new FixedWindow(Rule.perSecond(10));
 * const { decision, receipt } = window.reserve(0, 4);
 * if (receipt !== undefined) window.refund(10, receipt, 3); // only 1 of the 4 was used
 * window.charge(20, 15).remaining; // 0: the key is 6 permits in debt until the window ends
 * ```
 */
export interface AccountingAlgorithm extends PeekableAlgorithm {
  /**
   * Spends `permits` that were already used: never refused. When `tryAcquire` would allow them it
   * leaves exactly the state that grant would; otherwise the key goes into debt, at most one full
   * limit deep (the rest is forgiven). Returns the state after, as `peek(nowMs, 0)` would.
   * @throws RangeError when `permits` is not a positive safe integer (it may exceed the limit).
   */
  charge(nowMs: number, permits: number): Decision;
  /** `tryAcquire`, and when granted a receipt that a later `refund` needs. */
  reserve(nowMs: number, permits?: number): Reserved;
  /**
   * Gives back up to `permits` of a reservation, only the part still counted: never what time has
   * already repaid, never in another window, never raising the state above a fresh one's.
   */
  refund(nowMs: number, receipt: Receipt, permits: number): void;
}
