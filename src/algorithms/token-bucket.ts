import { allow, reject, type Decision } from '../core/decision';
import { ceilDiv, floorDiv, gcd } from '../core/exact';
import { sharedPerRule, type Rule } from '../core/rule';
import { Printable } from '../core/symbols';
import { checkPermits, checkTime } from '../core/validate';
import { checkCharge, credit, creditedCount, DEBT_LIMITS, forgive, forgivenCount, type Receipt, type Reserved } from './accounting';
import type { AccountingAlgorithm } from './algorithm';
import { refill, until } from './wide-bucket';

/**
 * What a bucket's reservation remembers: the state right after the grant (scaled units, or for a
 * wide plan whole tokens and the units toward the next), when, and the units the key's refunds had
 * given back by then.
 */
interface BucketReceipt {
  readonly at: number;
  readonly units: number;
  readonly partial: number;
  readonly forgiven: number;
  readonly credited: number;
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
   * The units a bucket spans, from a full bucket down to the debt bound, pass 2^53 (a capacity past
   * 2^52; 1e9 per day is one): the bucket then keeps whole tokens and the units toward the next
   * apart, each below 2^53, and refills with exact wide products.
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
  return { rule, limit, windowMs, perMs, perToken, capacity, wide: (1 + DEBT_LIMITS) * capacity > Number.MAX_SAFE_INTEGER };
}

const planFor = sharedPerRule(scaledUnits);

/**
 * A token bucket: holds up to `limit` tokens, refills `limit / windowMs` per ms, starts full.
 * Allows bursts up to the limit, then a steady rate. Refill is computed lazily from elapsed time;
 * there are no timers.
 *
 * Exact on an integer clock for every rule and every operation (debt and refunds included): while
 * the capacity, `limit × windowMs / gcd(limit, windowMs)` scaled units, stays below 2^52 (so that a
 * full bucket down to a full debt spans less than 2^53) in one number of scaled units, above it
 * (1e9 per day) in whole tokens plus the units toward the next one, with exact wide products.
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
  /** Scaled units left; for a wide plan, whole tokens left. Below zero in debt. */
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
    checkTime(nowMs);
    const { limit, perToken, capacity } = this.plan;
    const now = nowMs > this.last ? nowMs : this.last;
    if (this.plan.wide) {
      const [tokens, partial] = refill(this.plan, this.units, this.partial, now - this.last);
      // The bound is -limit whole tokens and no units; compared without forming a number past 2^53.
      const over = permits - DEBT_LIMITS * limit > tokens;
      if (over) forgive(this);
      this.units = over ? -DEBT_LIMITS * limit : tokens - permits;
      this.partial = over ? 0 : partial;
    } else {
      // A product past 2^53 rounds, but only for a charge far beyond the bound, which it stays beyond.
      const wanted = this.unitsAt(now) - permits * perToken;
      const floor = -DEBT_LIMITS * capacity;
      if (wanted < floor) forgive(this);
      this.units = wanted < floor ? floor : wanted;
    }
    this.last = now;
    return this.stateAt(now);
  }

  reserve(nowMs: number, permits = 1): Reserved {
    const decision = this.tryAcquire(nowMs, permits);
    if (!decision.allowed) return { decision, receipt: undefined };
    const receipt: BucketReceipt = { at: this.last, units: this.units, partial: this.partial, forgiven: forgivenCount(this), credited: creditedCount(this) };
    return { decision, receipt };
  }

  /**
   * What is still owed is at most the least deficit since the grant. Only refill and refunds lower a
   * deficit, so that least one is at least the deficit the grant left, less the refill since (spend 5
   * of 10, refill to full, spend 8: a late refund of 5 must give back nothing), less what the key's
   * other refunds gave back since (reserve 5 twice, cancel one, refill 3, spend 8: cancelling the
   * other must give back only 2). A wide plan does not count what refunds gave back: each refund
   * voids the receipts issued before it instead.
   */
  refund(nowMs: number, receipt: Receipt, permits: number): void {
    const { at, units, partial, forgiven, credited } = receipt as BucketReceipt;
    const { limit, perMs, perToken, capacity } = this.plan;
    if (forgiven !== forgivenCount(this)) return;
    const now = nowMs > this.last ? nowMs : this.last;
    if (this.plan.wide) {
      // The grant's state refilled to now: the tokens it is still short of full are what is owed.
      const [granted, grantedPartial] = refill(this.plan, units, partial, now - at);
      const short = limit - granted;
      if (short === 0 || permits === 0) return;
      // All the permits while fewer than that; else the whole deficit, `short` tokens less the units held.
      const [owed, less] = permits < short ? [permits, 0] : [short, grantedPartial];
      let [tokens, part] = refill(this.plan, this.units, this.partial, now - this.last);
      if (tokens > 0 && owed > limit - tokens) [tokens, part] = [limit, 0];
      else [tokens, part] = part < less ? [tokens + owed - 1, part - less + perToken] : [tokens + owed, part - less];
      [this.units, this.partial] = tokens < limit ? [tokens, part] : [limit, 0];
      forgive(this);
    } else {
      const owed = Math.min(permits * perToken, capacity - units - (now - at) * perMs - (creditedCount(this) - credited));
      if (owed <= 0) return;
      const held = this.unitsAt(now);
      const refilled = held + owed;
      this.units = refilled < capacity ? refilled : capacity;
      credit(this, this.units - held);
    }
    this.last = now;
  }

  isIdle(nowMs: number): boolean {
    const elapsed = nowMs > this.last ? nowMs - this.last : 0;
    if (this.plan.wide) return refill(this.plan, this.units, this.partial, elapsed)[0] === this.plan.limit;
    return this.units + elapsed * this.plan.perMs >= this.plan.capacity;
  }

  /**
   * The whole permits this state counts as used at `nowMs`, debt included (rounded up): what
   * `reconfigure` carries over. Read by shape in limiter/carry-over.ts, not part of the public type.
   */
  private usedAt(nowMs: number): number {
    checkTime(nowMs);
    const { limit, perToken, capacity } = this.plan;
    const now = nowMs > this.last ? nowMs : this.last;
    // Wide: the units toward the next token are less than one, so rounded up they count for nothing.
    if (this.plan.wide) return limit - refill(this.plan, this.units, this.partial, now - this.last)[0];
    return ceilDiv(capacity - this.unitsAt(now), perToken);
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
    const [tokens, partial] = refill(this.plan, this.units, this.partial, now - this.last);
    if (tokens < permits) {
      return reject(limit, Math.max(0, tokens), until(this.plan, permits, tokens, partial), until(this.plan, limit, tokens, partial));
    }
    const left = tokens - permits;
    if (spend) {
      this.units = left;
      this.partial = partial;
      this.last = now;
    }
    return allow(limit, left, until(this.plan, limit, left, partial));
  }

  /** The state now, for `peek(nowMs, 0)` and `charge`: whole tokens held (none in debt), and the time until full. */
  private stateAt(nowMs: number): Decision {
    const { limit, perMs, perToken, capacity } = this.plan;
    checkTime(nowMs);
    const now = nowMs > this.last ? nowMs : this.last;
    if (this.plan.wide) {
      const [tokens, partial] = refill(this.plan, this.units, this.partial, now - this.last);
      return allow(limit, Math.max(0, tokens), until(this.plan, limit, tokens, partial));
    }
    const units = this.unitsAt(now);
    return allow(limit, Math.max(0, floorDiv(units, perToken)), ceilDiv(capacity - units, perMs));
  }

  /** The units held at `now` (not earlier than the last write), refill applied up to the capacity. */
  private unitsAt(now: number): number {
    const refilled = this.units + (now - this.last) * this.plan.perMs;
    return refilled < this.plan.capacity ? refilled : this.plan.capacity;
  }
}
