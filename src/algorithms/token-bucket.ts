import { allow, reject, type Decision } from '../core/decision';
import { ceilDiv, floorDiv, gcd, mulDivMod } from '../core/exact';
import { sharedPerRule, type Rule } from '../core/rule';
import { Printable } from '../core/symbols';
import { checkPermits, checkTime } from '../core/validate';
import type { PeekableAlgorithm } from './algorithm';

// Tokens are counted in scaled units so that refill is whole numbers on an integer clock: with the
// rate limit/windowMs reduced to perMs/perToken, one millisecond adds `perMs` units and one token is
// `perToken` units. perSecond(4) gives 1 unit per ms and 250 units per token, so "0.4 tokens" is
// the integer 100 and no rounding ever decides a request.
export interface Plan {
  /** The rule the plan was made from, for `toJSON`: the scaled units are no one's business. */
  readonly rule: Rule;
  readonly limit: number;
  readonly windowMs: number;
  readonly perMs: number;
  readonly perToken: number;
  /** `limit × perToken`; exact only when not `wide`. */
  readonly capacity: number;
  /**
   * The capacity passes 2^53 (1e9 per day does): the bucket then keeps whole tokens and the units
   * toward the next token apart, each below 2^53, and refills with exact wide products.
   */
  readonly wide: boolean;
}

/** A rule in scaled units; the Redis script is given the same numbers, so both decide alike. */
export function scaledUnits(rule: Rule): Plan {
  const { limit, windowMs } = rule;
  const g = gcd(limit, windowMs);
  const perMs = limit / g;
  const perToken = windowMs / g;
  const capacity = limit * perToken;
  return { rule, limit, windowMs, perMs, perToken, capacity, wide: capacity > Number.MAX_SAFE_INTEGER };
}

const planFor = sharedPerRule(scaledUnits);

/**
 * A token bucket: holds up to `limit` tokens, refills `limit / windowMs` per ms, starts full.
 * Allows bursts up to the limit, then a steady rate. Refill is computed lazily from elapsed time;
 * there are no timers.
 *
 * Exact on an integer clock for every rule: while `limit × windowMs / gcd(limit, windowMs)` stays
 * below 2^53 in one number of scaled units, above it (1e9 per day) in whole tokens plus the units
 * toward the next one, refilled with exact wide products.
 *
 * @example
 * ```ts
 * import { TokenBucket, Rule } from 'ratekeeper';
 * const bucket = new TokenBucket(Rule.perSecond(4));
 * bucket.tryAcquire(0, 4).remaining; // 0
 * bucket.tryAcquire(0).retryAfterMs; // 250
 * ```
 */
export class TokenBucket extends Printable implements PeekableAlgorithm {
  private readonly plan: Plan;
  /** Scaled units left; for a wide plan, whole tokens left. */
  private units: number;
  private last = -Infinity;
  /**
   * For a wide plan only, the units toward the next whole token (below `perToken`). Declared, not
   * initialized: the buckets of every other rule keep two numbers, as before.
   */
  declare private partial: number;

  constructor(rule: Rule) {
    super();
    this.plan = planFor(rule);
    if (this.plan.wide) {
      this.units = this.plan.limit;
      this.partial = 0;
    } else {
      this.units = this.plan.capacity;
    }
  }

  tryAcquire(nowMs: number, permits = 1): Decision {
    return this.plan.wide ? this.decideWide(nowMs, permits, true) : this.decide(nowMs, permits, true);
  }

  peek(nowMs: number, permits = 1): Decision {
    return this.plan.wide ? this.decideWide(nowMs, permits, false) : this.decide(nowMs, permits, false);
  }

  isIdle(nowMs: number): boolean {
    const elapsed = nowMs > this.last ? nowMs - this.last : 0;
    if (this.plan.wide) return this.refilled(elapsed)[0] === this.plan.limit;
    return this.units + elapsed * this.plan.perMs >= this.plan.capacity;
  }

  /** A summary for logs and `JSON.stringify`: the algorithm and its rule (never the key's state). */
  override toJSON(): { algorithm: string; rule: Rule } {
    return { algorithm: 'token-bucket', rule: this.plan.rule };
  }

  /** The one place that decides; it writes only when `spend` is set and the request is allowed. */
  private decide(nowMs: number, permits: number, spend: boolean): Decision {
    const { limit, perMs, perToken, capacity } = this.plan;
    checkTime(nowMs);
    checkPermits(permits, limit);
    // A reading earlier than the last one counts as no time passing.
    const now = nowMs > this.last ? nowMs : this.last;
    const refilled = this.units + (now - this.last) * perMs;
    const units = refilled < capacity ? refilled : capacity;
    const cost = permits * perToken;
    if (units < cost) {
      return reject(limit, floorDiv(units, perToken), ceilDiv(cost - units, perMs), ceilDiv(capacity - units, perMs));
    }
    const left = units - cost;
    if (spend) {
      this.units = left;
      this.last = now;
    }
    return allow(limit, floorDiv(left, perToken), ceilDiv(capacity - left, perMs));
  }

  /** `decide` for a wide plan: whole tokens and the units toward the next, each below 2^53. */
  private decideWide(nowMs: number, permits: number, spend: boolean): Decision {
    const { limit } = this.plan;
    checkTime(nowMs);
    checkPermits(permits, limit);
    const now = nowMs > this.last ? nowMs : this.last;
    const [tokens, partial] = this.refilled(now - this.last);
    if (tokens < permits) {
      return reject(limit, tokens, this.untilTokens(permits, tokens, partial), this.untilTokens(limit, tokens, partial));
    }
    const left = tokens - permits;
    if (spend) {
      this.units = left;
      this.partial = partial;
      this.last = now;
    }
    return allow(limit, left, this.untilTokens(limit, left, partial));
  }

  /** Whole tokens and units toward the next after `elapsed` ms of refill, capped at a full bucket. */
  private refilled(elapsed: number): [number, number] {
    const { limit, windowMs, perMs, perToken } = this.plan;
    // A whole window refills any bucket; below it the quotient is under `limit`, as mulDivMod needs.
    if (this.units === limit || elapsed >= windowMs) return [limit, 0];
    const [more, partial] = mulDivMod(elapsed, perMs, this.partial, perToken);
    return this.units + more >= limit ? [limit, 0] : [this.units + more, partial];
  }

  /** Whole ms until `tokens` (with `partial` units toward the next) reach `wanted`: (wanted - tokens) · perToken - partial units, at perMs a ms. */
  private untilTokens(wanted: number, tokens: number, partial: number): number {
    if (tokens >= wanted) return 0;
    const { perMs, perToken } = this.plan;
    const [q, r] = mulDivMod(wanted - tokens - 1, perToken, perToken - partial, perMs);
    return r > 0 ? q + 1 : q;
  }
}
