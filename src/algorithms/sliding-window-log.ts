import { allow, reject, type Decision } from '../core/decision';
import { canonicalRule, type Rule } from '../core/rule';
import { Printable } from '../core/symbols';
import { checkPermits, checkTime } from '../core/validate';
import { checkCharge, DEBT_LIMITS, forgive, forgivenCount, type Receipt, type Reserved, stateNow } from './accounting';
import type { AccountingAlgorithm } from './algorithm';

/** What a log's reservation remembers: the time its entries were logged at. */
interface LogReceipt {
  readonly at: number;
  readonly forgiven: number;
}

/**
 * A sliding window log: at most `limit` permits in any half-open interval `(t - windowMs, t]`.
 * Each granted permit is logged with its time and leaves the log at exactly `time + windowMs`.
 * The only algorithm with no boundary effect and no approximation, at the cost of one number
 * (8 bytes) per permit in the window.
 *
 * The log is a ring of timestamps in time order that grows by doubling up to `limit` entries, so
 * expiring old entries never shifts an array.
 *
 * @example
 * ```ts
 * import { SlidingWindowLog, Rule } from 'ratekeeper';
 * const log = new SlidingWindowLog(Rule.perSecond(2));
 * log.tryAcquire(100);
 * log.tryAcquire(700);
 * log.tryAcquire(800).retryAfterMs; // 300: the hit at 100 leaves at 1100
 * ```
 */
export class SlidingWindowLog extends Printable implements AccountingAlgorithm {
  private readonly rule: Rule;
  private ring: number[] = [];
  private head = 0;
  private size = 0;

  constructor(rule: Rule) {
    super();
    this.rule = canonicalRule(rule);
  }

  tryAcquire(nowMs: number, permits = 1): Decision {
    checkPermits(permits, this.rule.limit);
    return this.decide(nowMs, permits, true);
  }

  peek(nowMs: number, permits = 1): Decision {
    if (permits === 0) return stateNow(this.decide(nowMs, 0, false));
    checkPermits(permits, this.rule.limit);
    return this.decide(nowMs, permits, false);
  }

  /**
   * In debt the log holds more than `limit` live entries (up to twice it), all logged now; a
   * request fits again once enough of them have left, one window later at most.
   */
  charge(nowMs: number, permits: number): Decision {
    checkCharge(permits);
    const { limit, windowMs } = this.rule;
    checkTime(nowMs);
    const now = this.readAt(nowMs);
    const expired = this.countUpTo(now - windowMs);
    const live = this.size - expired;
    const room = (1 + DEBT_LIMITS) * limit - live;
    if (permits > room) forgive(this);
    this.drop(expired);
    if (room > 0) this.append(now, Math.min(permits, room));
    const newest = this.at(this.size - 1);
    return allow(limit, Math.max(0, limit - this.size), Math.ceil(newest + windowMs - now));
  }

  reserve(nowMs: number, permits = 1): Reserved {
    const decision = this.tryAcquire(nowMs, permits);
    if (!decision.allowed) return { decision, receipt: undefined };
    const receipt: LogReceipt = { at: this.at(this.size - 1), forgiven: forgivenCount(this) };
    return { decision, receipt };
  }

  /** Removes up to `permits` entries logged at the reservation's time, while they are in the window. */
  refund(nowMs: number, receipt: Receipt, permits: number): void {
    const { at, forgiven } = receipt as LogReceipt;
    if (forgiven !== forgivenCount(this) || at + this.rule.windowMs <= this.readAt(nowMs)) return;
    // The log is in time order: the entries logged at `at` end just before the first later one.
    const end = this.countUpTo(at);
    let start = end;
    while (start > 0 && end - start < permits && this.at(start - 1) === at) start--;
    const removed = end - start;
    for (let i = end; i < this.size; i++) this.ring[(this.head + i - removed) % this.ring.length] = this.at(i);
    this.size -= removed;
  }

  isIdle(nowMs: number): boolean {
    return this.size === 0 || this.at(this.size - 1) + this.rule.windowMs <= nowMs;
  }

  /** A summary for logs and `JSON.stringify`: the algorithm and its rule (never the key's state). */
  override toJSON(): { algorithm: string; rule: Rule } {
    return { algorithm: 'sliding-window-log', rule: this.rule };
  }

  /** The one place that decides; it writes only when `spend` is set and the request is allowed. */
  private decide(nowMs: number, permits: number, spend: boolean): Decision {
    const { limit, windowMs } = this.rule;
    checkTime(nowMs);
    const newest = this.size > 0 ? this.at(this.size - 1) : -Infinity;
    // A reading earlier than the newest hit counts as no time passing, which keeps the log in order.
    const now = nowMs > newest ? nowMs : newest;
    const expired = this.countUpTo(now - windowMs);
    const live = this.size - expired;
    if (live + permits > limit) {
      // The request fits once the (live + permits - limit)-th live hit has left.
      const leaving = this.at(expired + live + permits - limit - 1);
      return reject(limit, Math.max(0, limit - live), Math.ceil(leaving + windowMs - now), Math.ceil(newest + windowMs - now));
    }
    if (spend) {
      this.drop(expired);
      this.append(now, permits);
    }
    if (permits === 0) return allow(limit, limit - live, live === 0 ? 0 : Math.ceil(newest + windowMs - now));
    return allow(limit, limit - live - permits, Math.ceil(windowMs));
  }

  /** A reading, or the newest logged time when the reading is earlier: no time passing keeps the log in order. */
  private readAt(nowMs: number): number {
    return this.size > 0 && this.at(this.size - 1) > nowMs ? this.at(this.size - 1) : nowMs;
  }

  /** The i-th oldest logged time. */
  private at(i: number): number {
    return this.ring[(this.head + i) % this.ring.length] as number;
  }

  /** How many logged times are `<= cutoff`: a binary search, since the log is in time order. */
  private countUpTo(cutoff: number): number {
    let low = 0;
    let high = this.size;
    while (low < high) {
      const mid = (low + high) >>> 1;
      if (this.at(mid) <= cutoff) low = mid + 1;
      else high = mid;
    }
    return low;
  }

  private drop(count: number): void {
    this.head = this.size === count ? 0 : (this.head + count) % this.ring.length;
    this.size -= count;
  }

  private append(time: number, count: number): void {
    const needed = this.size + count;
    if (needed > this.ring.length) this.grow(needed);
    for (let i = 0; i < count; i++) this.ring[(this.head + this.size + i) % this.ring.length] = time;
    this.size = needed;
  }

  /** Doubles the ring (at least to `needed`, at most to the limit plus the debt bound), copying the log into time order. */
  private grow(needed: number): void {
    const capacity = Math.min((1 + DEBT_LIMITS) * this.rule.limit, Math.max(needed, 2 * this.ring.length, 4));
    const ring = new Array<number>(capacity).fill(0);
    for (let i = 0; i < this.size; i++) ring[i] = this.at(i);
    this.ring = ring;
    this.head = 0;
  }
}
