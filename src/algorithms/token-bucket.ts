import { allow, reject, type Decision } from '../core/decision';
import { ceilDiv, floorDiv, gcd, mulDivMod } from '../core/exact';
import { sharedPerRule, type Rule } from '../core/rule';
import { Printable } from '../core/symbols';
import { rangeError } from '../core/errors';
import { checkPermits, checkTime } from '../core/validate';
import { checkCharge, DEBT_LIMITS, forgive, forgivenCount, type Receipt, type Reserved } from './accounting';
import type { AccountingAlgorithm } from './algorithm';

/** What a bucket's reservation remembers: the deficit (in units) right after the grant, and when. */
interface BucketReceipt {
  readonly at: number;
  readonly deficit: number;
  readonly forgiven: number;
}

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
export class TokenBucket extends Printable implements AccountingAlgorithm {
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
    if (permits === 0) return this.stateAt(nowMs);
    return this.plan.wide ? this.decideWide(nowMs, permits, false) : this.decide(nowMs, permits, false);
  }

  /** In debt the units go below zero, down to one full bucket below (`-capacity`); refill repays it. */
  charge(nowMs: number, permits: number): Decision {
    checkCharge(permits);
    this.narrowOnly('charge');
    const { limit, perMs, perToken, capacity } = this.plan;
    checkTime(nowMs);
    const now = nowMs > this.last ? nowMs : this.last;
    const wanted = this.unitsAt(now) - permits * perToken;
    const floor = -DEBT_LIMITS * capacity;
    if (wanted < floor) forgive(this);
    this.units = wanted < floor ? floor : wanted;
    this.last = now;
    return allow(limit, Math.max(0, floorDiv(this.units, perToken)), ceilDiv(capacity - this.units, perMs));
  }

  reserve(nowMs: number, permits = 1): Reserved {
    this.narrowOnly('reserve');
    const decision = this.tryAcquire(nowMs, permits);
    if (!decision.allowed) return { decision, receipt: undefined };
    const receipt: BucketReceipt = { at: this.last, deficit: this.plan.capacity - this.units, forgiven: forgivenCount(this) };
    return { decision, receipt };
  }

  /**
   * The deficit the grant left shrinks by refill whatever else happens, so what is still owed is
   * that deficit less the refill since: giving back more would credit what time already repaid
   * (spend 5 of 10, refill to full, spend 8: a late refund of 5 must give back nothing).
   */
  refund(nowMs: number, receipt: Receipt, permits: number): void {
    const { at, deficit, forgiven } = receipt as BucketReceipt;
    const { perMs, perToken, capacity } = this.plan;
    if (forgiven !== forgivenCount(this)) return;
    const now = nowMs > this.last ? nowMs : this.last;
    const owed = Math.min(permits * perToken, deficit - (now - at) * perMs);
    if (owed <= 0) return;
    const units = this.unitsAt(now) + owed;
    this.units = units < capacity ? units : capacity;
    this.last = now;
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
      return reject(limit, Math.max(0, floorDiv(units, perToken)), ceilDiv(cost - units, perMs), ceilDiv(capacity - units, perMs));
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

  /** The state now, for `peek(nowMs, 0)`: whole tokens held (none in debt), and the time until full. */
  private stateAt(nowMs: number): Decision {
    const { limit, perMs, perToken, capacity } = this.plan;
    checkTime(nowMs);
    const now = nowMs > this.last ? nowMs : this.last;
    if (this.plan.wide) {
      const [tokens, partial] = this.refilled(now - this.last);
      return allow(limit, tokens, this.untilTokens(limit, tokens, partial));
    }
    const units = this.unitsAt(now);
    return allow(limit, Math.max(0, floorDiv(units, perToken)), ceilDiv(capacity - units, perMs));
  }

  /** The units held at `now` (not earlier than the last write), refill applied up to the capacity. */
  private unitsAt(now: number): number {
    const refilled = this.units + (now - this.last) * this.plan.perMs;
    return refilled < this.plan.capacity ? refilled : this.plan.capacity;
  }

  /**
   * Debt and receipts are kept in scaled units, so they need a rule whose capacity in units stays
   * below 2^53 (every rule but the largest: 1e9 per day is past it). Such a rule refuses them plainly.
   */
  private narrowOnly(operation: string): void {
    if (this.plan.wide) {
      throw rangeError(
        `ratekeeper: TokenBucket ${operation} needs limit × windowMs / gcd(limit, windowMs) below 2^53, got ${this.plan.limit} per ${this.plan.windowMs} ms`,
      );
    }
  }
}
