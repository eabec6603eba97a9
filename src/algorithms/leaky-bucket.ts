import type { Rule } from '../core/rule';
import { TokenBucket } from './token-bucket';

/**
 * A leaky bucket used as a meter: holds up to `limit`, leaks `limit / windowMs` per ms, starts
 * empty, and refuses a request that would overflow it (it does not queue; use `acquire` to wait).
 *
 * Its water level is exactly the tokens a token bucket has spent, so it decides exactly as
 * `TokenBucket` does; it exists so that code can name the model its authors think in.
 *
 * @example
 * ```ts
 * import { LeakyBucket, Rule } from 'ratekeeper';
 * const meter = new LeakyBucket(Rule.perSecond(10));
 * meter.tryAcquire(0, 10).allowed; // true: the bucket is now full
 * meter.tryAcquire(0).retryAfterMs; // 100: one permit leaks out every 100 ms
 * ```
 */
export class LeakyBucket extends TokenBucket {
  override toJSON(): { algorithm: string; rule: Rule } {
    return { ...super.toJSON(), algorithm: 'leaky-bucket' };
  }
}
