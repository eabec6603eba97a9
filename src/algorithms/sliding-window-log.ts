import { allow, reject, type Decision } from '../core/decision';
import { canonicalRule, type Rule } from '../core/rule';
import { Printable } from '../core/symbols';
import { checkPermits, checkTime } from '../core/validate';
import { checkCharge, forgive, forgivenCount, type Receipt, type Reserved, stateNow, usageBound } from './accounting';
import type { AccountingAlgorithm } from './algorithm';

/** What a log's reservation remembers: the time its grant was logged at. */
interface LogReceipt {
  readonly at: number;
  readonly forgiven: number;
}

/**
 * A sliding window log: at most `limit` permits in any half-open interval `(t - windowMs, t]`.
 * Each grant is logged with its time and leaves the log at exactly `time + windowMs`.
 * The only algorithm with no boundary effect and no approximation, at the cost of two numbers
 * (16 bytes) per grant in the window, whatever the grant's size; grants at one clock reading share
 * one entry, since they leave together.
 *
 * The log is a ring of grants in time order that grows by doubling up to `limit` entries (twice
 * that in debt), so expiring old entries never shifts an array. Each entry holds its time and the
 * permits logged up to and including it (a running total), so the permits in any stretch of the
 * log are one subtraction, and the grant a refused request waits for is a binary search, as
 * expiry is.
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
  /** Pairs, time then the running total of permits through that grant: one array, so a key with few grants stays small. */
  private ring: number[] = [];
  /** Index of the oldest grant, counted in pairs. */
  private head = 0;
  private size = 0;
  /** The running total before the oldest grant still logged. */
  private dropped = 0;

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
   * In debt the log holds more than `limit` live permits (up to twice it, and below 2^53 so the
   * running totals stay exact), the charge logged now as one grant; a request fits again once
   * enough of them have left, one window later at most. Past the bound the oldest permits are
   * forgiven: they would have left first, so a key that spent more is never better off than one
   * that spent less (dropping the charge's own permits instead let the oldest leave and serve it sooner).
   */
  charge(nowMs: number, permits: number): Decision {
    checkCharge(permits);
    const { limit, windowMs } = this.rule;
    checkTime(nowMs);
    const now = this.readAt(nowMs);
    const expired = this.firstAbove(0, now - windowMs, 0);
    const base = expired > 0 ? this.at(expired - 1, 1) : this.dropped;
    const live = this.size > 0 ? this.at(this.size - 1, 1) - base : 0;
    const bound = usageBound(limit);
    const logged = Math.min(permits, bound);
    const kept = Math.min(live, bound - logged);
    if (live + permits > bound) forgive(this);
    // The running total through the last permit forgiven: the grant holding it keeps only what follows.
    const cut = base + live - kept;
    this.drop(this.firstAbove(1, cut, expired), cut);
    this.append(now, logged);
    const newest = this.at(this.size - 1, 0);
    return allow(limit, Math.max(0, limit - kept - logged), Math.max(1, Math.ceil(newest + windowMs - now)));
  }

  reserve(nowMs: number, permits = 1): Reserved {
    const decision = this.tryAcquire(nowMs, permits);
    if (!decision.allowed) return { decision, receipt: undefined };
    const receipt: LogReceipt = { at: this.at(this.size - 1, 0), forgiven: forgivenCount(this) };
    return { decision, receipt };
  }

  /**
   * Removes up to `permits` from the grant logged at the reservation's time, while it is in the
   * window: that entry and every later one count that many fewer, and an entry left with none goes.
   */
  refund(nowMs: number, receipt: Receipt, permits: number): void {
    const { at, forgiven } = receipt as LogReceipt;
    if (forgiven !== forgivenCount(this) || at + this.rule.windowMs <= this.readAt(nowMs)) return;
    const index = this.firstAbove(0, at, 0) - 1;
    if (index < 0 || this.at(index, 0) !== at) return;
    const before = index > 0 ? this.at(index - 1, 1) : this.dropped;
    const held = this.at(index, 1) - before;
    const removed = Math.min(permits, held);
    for (let i = index; i < this.size; i++) this.ring[this.slot(i) + 1] = this.at(i, 1) - removed;
    if (removed < held) return;
    // Every later grant moves back one place, so the log stays in time order without a gap.
    for (let i = index; i < this.size - 1; i++) {
      this.ring[this.slot(i)] = this.at(i + 1, 0);
      this.ring[this.slot(i) + 1] = this.at(i + 1, 1);
    }
    this.size--;
  }

  isIdle(nowMs: number): boolean {
    return this.size === 0 || this.at(this.size - 1, 0) + this.rule.windowMs <= nowMs;
  }

  /**
   * The whole permits this state counts as used at `nowMs`, debt included (rounded up): what
   * `reconfigure` carries over. Read by shape in limiter/carry-over.ts, not part of the public type.
   */
  private usedAt(nowMs: number): number {
    checkTime(nowMs);
    const expired = this.firstAbove(0, this.readAt(nowMs) - this.rule.windowMs, 0);
    const base = expired > 0 ? this.at(expired - 1, 1) : this.dropped;
    return this.size > 0 ? this.at(this.size - 1, 1) - base : 0;
  }

  /** A summary for logs and `JSON.stringify`: the algorithm and its rule (never the key's state). */
  override toJSON(): { algorithm: string; rule: Rule } {
    return { algorithm: 'sliding-window-log', rule: this.rule };
  }

  /** The one place that decides; it writes only when `spend` is set and the request is allowed. */
  private decide(nowMs: number, permits: number, spend: boolean): Decision {
    const { limit, windowMs } = this.rule;
    checkTime(nowMs);
    const newest = this.size > 0 ? this.at(this.size - 1, 0) : -Infinity;
    // A reading earlier than the newest hit counts as no time passing, which keeps the log in order.
    const now = nowMs > newest ? nowMs : newest;
    const expired = this.firstAbove(0, now - windowMs, 0);
    const base = expired > 0 ? this.at(expired - 1, 1) : this.dropped;
    const live = this.size > 0 ? this.at(this.size - 1, 1) - base : 0;
    if (live + permits > limit) {
      // The request fits once the grant holding the (live + permits - limit)-th live permit has left.
      const leaving = this.at(this.firstAbove(1, base + live - limit + permits - 1, expired), 0);
      // A hit still in the window may compute as leaving at `now` when its time + windowMs rounds
      // down (fractional readings); it is still there now, so the wait is at least 1 ms.
      const retryAfterMs = Math.max(1, Math.ceil(leaving + windowMs - now));
      return reject(limit, Math.max(0, limit - live), retryAfterMs, Math.max(retryAfterMs, Math.ceil(newest + windowMs - now)));
    }
    if (spend) {
      this.drop(expired, base);
      this.append(now, permits);
    }
    // The newest grant is still in the window, so the state is new again in at least 1 ms.
    if (permits === 0) return allow(limit, limit - live, live === 0 ? 0 : Math.max(1, Math.ceil(newest + windowMs - now)));
    return allow(limit, limit - live - permits, Math.ceil(windowMs));
  }

  /** A reading, or the newest logged time when the reading is earlier: no time passing keeps the log in order. */
  private readAt(nowMs: number): number {
    return this.size > 0 && this.at(this.size - 1, 0) > nowMs ? this.at(this.size - 1, 0) : nowMs;
  }

  /** Forgets the `expired` oldest grants; `base` is the running total through the last of them. */
  private drop(expired: number, base: number): void {
    this.head = this.size === expired ? 0 : (this.head + expired) % (this.ring.length / 2);
    this.size -= expired;
    this.dropped = base;
  }

  /** Where the i-th oldest grant's pair starts in the ring. */
  private slot(i: number): number {
    return 2 * ((this.head + i) % (this.ring.length / 2));
  }

  /** The i-th oldest grant's time (`field` 0) or the running total through it (`field` 1). */
  private at(i: number, field: 0 | 1): number {
    return this.ring[this.slot(i) + field] as number;
  }

  /**
   * The first grant, from the `from`-th on, whose `field` (see {@link at}) is above `value`, or the
   * count of grants if none is: a binary search, since times and totals both grow along the log.
   */
  private firstAbove(field: 0 | 1, value: number, from: number): number {
    let low = from;
    let high = this.size;
    while (low < high) {
      const mid = (low + high) >>> 1;
      if (this.at(mid, field) > value) high = mid;
      else low = mid + 1;
    }
    return low;
  }

  private append(time: number, permits: number): void {
    let last = this.size > 0 ? this.at(this.size - 1, 1) : this.dropped;
    // Totals stay below 2^53, so every sum and difference is exact: the live permits and the grant
    // together stay below 2^53 (at most the limit, or the debt bound), so counting from the oldest
    // live grant again always makes room.
    if (last > Number.MAX_SAFE_INTEGER - permits) {
      for (let i = 0; i < this.size; i++) this.ring[this.slot(i) + 1] = this.at(i, 1) - this.dropped;
      last -= this.dropped;
      this.dropped = 0;
    }
    // Grants at one reading leave together: the newest entry takes them when it has that time.
    if (this.size > 0 && this.at(this.size - 1, 0) === time) {
      this.ring[this.slot(this.size - 1) + 1] = last + permits;
      return;
    }
    if (2 * this.size === this.ring.length) this.grow();
    const slot = this.slot(this.size);
    this.ring[slot] = time;
    this.ring[slot + 1] = last + permits;
    this.size++;
  }

  /**
   * Doubles the ring, copying the log into time order: at most to the limit while the log holds
   * fewer entries (every grant holds at least one permit, so grants alone never need more), and to
   * twice it (the usage bound at most) once a debt takes it past the limit.
   */
  private grow(): void {
    const { limit } = this.rule;
    const capacity = Math.min(this.size < limit ? limit : 2 * limit, Math.max(this.ring.length, 1));
    const ring = new Array<number>(2 * capacity).fill(0);
    for (let i = 0; i < this.size; i++) {
      ring[2 * i] = this.at(i, 0);
      ring[2 * i + 1] = this.at(i, 1);
    }
    this.ring = ring;
    this.head = 0;
  }
}
