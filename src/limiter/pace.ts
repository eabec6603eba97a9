import type { Decision, Rejected } from '../core/decision';
import type { AsyncReservation, Reservation } from './reservation';
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

/**
 * Anything that makes callers wait per key and then holds what it granted until told the work is
 * done: a `KeyedRateLimiter` (its `lease`), or your own.
 *
 * @example
 * ```ts
 * import { Concurrency, KeyedRateLimiter, type LeasingRateLimiter } from 'ratekeeper';
 * const limiter: LeasingRateLimiter = new KeyedRateLimiter({ algorithm: () => new Concurrency(2) });
 * ```
 */
export interface LeasingRateLimiter {
  lease(key: string, permits?: number, options?: AcquireOptions): Promise<Reservation | AsyncReservation>;
}

/** Options of {@link pace}. */
export interface PaceOptions<A extends unknown[]> {
  /**
   * The limiter each call waits on: its `lease` when it has one (each call holds its permits until
   * its promise settles, so an in-flight limit counts the calls running), else its `acquire`.
   */
  limiter: WaitingRateLimiter | LeasingRateLimiter;
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
 * With a limiter that has `lease` (a `KeyedRateLimiter`), each call leases its permits and settles
 * them with what it reserved once its promise settles, resolved or rejected: a rate keeps the cost
 * (the call happened), and an in-flight limit (`Concurrency`) gets its permits back, so
 * `new Concurrency(2)` runs at most two calls at once, as p-limit(2) does. A settle that fails (over
 * a store) rejects the call with the store's error.
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
  const { acquire, lease } = (limiter ?? {}) as Partial<WaitingRateLimiter & LeasingRateLimiter>;
  if (limiter === null || typeof limiter !== 'object' || (typeof acquire !== 'function' && typeof lease !== 'function')) {
    throw typeError(`ratekeeper: \`limiter\` must have an acquire() or a lease() method, got ${describe(limiter)}`);
  }
  // A lease holds its permits until settled: what was granted, with the settle that ends the hold.
  const take = async (k: string, n: number, wait: AcquireOptions): Promise<Held> =>
    typeof lease === 'function' ? await lease.call(limiter, k, n, wait) : { decision: await (acquire as WaitingRateLimiter['acquire']).call(limiter, k, n, wait) };
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
    let held: Held;
    if (signal === undefined) {
      held = await take(k, n, wait);
    } else {
      const call = new AbortController();
      if (signal.aborted) call.abort(signal.reason);
      waiting.add(call);
      try {
        held = await take(k, n, { ...wait, signal: call.signal });
      } finally {
        waiting.delete(call);
      }
    }
    const { decision } = held;
    if (!decision.allowed) throw new RateLimitedError(k, decision);
    try {
      return await fn.apply(this, args);
    } finally {
      // Resolved or rejected, the call happened: its rate cost stays, its in-flight permits come back.
      // Settled with what the lease reserved: `n`, or the default 1 when a permits function gave undefined.
      await held.settle?.(n ?? 1);
    }
  };
}

/** What a paced call was granted: an acquired decision, or a lease to settle when the call is done. */
interface Held {
  readonly decision: Decision;
  settle?(actualPermits: number): unknown;
}
