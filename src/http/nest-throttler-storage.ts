import type { Decision } from '../core/decision';
import { typeError } from '../core/errors';
import { ceilDiv } from '../core/exact';
import { Rule } from '../core/rule';
import { describe } from '../core/validate';
import type { AsyncRateLimiter, RateLimiter } from '../limiter/keyed-rate-limiter';
import { assertObject } from './check';

/** What `increment` answers, as @nestjs/throttler's `ThrottlerStorageRecord`: times in whole seconds, rounded up. */
export interface ThrottlerRecord {
  readonly totalHits: number;
  readonly timeToExpire: number;
  readonly isBlocked: boolean;
  readonly timeToBlockExpire: number;
}

/** A @nestjs/throttler `ThrottlerStorage` (v6), declared here so that no Nest import is needed. */
export interface ThrottlerStorageLike {
  increment(key: string, ttl: number, limit: number, blockDuration: number, throttlerName: string): Promise<ThrottlerRecord>;
}

/**
 * Options of {@link throttlerStorage}.
 *
 * @example
 * ```ts
 * import { KeyedRateLimiter, SlidingWindowLog } from 'ratekeeper';
 * import type { ThrottlerStorageOptions } from 'ratekeeper/http';
 * const options: ThrottlerStorageOptions = {
 *   // at most `limit` in any `ttl`, as Nest's own storage counts
 *   limiter: (rule) => new KeyedRateLimiter({ algorithm: () => new SlidingWindowLog(rule) }),
 * };
 * ```
 */
export interface ThrottlerStorageOptions {
  /**
   * Builds the limiter of one throttler and one rule (Nest's `limit` over `ttl` ms, the route's own
   * under `@Throttle`): called once per throttler name and rule, and kept. A Redis or PostgreSQL
   * limiter shares the count between servers; give each throttler and rule its own `name` there.
   * `SlidingWindowLog` keeps the law of Nest's own storage (at most `limit` in any `ttl`).
   */
  limiter: (rule: Rule, throttlerName: string) => RateLimiter | AsyncRateLimiter;
}

/**
 * A @nestjs/throttler `ThrottlerStorage`: Nest's guard, decorators and headers stay; a ratekeeper
 * limiter decides each `increment`. A refused request spends nothing and its `Retry-After` is the
 * exact wait (rounded up to seconds). `blockDuration` is not applied: a refusal lasts exactly as
 * long as the limit says (penalise with the limiter's `block` if you want one). Nest's guard
 * increments several named throttlers one by one, so the earlier ones have spent when a later
 * one refuses.
 *
 * @example
 * ```ts
 * import { ThrottlerModule } from '@nestjs/throttler';
 * import { KeyedRateLimiter, SlidingWindowLog } from 'ratekeeper';
 * import { throttlerStorage } from 'ratekeeper/http';
 * const storage = throttlerStorage({ limiter: (rule) => new KeyedRateLimiter({ algorithm: () => new SlidingWindowLog(rule) }) });
 * ThrottlerModule.forRoot({ throttlers: [{ ttl: 60_000, limit: 100 }], storage });
 * ```
 */
export function throttlerStorage(options: ThrottlerStorageOptions): ThrottlerStorageLike {
  assertObject('throttlerStorage options', options);
  const { limiter } = options;
  if (typeof limiter !== 'function') throw typeError(`ratekeeper: \`limiter\` must be a function of (rule, throttlerName), got ${describe(limiter)}`);
  const limiters = new Map<string, RateLimiter | AsyncRateLimiter>();

  /** The limiter of a throttler and a rule, built on first use. */
  const limiterFor = (throttlerName: string, limit: number, ttl: number): RateLimiter | AsyncRateLimiter => {
    const id = `${limit}/${ttl}/${throttlerName}`;
    let found = limiters.get(id);
    if (found === undefined) {
      found = limiter(new Rule(limit, ttl), throttlerName);
      if (found === null || typeof found !== 'object' || typeof found.tryAcquire !== 'function') {
        throw typeError(`ratekeeper: \`limiter\` must return an object with a tryAcquire(key, permits) method, got ${describe(found)}`);
      }
      limiters.set(id, found);
    }
    return found;
  };

  return {
    async increment(key, ttl, limit, _blockDuration, throttlerName) {
      return record(await limiterFor(throttlerName, limit, ttl).tryAcquire(key), limit);
    },
  };
}

/** The decision as Nest's guard reads it: blocked exactly when refused; headers from `limit - totalHits`. */
function record(decision: Decision, limit: number): ThrottlerRecord {
  const timeToExpire = ceilDiv(decision.resetAfterMs, 1000);
  if (!decision.allowed) return { totalHits: limit + 1, timeToExpire, isBlocked: true, timeToBlockExpire: ceilDiv(decision.retryAfterMs, 1000) };
  return { totalHits: Math.min(limit, Math.max(1, limit - decision.remaining)), timeToExpire, isBlocked: false, timeToBlockExpire: 0 };
}
