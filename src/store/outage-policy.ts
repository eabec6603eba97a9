import { stateNow } from '../algorithms/accounting';
import { allow, type Decision, degrade, reject } from '../core/decision';
import { typeError } from '../core/errors';
import { mulDivCeil } from '../core/exact';
import type { Rule } from '../core/rule';
import { describe, isThenable } from '../core/validate';
import type { AsyncRateLimiter, RateLimiter } from '../limiter/keyed-rate-limiter';

/**
 * What to answer while the store (Redis, PostgreSQL) fails or does not answer in time:
 * - `'allow'` (fail open): allowed, as a key never used would be;
 * - `'deny'` (fail closed): refused, as an exhausted token bucket would be, so `retryAfterMs` is
 *   the time the rule takes to earn the permits;
 * - a `RateLimiter`, such as a local `KeyedRateLimiter` with a per-server share of the limit, or an
 *   `AsyncRateLimiter`, such as a second Redis: its decision, within `timeoutMs`. If the fallback
 *   fails too (it throws, rejects, or takes longer), the call is answered as `'deny'` would.
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

/** What a limiter's outage policy needs besides the policy itself. */
export interface OutageContext {
  /** How long an async fallback limiter may take to answer. */
  readonly timeoutMs: number;
  /** Hears a fallback limiter's own failure, after the store's error was reported. */
  readonly report: (error: unknown, key: string) => void;
  /** The store's timeout error, for a fallback limiter that took longer than `timeoutMs`. */
  readonly timeoutError: (timeoutMs: number, what: string) => Error;
}

/** Answers one failed call of `permits` on `key`, whose rule is `rule` (see {@link outagePolicy}). */
export type Outage = (error: unknown, key: string, permits: number, rule: Rule) => Decision | Promise<Decision>;

/**
 * Checks the policy once and returns the function that applies it to a failed call. It never
 * throws and its promise never rejects: a fallback limiter that throws, rejects, answers with
 * something that is not a decision, or takes longer than `timeoutMs` to answer is a failure of
 * its own, reported through `report`, and the call is answered as `'deny'` would answer it (a
 * fallback was chosen to hold a limit, so its failure must not open it). A store's timeout error
 * (Redis's, PostgreSQL's) is told from its other failures by its code.
 */
export function outagePolicy(policy: unknown, { timeoutMs, report, timeoutError }: OutageContext): Outage {
  const reason = (error: unknown) => ((error as { code?: unknown } | null)?.code === 'ERR_RATEKEEPER_STORE_TIMEOUT' ? 'store-timeout' : 'store-error');
  const deny = (error: unknown, permits: number, { limit, windowMs }: Rule) =>
    degrade(reject(limit, 0, mulDivCeil(permits, windowMs, limit), windowMs), reason(error));
  if (policy === 'allow') {
    return (error, _key, permits, { limit, windowMs }) => degrade(allow(limit, limit - permits, mulDivCeil(permits, windowMs, limit)), reason(error));
  }
  if (policy === 'deny') return (error, _key, permits, rule) => deny(error, permits, rule);
  if (policy !== null && typeof policy === 'object' && typeof (policy as RateLimiter).tryAcquire === 'function') {
    const fallback = policy as RateLimiter | AsyncRateLimiter;
    return (error, key, permits, rule) => {
      const failed = (fallbackError: unknown) => {
        report(fallbackError, key);
        return deny(error, permits, rule);
      };
      const checked = (decision: unknown) =>
        isDecision(decision) ? degrade(decision, reason(error)) : failed(new TypeError(`ratekeeper: the fallback limiter answered ${describe(decision)}, not a Decision`));
      let answer: unknown;
      try {
        answer = fallback.tryAcquire(key, permits);
      } catch (fallbackError) {
        return failed(fallbackError);
      }
      if (!isThenable(answer)) return checked(answer);
      return new Promise<Decision>((resolve) => {
        // Whichever comes first answers: the fallback (any thenable, not only a native promise) or its timeout.
        let pending = true;
        const settle = (answer: () => Decision) => {
          if (!pending) return;
          pending = false;
          clearTimeout(timer);
          resolve(answer());
        };
        const timer = timeoutMs === Infinity ? undefined : setTimeout(() => settle(() => failed(timeoutError(timeoutMs, 'the fallback limiter'))), timeoutMs);
        (timer as { unref?: () => void } | undefined)?.unref?.();
        Promise.resolve(answer).then(
          (decision) => settle(() => checked(decision)),
          (fallbackError: unknown) => settle(() => failed(fallbackError)),
        );
      });
    };
  }
  throw typeError(
    `ratekeeper: \`onStoreError\` is required and must be 'allow', 'deny' or a RateLimiter to fall back on, got ${describe(policy)}`,
  );
}

/**
 * The outage policy for `peek`, for every store: a fallback limiter is asked its own `peek`, which
 * spends nothing (a fallback without one is answered as `'deny'` would be); `'allow'` and `'deny'`
 * answer a peek as they would the request, and the state now (a peek of 0) as they would a request
 * of one permit, read as the state now: never refused, since no block is known, and under
 * `'deny'` with none left. Built after `outagePolicy` has checked `policy`.
 */
export function peekOutagePolicy(policy: unknown, context: OutageContext): Outage {
  if (policy === 'allow' || policy === 'deny') {
    const answer = outagePolicy(policy, context);
    return (error, key, permits, rule) => {
      if (permits > 0) return answer(error, key, permits, rule);
      const one = answer(error, key, 1, rule) as Decision; // 'allow' and 'deny' answer at once
      return one.allowed ? one : degrade(stateNow(one), one.degraded ?? 'store-error');
    };
  }
  const peek = (policy as { peek?: unknown } | null)?.peek;
  if (typeof peek !== 'function') return outagePolicy('deny', context);
  const peeking = { tryAcquire: (key: string, permits?: number) => (peek as RateLimiter['tryAcquire']).call(policy, key, permits) };
  return outagePolicy(peeking, context);
}

function isDecision(value: unknown): value is Decision {
  return value !== null && typeof value === 'object' && typeof (value as Decision).allowed === 'boolean';
}
