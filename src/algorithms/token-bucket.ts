import { allow, reject, type Decision } from '../core/decision';
import { ceilDiv, floorDiv, gcd } from '../core/exact';
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
  readonly perMs: number;
  readonly perToken: number;
  readonly capacity: number;
}

/** A rule in scaled units; the Redis script is given the same numbers, so both decide alike. */
export function scaledUnits(rule: Rule): Plan {
  const { limit, windowMs } = rule;
  const g = Number.isInteger(windowMs) ? gcd(limit, windowMs) : 1;
  return { rule, limit, perMs: limit / g, perToken: windowMs / g, capacity: limit * (windowMs / g) };
}

const planFor = sharedPerRule(scaledUnits);

/**
 * A token bucket: holds up to `limit` tokens, refills `limit / windowMs` per ms, starts full.
 * Allows bursts up to the limit, then a steady rate. Refill is computed lazily from elapsed time;
 * there are no timers.
 *
 * Exact on an integer clock while `limit * windowMs / gcd(limit, windowMs)` stays below 2^53.
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
  private units: number;
  private last = -Infinity;

  constructor(rule: Rule) {
    super();
    this.plan = planFor(rule);
    this.units = this.plan.capacity;
  }

  tryAcquire(nowMs: number, permits = 1): Decision {
    return this.decide(nowMs, permits, true);
  }

  peek(nowMs: number, permits = 1): Decision {
    return this.decide(nowMs, permits, false);
  }

  isIdle(nowMs: number): boolean {
    const elapsed = nowMs > this.last ? nowMs - this.last : 0;
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
}
