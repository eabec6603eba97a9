import { allow, reject, type Decision } from '../core/decision';
import { ceilDiv, floorDiv, gcd } from '../core/exact';
import { sharedPerRule, type Rule } from '../core/rule';
import { Printable } from '../core/symbols';
import { checkPermits, checkTime } from '../core/validate';
import { checkCharge, DEBT_LIMITS, MAX_RECEIPTS, type Receipt, type Reserved } from './accounting';
import type { AccountingAlgorithm } from './algorithm';
import { raise, refill, until } from './wide-bucket';

/**
 * A reservation's receipt, and its segment of time: from its grant to the next reservation's grant
 * (the last one's, to now). It holds the highest level the bucket reached over that segment (scaled
 * units; for a wide plan whole tokens and the units toward the next), that is its least deficit:
 * what a refund may give back is bounded by the least deficit since the grant, over this segment and
 * every later one (DESIGN-24 D4). Refill only raises the level between two changes, so the highest
 * level of a segment is the one just before a change, which every change records first (`fold`).
 */
interface BucketReceipt {
  units: number;
  partial: number;
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
  /**
   * Set on the plan of a bucket while it holds receipts of outstanding reservations (the same
   * numbers, another object per rule): its changes then record its level first (see `fold`). A key
   * never reserved pays neither a field nor a lookup for them.
   */
  readonly receipts: boolean;
}

/** A rule in scaled units; the Redis script is given the same numbers, so both decide alike. */
export function scaledUnits(rule: Rule, receipts = false): Plan {
  const { limit, windowMs } = rule;
  const g = gcd(limit, windowMs);
  const perMs = limit / g;
  const perToken = windowMs / g;
  const capacity = limit * perToken;
  return { rule, limit, windowMs, perMs, perToken, capacity, wide: (1 + DEBT_LIMITS) * capacity > Number.MAX_SAFE_INTEGER, receipts };
}

const planFor = sharedPerRule((rule) => scaledUnits(rule));
const receiptsPlanFor = sharedPerRule((rule) => scaledUnits(rule, true));

/**
 * The receipts of each bucket whose plan says it holds some, oldest first, at most `MAX_RECEIPTS`.
 * Kept beside the state, not in it: a field, even one added only when a key first reserves, would
 * grow every key of a limiter whose first keys reserved (V8 sizes a class's objects by its first ones).
 */
const receiptLists = new WeakMap<object, BucketReceipt[]>();

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
  private plan: Plan;
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
      this.fold(tokens, partial, over);
      this.units = over ? -DEBT_LIMITS * limit : tokens - permits;
      this.partial = over ? 0 : partial;
    } else {
      const held = this.unitsAt(now);
      // A product past 2^53 rounds, but only for a charge far beyond the bound, which it stays beyond.
      const wanted = held - permits * perToken;
      const floor = -DEBT_LIMITS * capacity;
      this.fold(held, 0, wanted < floor);
      this.units = wanted < floor ? floor : wanted;
    }
    this.last = now;
    return this.stateAt(now);
  }

  reserve(nowMs: number, permits = 1): Reserved {
    const decision = this.tryAcquire(nowMs, permits);
    if (!decision.allowed) return { decision, receipt: undefined };
    const receipt: BucketReceipt = { units: this.units, partial: this.plan.wide ? this.partial : 0 };
    if (!this.plan.receipts) {
      receiptLists.set(this, []);
      this.plan = receiptsPlanFor(this.plan.rule);
    }
    const receipts = receiptLists.get(this) as BucketReceipt[];
    // Reservations never settled must not grow a key without bound: the oldest receipt goes, and its refund gives nothing.
    if (receipts.push(receipt) > MAX_RECEIPTS) receipts.shift();
    return { decision, receipt };
  }

  /**
   * Gives back what a twin that never reserved these permits would hold more: `permits`, at most
   * the least deficit since the grant (refill may have repaid the rest, and the key's other refunds
   * lowered it too). Every later receipt's least deficit drops by what was given back, and this
   * receipt's segment joins the one before it. So reservations that overlap, settled in any order,
   * leave the key as the twin that reserved only what each kept. A receipt no longer in the list
   * (voided by the bound, a charge past the debt bound, a full bucket, or settled) gives nothing.
   */
  refund(nowMs: number, receipt: Receipt, permits: number): void {
    const receipts = this.plan.receipts ? receiptLists.get(this) : undefined;
    const index = receipts?.indexOf(receipt as BucketReceipt) ?? -1;
    // Permits that are no number of at least 0 (a direct caller's) would take from the key, not give.
    if (receipts === undefined || index === -1 || !(permits >= 0)) return;
    const now = nowMs > this.last ? nowMs : this.last;
    if (this.plan.wide) [this.units, this.partial] = refill(this.plan, this.units, this.partial, now - this.last);
    else this.units = this.unitsAt(now);
    this.last = now;
    this.fold(this.units, this.plan.wide ? this.partial : 0);
    if (!this.plan.receipts) return;
    let top = receipts[index] as BucketReceipt;
    for (let k = index + 1; k < receipts.length; k++) {
      const later = receipts[k] as BucketReceipt;
      if (above(later.units, later.partial, top)) top = later;
    }
    const { units, partial } = top;
    if (this.plan.wide) {
      [this.units, this.partial] = raise(this.plan, this.units, this.partial, permits, units, partial);
      for (let k = index; k < receipts.length; k++) {
        const later = receipts[k] as BucketReceipt;
        [later.units, later.partial] = raise(this.plan, later.units, later.partial, permits, units, partial);
      }
    } else {
      const given = Math.min(permits * this.plan.perToken, this.plan.capacity - units);
      this.units += given;
      for (let k = index; k < receipts.length; k++) (receipts[k] as BucketReceipt).units += given;
    }
    const [settled] = receipts.splice(index, 1) as [BucketReceipt];
    const previous = receipts[index - 1];
    if (previous !== undefined && above(settled.units, settled.partial, previous)) [previous.units, previous.partial] = [settled.units, settled.partial];
    if (receipts.length === 0) this.release();
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
    const { limit, perMs, perToken, capacity, receipts } = this.plan;
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
      if (receipts) this.fold(units, 0);
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
      if (this.plan.receipts) this.fold(tokens, partial);
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

  /**
   * Every change of the level at a moment first records the level reached by then (`units`,
   * `partial`: refilled to that moment) as the last receipt's segment's highest if it is. A full
   * bucket, or a charge past the debt bound (`voids`), leaves no receipt anything to give back: all go.
   */
  private fold(units: number, partial: number, voids = false): void {
    if (!this.plan.receipts) return;
    if (voids || units === (this.plan.wide ? this.plan.limit : this.plan.capacity)) {
      this.release();
      return;
    }
    const receipts = receiptLists.get(this) as BucketReceipt[];
    const last = receipts[receipts.length - 1] as BucketReceipt;
    if (above(units, partial, last)) [last.units, last.partial] = [units, partial];
  }

  /** Drops every receipt: their refunds give nothing, and the plain plan decides again. */
  private release(): void {
    receiptLists.delete(this);
    this.plan = planFor(this.plan.rule);
  }

  /** The units held at `now` (not earlier than the last write), refill applied up to the capacity. */
  private unitsAt(now: number): number {
    const refilled = this.units + (now - this.last) * this.plan.perMs;
    return refilled < this.plan.capacity ? refilled : this.plan.capacity;
  }
}

/** Whether the level `units`, `partial` is above a receipt's (whole tokens first for a wide plan; a narrow one keeps `partial` 0). */
function above(units: number, partial: number, receipt: BucketReceipt): boolean {
  return units > receipt.units || (units === receipt.units && partial > receipt.partial);
}
