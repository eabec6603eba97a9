import type { Decision } from '../core/decision';

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
   * @throws RangeError as `tryAcquire` does.
   */
  peek(nowMs: number, permits?: number): Decision;
}
