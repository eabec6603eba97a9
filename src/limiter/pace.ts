import type { Decision, Rejected } from '../core/decision';
import { typeError } from '../core/errors';
import { describe, integerIn } from '../core/validate';
import { type AcquireOptions, checkMaxWait, checkSignal } from './acquire-options';

/**
 * Anything that makes callers wait per key: a `KeyedRateLimiter`, a `RedisRateLimiter`, or your own.
 *
 * @example
 * ```ts
 * import { KeyedRateLimiter, Rule, TokenBucket, type WaitingRateLimiter } from 'ratekeeper';
 * const limiter: WaitingRateLimiter = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perSecond(5)) });
 * ```
 */
export interface WaitingRateLimiter {
  acquire(key: string, permits?: number, options?: AcquireOptions): Promise<Decision>;
}

/** Options of {@link pace}. */
export interface PaceOptions<A extends unknown[]> {
  /** The limiter each call waits on. */
  limiter: WaitingRateLimiter;
  /** The key calls are counted under, or a function of a call's arguments that picks it. */
  key: string | ((...args: A) => string);
  /** Permits each call takes, or a function of a call's arguments (a file's size in MB, say). @default 1 */
  permits?: number | ((...args: A) => number) | undefined;
  /**
   * Stops the calls still waiting: each rejects with `signal.reason` and spends nothing, and later
   * calls reject at once. Calls already running are not interrupted (pass the signal to them too).
   * @default undefined
   */
  signal?: AbortSignal | undefined;
  /** The longest a call may wait, in ms (`Infinity` for no limit); one that would wait longer rejects with a `RateLimitedError`. @default Infinity */
  maxWaitMs?: number | undefined;
}

/**
 * The error a paced call rejects with when it would have to wait longer than `maxWaitMs`, and the
 * `cause` of the error `trpcRateLimit` throws for a refused call. Tell it by its `code`, which holds
 * across the ESM and CommonJS copies of ratekeeper (`instanceof` does not).
 *
 * @example
 * ```ts
 * import type { RateLimitedError } from 'ratekeeper';
 * function retryHint(error: unknown): number | undefined {
 *   const e = error as Partial<RateLimitedError> | null;
 *   return e?.code === 'ERR_RATEKEEPER_RATE_LIMITED' ? e.decision?.retryAfterMs : undefined;
 * }
 * ```
 */
export class RateLimitedError extends Error {
  override readonly name = 'RateLimitedError';
  readonly code = 'ERR_RATEKEEPER_RATE_LIMITED';
  /** The refusal: `retryAfterMs` says when the call could go. */
  readonly decision: Rejected;

  constructor(key: string, decision: Rejected) {
    super(`ratekeeper: rate limited on ${describe(key)}, retry in ${decision.retryAfterMs} ms`);
    this.decision = decision;
  }
}

/**
 * Wraps an async function so that its calls go through a limiter: each call waits for its permits
 * (never failing for being over the limit), calls on a key start in the order they were made, and
 * waiting is timers, never a blocked event loop. For the app that comes back online with two
 * hundred queued uploads.
 *
 * @example
 * ```ts
 * import { KeyedRateLimiter, Rule, TokenBucket, pace } from 'ratekeeper';
 * declare function upload(file: string): Promise<void>;
 * const limiter = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perSecond(5)) });
 * const pacedUpload = pace(upload, { limiter, key: 'uploads' });
 * const queued = Array.from({ length: 200 }, (_, i) => `photo-${i}.jpg`);
 * await Promise.all(queued.map((file) => pacedUpload(file))); // 5 at once, then 5 a second, in order
 * ```
 */
export function pace<A extends unknown[], R>(fn: (...args: A) => R, options: PaceOptions<A>): (...args: A) => Promise<Awaited<R>> {
  if (typeof fn !== 'function') throw typeError(`ratekeeper: \`fn\` must be a function, got ${describe(fn)}`);
  if (options === null || typeof options !== 'object') throw typeError(`ratekeeper: pace options must be an object, got ${describe(options)}`);
  const { limiter, key, permits = 1, signal, maxWaitMs } = options;
  if (limiter === null || typeof limiter !== 'object' || typeof limiter.acquire !== 'function') {
    throw typeError(`ratekeeper: \`limiter\` must have an acquire() method, got ${describe(limiter)}`);
  }
  if (typeof key !== 'string' && typeof key !== 'function') {
    throw typeError(`ratekeeper: \`key\` must be a string or a function returning one, got ${describe(key)}`);
  }
  if (typeof permits !== 'function') integerIn('permits', permits, 1, Number.MAX_SAFE_INTEGER);
  const wait: AcquireOptions = {};
  if (maxWaitMs !== undefined) wait.maxWaitMs = checkMaxWait(maxWaitMs);
  // One listener on the caller's signal for all calls, however many wait (200 queued uploads would
  // otherwise add 200 and trip Node's MaxListenersExceededWarning): it aborts each waiting call's own signal.
  const waiting = new Set<AbortController>();
  checkSignal(signal)?.addEventListener('abort', () => {
    for (const call of waiting) call.abort(signal?.reason);
  }, { once: true });
  return async function paced(this: unknown, ...args: A): Promise<Awaited<R>> {
    // Everything up to the first await runs at call time, so calls join the line in call order.
    const k = typeof key === 'function' ? key(...args) : key;
    const n = typeof permits === 'function' ? permits(...args) : permits;
    let decision: Decision;
    if (signal === undefined) {
      decision = await limiter.acquire(k, n, wait);
    } else {
      const call = new AbortController();
      if (signal.aborted) call.abort(signal.reason);
      waiting.add(call);
      try {
        decision = await limiter.acquire(k, n, { ...wait, signal: call.signal });
      } finally {
        waiting.delete(call);
      }
    }
    if (!decision.allowed) throw new RateLimitedError(k, decision);
    return await fn.apply(this, args);
  };
}
