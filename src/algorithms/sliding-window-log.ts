import { allow, reject, type Decision } from '../core/decision';
import { canonicalRule, type Rule } from '../core/rule';
import { Printable } from '../core/symbols';
import { checkPermits, checkTime } from '../core/validate';
import type { PeekableAlgorithm } from './algorithm';

/**
 * A sliding window log: at most `limit` permits in any half-open interval `(t - windowMs, t]`.
 * Each grant is logged with its time and leaves the log at exactly `time + windowMs`.
 * The only algorithm with no boundary effect and no approximation, at the cost of two numbers
 * (16 bytes) per grant in the window, whatever the grant's size.
 *
 * The log is a ring of grants in time order that grows by doubling up to `limit` entries, so
 * expiring old entries never shifts an array. Each entry holds its time and the permits logged
 * up to and including it (a running total), so the permits in any stretch of the log are one
 * subtraction, and the grant a refused request waits for is a binary search.
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
export class SlidingWindowLog extends Printable implements PeekableAlgorithm {
  private readonly rule: Rule;
  private times: number[] = [];
  /** The running total of permits through each grant, in the same slots as `times`. */
  private totals: number[] = [];
  private head = 0;
  private size = 0;
  /** The running total before the oldest grant still logged. */
  private dropped = 0;

  constructor(rule: Rule) {
    super();
    this.rule = canonicalRule(rule);
  }

  tryAcquire(nowMs: number, permits = 1): Decision {
    return this.decide(nowMs, permits, true);
  }

  peek(nowMs: number, permits = 1): Decision {
    return this.decide(nowMs, permits, false);
  }

  isIdle(nowMs: number): boolean {
    return this.size === 0 || this.timeAt(this.size - 1) + this.rule.windowMs <= nowMs;
  }

  /** A summary for logs and `JSON.stringify`: the algorithm and its rule (never the key's state). */
  override toJSON(): { algorithm: string; rule: Rule } {
    return { algorithm: 'sliding-window-log', rule: this.rule };
  }

  /** The one place that decides; it writes only when `spend` is set and the request is allowed. */
  private decide(nowMs: number, permits: number, spend: boolean): Decision {
    const { limit, windowMs } = this.rule;
    checkTime(nowMs);
    checkPermits(permits, limit);
    const newest = this.size > 0 ? this.timeAt(this.size - 1) : -Infinity;
    // A reading earlier than the newest hit counts as no time passing, which keeps the log in order.
    const now = nowMs > newest ? nowMs : newest;
    const expired = this.countUpTo(now - windowMs);
    const base = expired > 0 ? this.totalAt(expired - 1) : this.dropped;
    const live = this.size > 0 ? this.totalAt(this.size - 1) - base : 0;
    if (live + permits > limit) {
      // The request fits once the grant holding the (live + permits - limit)-th live permit has left.
      const leaving = this.timeAt(this.firstReaching(base + live - limit + permits, expired));
      // A hit still in the window may compute as leaving at `now` when its time + windowMs rounds
      // down (fractional readings); it is still there now, so the wait is at least 1 ms.
      const retryAfterMs = Math.max(1, Math.ceil(leaving + windowMs - now));
      return reject(limit, limit - live, retryAfterMs, Math.max(retryAfterMs, Math.ceil(newest + windowMs - now)));
    }
    if (spend) {
      this.drop(expired, base);
      this.append(now, permits);
    }
    return allow(limit, limit - live - permits, Math.ceil(windowMs));
  }

  /** The time of the i-th oldest grant. */
  private timeAt(i: number): number {
    return this.times[(this.head + i) % this.times.length] as number;
  }

  /** The running total through the i-th oldest grant. */
  private totalAt(i: number): number {
    return this.totals[(this.head + i) % this.totals.length] as number;
  }

  /** How many grants were logged at times `<= cutoff`: a binary search, since the log is in time order. */
  private countUpTo(cutoff: number): number {
    let low = 0;
    let high = this.size;
    while (low < high) {
      const mid = (low + high) >>> 1;
      if (this.timeAt(mid) <= cutoff) low = mid + 1;
      else high = mid;
    }
    return low;
  }

  /** The first grant, from the `from`-th on, whose running total reaches `total`. */
  private firstReaching(total: number, from: number): number {
    let low = from;
    let high = this.size - 1;
    while (low < high) {
      const mid = (low + high) >>> 1;
      if (this.totalAt(mid) >= total) high = mid;
      else low = mid + 1;
    }
    return low;
  }

  private drop(count: number, base: number): void {
    this.head = this.size === count ? 0 : (this.head + count) % this.times.length;
    this.size -= count;
    this.dropped = base;
  }

  private append(time: number, permits: number): void {
    if (this.size === 0) this.dropped = 0;
    let last = this.size > 0 ? this.totalAt(this.size - 1) : this.dropped;
    // Totals stay below 2^53, so every sum and difference is exact: the live permits are at most
    // the limit, so counting from the oldest live grant again always makes room.
    if (last > Number.MAX_SAFE_INTEGER - permits) {
      for (let i = 0; i < this.size; i++) this.totals[(this.head + i) % this.totals.length] = this.totalAt(i) - this.dropped;
      last -= this.dropped;
      this.dropped = 0;
    }
    if (this.size === this.times.length) this.grow();
    const slot = (this.head + this.size) % this.times.length;
    this.times[slot] = time;
    this.totals[slot] = last + permits;
    this.size++;
  }

  /** Doubles the ring (at most to the limit: every grant holds at least one permit), copying the log into time order. */
  private grow(): void {
    const capacity = Math.min(this.rule.limit, Math.max(2 * this.times.length, 4));
    const times = new Array<number>(capacity).fill(0);
    const totals = new Array<number>(capacity).fill(0);
    for (let i = 0; i < this.size; i++) {
      times[i] = this.timeAt(i);
      totals[i] = this.totalAt(i);
    }
    this.times = times;
    this.totals = totals;
    this.head = 0;
  }
}
