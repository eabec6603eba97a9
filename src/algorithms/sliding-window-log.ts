import { allow, reject, type Decision } from '../core/decision';
import { canonicalRule, type Rule } from '../core/rule';
import { Printable } from '../core/symbols';
import { checkPermits, checkTime } from '../core/validate';
import type { PeekableAlgorithm } from './algorithm';

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
export class SlidingWindowLog extends Printable implements PeekableAlgorithm {
  private readonly rule: Rule;
  private ring: number[] = [];
  private head = 0;
  private size = 0;

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
    checkPermits(permits, limit);
    const newest = this.size > 0 ? this.at(this.size - 1) : -Infinity;
    // A reading earlier than the newest hit counts as no time passing, which keeps the log in order.
    const now = nowMs > newest ? nowMs : newest;
    const expired = this.countUpTo(now - windowMs);
    const live = this.size - expired;
    if (live + permits > limit) {
      // The request fits once the (live + permits - limit)-th live hit has left.
      const leaving = this.at(expired + live + permits - limit - 1);
      return reject(limit, limit - live, Math.ceil(leaving + windowMs - now), Math.ceil(newest + windowMs - now));
    }
    if (spend) {
      this.drop(expired);
      this.append(now, permits);
    }
    return allow(limit, limit - live - permits, Math.ceil(windowMs));
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

  /** Doubles the ring (at least to `needed`, at most to the limit), copying the log into time order. */
  private grow(needed: number): void {
    const capacity = Math.min(this.rule.limit, Math.max(needed, 2 * this.ring.length, 4));
    const ring = new Array<number>(capacity).fill(0);
    for (let i = 0; i < this.size; i++) ring[i] = this.at(i);
    this.ring = ring;
    this.head = 0;
  }
}
