import { allow, type Decision, degrade, reject } from '../core/decision';
import { typeError } from '../core/errors';
import { mulDivCeil } from '../core/exact';
import type { Rule } from '../core/rule';
import { describe } from '../core/validate';
import type { AsyncRateLimiter, RateLimiter } from '../limiter/keyed-rate-limiter';
import type { RedisTimeoutError } from './timeout';

/**
 * What to answer while Redis fails or does not answer in time:
 * - `'allow'` (fail open): allowed, as a key never used would be;
 * - `'deny'` (fail closed): refused, as an exhausted token bucket would be, so `retryAfterMs` is
 *   the time the rule takes to earn the permits;
 * - a `RateLimiter`, such as a local `KeyedRateLimiter` with a per-server share of the limit, or an
 *   `AsyncRateLimiter`, such as a second Redis: its decision (a failure of its own fails the call).
 * Either way the decision carries `degraded: 'store-error'` or `'store-timeout'`.
 *
 * @example
 * ```ts
 * import { KeyedRateLimiter, TokenBucket, Rule } from 'ratekeeper';
 * import type { StoreErrorPolicy } from 'ratekeeper/redis';
 * // Four servers: each keeps a quarter of the shared limit while Redis is away.
 * const policy: StoreErrorPolicy = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perSecond(25)) });
 * ```
 */
export type StoreErrorPolicy = 'allow' | 'deny' | RateLimiter | AsyncRateLimiter;

/**
 * Checks the policy once and returns the function that applies it to a failed call. A store's
 * timeout error (Redis's, PostgreSQL's) is told from its other failures by its code.
 */
export function outagePolicy(policy: unknown, rule: Rule): (error: unknown, key: string, permits: number) => Decision | Promise<Decision> {
  const { limit, windowMs } = rule;
  const reason = (error: unknown) => ((error as Partial<RedisTimeoutError> | null)?.code === 'ERR_RATEKEEPER_STORE_TIMEOUT' ? 'store-timeout' : 'store-error');
  if (policy === 'allow') {
    return (error, _key, permits) => degrade(allow(limit, limit - permits, mulDivCeil(permits, windowMs, limit)), reason(error));
  }
  if (policy === 'deny') {
    return (error, _key, permits) => degrade(reject(limit, 0, mulDivCeil(permits, windowMs, limit), Math.ceil(windowMs)), reason(error));
  }
  if (policy !== null && typeof policy === 'object' && typeof (policy as RateLimiter).tryAcquire === 'function') {
    const fallback = policy as RateLimiter | AsyncRateLimiter;
    return (error, key, permits) => {
      const decision = fallback.tryAcquire(key, permits);
      return decision instanceof Promise ? decision.then((d) => degrade(d, reason(error))) : degrade(decision, reason(error));
    };
  }
  throw typeError(
    `ratekeeper: \`onStoreError\` is required and must be 'allow', 'deny' or a RateLimiter to fall back on, got ${describe(policy)}`,
  );
}
