/**
 * Why a decision was reached without the limiter's normal state:
 * - `'key-table-full'`: `maxKeys` keys were resident and none was idle, so a new key was refused.
 * - `'store-error'`: the shared store failed; the outage policy decided.
 * - `'store-timeout'`: the shared store did not answer within `timeoutMs`; the outage policy decided.
 * - `'queue-full'`: `acquire` found `maxWaiters` callers already waiting on the key, and refused at once.
 */
export type DegradedReason = 'key-table-full' | 'store-error' | 'store-timeout' | 'queue-full';

/** A granted request. */
export interface Allowed {
  readonly allowed: true;
  /** The rule's limit. */
  readonly limit: number;
  /** Whole permits still available after this request. */
  readonly remaining: number;
  readonly retryAfterMs: 0;
  /** Whole ms until the key is back to the state of a key never used. */
  readonly resetAfterMs: number;
  /** Present only when the decision was not reached the normal way. */
  readonly degraded?: DegradedReason;
}

/** A refused request. It spent nothing. */
export interface Rejected {
  readonly allowed: false;
  /** The rule's limit. */
  readonly limit: number;
  /** Whole permits available now (fewer than were asked for). */
  readonly remaining: number;
  /**
   * The exact smallest whole number of ms after which the same request would be allowed if nothing
   * else happened meanwhile; at least 1. For a degraded refusal it is the policy's best estimate.
   */
  readonly retryAfterMs: number;
  /** Whole ms until the key is back to the state of a key never used. */
  readonly resetAfterMs: number;
  /** Present only when the decision was not reached the normal way. */
  readonly degraded?: DegradedReason;
}

/**
 * The answer to `tryAcquire`: never a bare boolean, so a refused caller learns exactly when to retry.
 *
 * @example
 * ```ts
 * import { KeyedRateLimiter, TokenBucket, Rule } from 'ratekeeper';
 * const limiter = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perSecond(4)) });
 * const decision = limiter.tryAcquire('user-1');
 * if (!decision.allowed) console.log(`retry in ${decision.retryAfterMs} ms`);
 * ```
 */
export type Decision = Allowed | Rejected;

/** Builds an allowed decision; one shape for every algorithm keeps call sites monomorphic. */
export function allow(limit: number, remaining: number, resetAfterMs: number): Allowed {
  return { allowed: true, limit, remaining, retryAfterMs: 0, resetAfterMs };
}

/** Builds a rejected decision. */
export function reject(limit: number, remaining: number, retryAfterMs: number, resetAfterMs: number): Rejected {
  return { allowed: false, limit, remaining, retryAfterMs, resetAfterMs };
}

/**
 * The refusal of a new key that found every resident key active (`maxKeys` reached): nothing left,
 * and retry once a key that used its whole limit now would be as new (`emptiedResetAfterMs`), an
 * upper bound on when a resident key that goes quiet frees its slot; `resetAfterMs` the same, since
 * no decision has it below `retryAfterMs`. Built as one object, not a rejection and then its
 * degraded copy: a flood of new keys against a full table makes one per refused call.
 */
export function keyTableFull(limit: number, emptiedResetAfterMs: number): Rejected {
  const retryAfterMs = Math.max(1, emptiedResetAfterMs);
  return { allowed: false, limit, remaining: 0, retryAfterMs, resetAfterMs: retryAfterMs, degraded: 'key-table-full' };
}

/**
 * Marks a decision as reached without the limiter's normal state. Its `resetAfterMs` is raised to
 * its `retryAfterMs` where it was below (a fallback limiter of the user's, a queue's wait longer
 * than the refusal it copies): no decision answers a key as new before a request could pass.
 */
export function degrade<D extends Decision>(decision: D, degraded: DegradedReason): D {
  // Spelled out rather than spread: a refused flood of new keys makes one of these per call, and
  // object spread is several times slower (bench/HISTORY.md).
  const { allowed, limit, remaining, retryAfterMs, resetAfterMs } = decision;
  return { allowed, limit, remaining, retryAfterMs, resetAfterMs: resetAfterMs < retryAfterMs ? retryAfterMs : resetAfterMs, degraded } as D;
}
