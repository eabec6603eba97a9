import type { Decision } from '../core/decision';
import { rangeError, typeError } from '../core/errors';
import { describe } from '../core/validate';
import type { AsyncRateLimiter, RateLimiter } from '../limiter/keyed-rate-limiter';
import type { AsyncReservation, Reservation } from '../limiter/reservation';

/**
 * A limiter `rateLimitStore` can stand on: any ratekeeper limiter. `reserve` makes express-rate-limit's
 * `skipFailedRequests` / `skipSuccessfulRequests` work, `reset` its `resetKey`, `peek` its `getKey`;
 * a visible `rule` lets `init` check express-rate-limit's `limit` against it.
 */
export type StoreLimiter = (RateLimiter | AsyncRateLimiter) & {
  reserve?(key: string, permits?: number): Reservation | Promise<AsyncReservation>;
  reset?(key: string): void | Promise<void>;
  peek?(key: string, permits?: number): Decision | Promise<Decision>;
  readonly rule?: { readonly limit: number } | undefined;
};

/** What express-rate-limit (7 or 8) hands its store's `init`: the options this store reads. */
export interface StoreInitOptions {
  readonly limit?: number | ((...args: never[]) => unknown) | undefined;
  readonly skipFailedRequests?: boolean | undefined;
  readonly skipSuccessfulRequests?: boolean | undefined;
}

/** A key's count as express-rate-limit reads it. */
export interface StoreHits {
  readonly totalHits: number;
  readonly resetTime: Date;
}

/** An express-rate-limit `Store` (v7 and v8), declared here so that no express-rate-limit import is needed. */
export interface ExpressRateLimitStore {
  /** Each store is this store's own: the keys are counted in its limiter, not shared by name. */
  readonly localKeys: true;
  init(options: StoreInitOptions): void;
  increment(key: string): Promise<StoreHits>;
  decrement(key: string): Promise<void>;
  resetKey(key: string): Promise<void>;
  get(key: string): Promise<StoreHits | undefined>;
}

/** What is still open on one key: the grants a `decrement` may give back, and the refusals whose `decrement` must give nothing. */
interface Pending {
  readonly grants: { readonly reservation: Reservation | AsyncReservation; readonly until: number }[];
  /** Refused increments whose `decrement` has not come yet. */
  refusals: number;
  /** Date.now() after which the refusals' decrements can no longer come (express-rate-limit 8) and they are forgotten. */
  refusalsUntil: number;
}

/**
 * An express-rate-limit `Store` over a ratekeeper limiter: express-rate-limit keeps its options,
 * handler and headers; the limiter decides. Make one per `rateLimit(...)` call (express-rate-limit
 * refuses a store shared by two). A refused request spends nothing and `resetTime` is the exact
 * retry; a grant reports `limit - remaining` hits, a refusal `limit + 1`.
 *
 * - `limit`: a number must be the limiter's (checked at `init` when the limiter shows its `rule`,
 *   as Redis, PostgreSQL and shared limiters do). A function must return the limit the limiter
 *   applies to that request's key: a larger one would let refused requests through.
 * - `skipFailedRequests` / `skipSuccessfulRequests` need a limiter with `reserve` (in memory,
 *   Redis, PostgreSQL; not the shared one). `decrement` never refunds a refused request (express-rate-limit
 *   calls it for its own 429s too); otherwise it gives back the key's latest request still outstanding.
 * - `resetKey` is the limiter's `reset`; `getKey` its `peek(key, 0)`.
 *
 * @example
 * ```ts
 * import express from 'express';
 * import { rateLimit } from 'express-rate-limit';
 * import { KeyedRateLimiter, Rule, SlidingWindowLog } from 'ratekeeper';
 * import { rateLimitStore } from 'ratekeeper/http';
 * const limiter = new KeyedRateLimiter({ algorithm: () => new SlidingWindowLog(Rule.perMinute(100)) });
 * const app = express();
 * app.use(rateLimit({ windowMs: 60_000, limit: 100, store: rateLimitStore(limiter) }));
 * ```
 */
export function rateLimitStore(limiter: StoreLimiter): ExpressRateLimitStore {
  if (limiter === null || typeof limiter !== 'object' || typeof limiter.tryAcquire !== 'function') {
    throw typeError(`ratekeeper: \`limiter\` must be an object with a tryAcquire(key, permits) method, got ${describe(limiter)}`);
  }
  return new RatekeeperStore(limiter);
}

/** Grants kept per key for `decrement`: past this the oldest is dropped, which can only give back less. */
const MAX_GRANTS = 64;

class RatekeeperStore implements ExpressRateLimitStore {
  readonly localKeys = true;
  readonly #limiter: StoreLimiter;
  /** express-rate-limit's numeric `limit`; undefined for a function (then each decision's). */
  #limit: number | undefined;
  /** Whether `decrement` can be called: only under express-rate-limit's skip options. */
  #refunds = false;
  /** What `init` found wrong: express-rate-limit 8 only logs an error thrown by `init`, so every call rethrows it. */
  #misconfigured: Error | undefined;
  /** Insertion-ordered, oldest touched first: each call sweeps the first entry if nothing in it is live. */
  readonly #pending = new Map<string, Pending>();

  constructor(limiter: StoreLimiter) {
    this.#limiter = limiter;
  }

  init(options: StoreInitOptions): void {
    this.#misconfigured = undefined;
    try {
      this.#configure(options);
    } catch (error) {
      this.#misconfigured = error as Error;
      throw error;
    }
  }

  #configure(options: StoreInitOptions): void {
    const { limit, skipFailedRequests = false, skipSuccessfulRequests = false } = options ?? {};
    this.#limit = undefined;
    if (typeof limit === 'number') {
      // No rule has such a limit; express-rate-limit reads 0 as "refuse everything", which a store cannot say.
      if (!(Number.isSafeInteger(limit) && limit >= 1)) {
        throw rangeError(`ratekeeper: express-rate-limit's \`limit\` must be a safe integer of at least 1, as a rule's limit is, got ${limit}`);
      }
      const ruleLimit: unknown = this.#limiter.rule?.limit;
      if (typeof ruleLimit === 'number' && ruleLimit !== limit) {
        throw rangeError(`ratekeeper: express-rate-limit's \`limit\` must be the limiter's rule limit, ${ruleLimit}, got ${limit}`);
      }
      this.#limit = limit;
    }
    this.#refunds = skipFailedRequests === true || skipSuccessfulRequests === true;
    if (this.#refunds && typeof this.#limiter.reserve !== 'function') {
      throw typeError('ratekeeper: `skipFailedRequests` and `skipSuccessfulRequests` need a limiter with a reserve(key, permits) method, such as a KeyedRateLimiter');
    }
  }

  async increment(key: string): Promise<StoreHits> {
    if (this.#misconfigured !== undefined) throw this.#misconfigured;
    // Times are from when the decision is known: a store's answer may take a round trip.
    if (!this.#refunds) {
      const decision = await this.#limiter.tryAcquire(key);
      return this.#hits(decision, Date.now());
    }
    const reservation = await this.#limiter.reserve!(key);
    const { decision } = reservation;
    const now = Date.now();
    this.#sweep(now);
    const pending = this.#open(key, now);
    if (decision.allowed) {
      // A grant's refund is worth nothing once the key would be as new: kept no longer than that.
      pending.grants.push({ reservation, until: now + decision.resetAfterMs });
      if (pending.grants.length > MAX_GRANTS) pending.grants.shift();
    } else {
      pending.refusals += 1;
      pending.refusalsUntil = Math.max(pending.refusalsUntil, now + decision.resetAfterMs);
    }
    return this.#hits(decision, now);
  }

  async decrement(key: string): Promise<void> {
    if (!this.#refunds) return;
    const now = Date.now();
    const pending = this.#pending.get(key);
    if (pending === undefined) return;
    prune(pending, now);
    if (pending.refusals > 0) pending.refusals -= 1;
    else await pending.grants.pop()?.reservation.cancel();
    // While a store cancelled, a sweep may have dropped this entry and an increment opened a new one.
    if (isEmpty(pending) && this.#pending.get(key) === pending) this.#pending.delete(key);
  }

  async resetKey(key: string): Promise<void> {
    if (typeof this.#limiter.reset !== 'function') throw typeError('ratekeeper: `resetKey` needs a limiter with a reset(key) method, such as a KeyedRateLimiter');
    this.#pending.delete(key);
    await this.#limiter.reset(key);
  }

  async get(key: string): Promise<StoreHits | undefined> {
    if (typeof this.#limiter.peek !== 'function') throw typeError('ratekeeper: `getKey` needs a limiter with a peek(key, permits) method, such as a KeyedRateLimiter');
    const now = Date.now();
    const state = await this.#limiter.peek(key, 0);
    if (state.allowed && state.resetAfterMs === 0) return undefined;
    return { totalHits: Math.max(0, (this.#limit ?? state.limit) - state.remaining), resetTime: new Date(now + (state.allowed ? state.resetAfterMs : state.retryAfterMs)) };
  }

  /**
   * The decision as express-rate-limit reads it: refused exactly when ratekeeper refused, whatever
   * the limits say. Against its own numeric limit, so that a limit that differs from a decision's
   * (a Composite's binding part, a per-key tier) can neither let a refusal through nor refuse a grant.
   */
  #hits(decision: Decision, now: number): StoreHits {
    const limit = this.#limit ?? decision.limit;
    if (!decision.allowed) return { totalHits: limit + 1, resetTime: new Date(now + decision.retryAfterMs) };
    return { totalHits: Math.min(limit, Math.max(1, limit - decision.remaining)), resetTime: new Date(now + decision.resetAfterMs) };
  }

  /** The key's entry, moved to the end of the sweep order. */
  #open(key: string, now: number): Pending {
    const pending = this.#pending.get(key) ?? { grants: [], refusals: 0, refusalsUntil: 0 };
    this.#pending.delete(key);
    prune(pending, now);
    this.#pending.set(key, pending);
    return pending;
  }

  /** Forgets the least recently touched key if nothing of it is live: one step a call bounds memory by the live keys. */
  #sweep(now: number): void {
    for (const [key, pending] of this.#pending) {
      prune(pending, now);
      if (isEmpty(pending)) this.#pending.delete(key);
      return;
    }
  }
}

/**
 * Drops what can no longer matter: refusals past their cut-off, and grants whose key would be as new.
 * A refusal's decrement comes when its 429 has been sent; express-rate-limit 8 sends none after the
 * `resetTime` it was told (the retry time, never later than the key's reset), so none comes after this.
 */
function prune(pending: Pending, now: number): void {
  if (pending.refusals > 0 && now >= pending.refusalsUntil) pending.refusals = 0;
  const { grants } = pending;
  let expired = 0;
  while (expired < grants.length && grants[expired]!.until <= now) expired++;
  if (expired > 0) grants.splice(0, expired);
}

function isEmpty(pending: Pending): boolean {
  return pending.refusals === 0 && pending.grants.length === 0;
}
