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
