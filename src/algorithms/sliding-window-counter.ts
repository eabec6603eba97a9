import { allow, reject, type Decision } from '../core/decision';
import { floorDiv, mulDivCeil, mulDivFloor } from '../core/exact';
import { canonicalRule, type Rule } from '../core/rule';
import { Printable } from '../core/symbols';
import { checkPermits, checkTime } from '../core/validate';
import { checkCharge, forgive, forgivenCount, type Receipt, type Reserved, stateNow, usageBound } from './accounting';
import type { AccountingAlgorithm } from './algorithm';

/** What a counter's reservation remembers: the window it was counted in. */
interface CounterReceipt {
  readonly window: number;
  readonly forgiven: number;
}

/**
 * A sliding window counter: keeps counts for the current and the previous aligned window and
 * estimates `previous * (windowMs - elapsed) / windowMs + current`; a request is allowed when
 * `estimate + permits <= limit`. Two numbers per key, and it smooths the fixed window's boundary
 * burst; the estimate assumes the previous window's traffic was evenly spread.
 *
 * The estimate is compared in whole permits: the previous window's weight, `previous ×
 * (windowMs - elapsed) / windowMs`, rounded up, is formed exactly (in two-part products when
 * `limit × windowMs` passes 2^53), so `remaining` and `retryAfterMs` are exact on an integer clock
 * for every rule, even when the window must roll over once or twice first.
 *
 * @example
 * ```ts
 * import { SlidingWindowCounter, Rule } from 'ratekeeper';
 * const counter = new SlidingWindowCounter(Rule.perMinute(100));
 * counter.tryAcquire(0, 80);
 * counter.tryAcquire(60_000, 20);
 * counter.tryAcquire(90_000).remaining; // 39: the estimate was 80·½ + 20 = 60, plus this one
 * ```
 */
export class SlidingWindowCounter extends Printable implements AccountingAlgorithm {
  private readonly rule: Rule;
  /**
   * The index of the current window: window i covers [i·windowMs, (i+1)·windowMs). Meaningless
   * while both counts are zero; starting it at 0 rather than -Infinity keeps it a small integer,
   * which V8 stores inline instead of boxing (16 bytes less per key).
   */
  private window = 0;
  /**
   * How far into its window the latest grant was: a reading earlier than it counts as no time
   * passing. A small integer for windows under 2^31 ms, stored inline like `window`.
   */
  private offset = 0;
  private previous = 0;
  private current = 0;

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
   * In debt the current count passes the limit (up to twice it); the debt weighs on the estimate
   * through the next window as the previous count does, so it is repaid within two windows.
   */
  charge(nowMs: number, permits: number): Decision {
    checkCharge(permits);
    const { limit, windowMs: w } = this.rule;
    checkTime(nowMs);
    if (permits <= limit) {
      const granted = this.decide(nowMs, permits, true);
      if (granted.allowed) return granted;
    }
    const index = floorDiv(nowMs, w);
    const fresh = this.previous === 0 && this.current === 0;
    const window = fresh || index > this.window ? index : this.window;
    const elapsed = fresh || index > this.window ? nowMs - window * w : Math.max(nowMs - window * w, this.offset);
    const previous = window === this.window ? this.previous : window === this.window + 1 ? this.current : 0;
    const wanted = (window === this.window ? this.current : 0) + permits;
    const bound = usageBound(limit);
    if (wanted > bound) forgive(this);
    this.window = window;
    this.offset = elapsed;
    this.previous = previous;
    this.current = wanted < bound ? wanted : bound;
    const available = limit - this.current - mulDivCeil(previous, w - elapsed, w);
    return allow(limit, Math.max(0, available), resetAfter(previous, this.current, w, elapsed));
  }

  reserve(nowMs: number, permits = 1): Reserved {
    const decision = this.tryAcquire(nowMs, permits);
    if (!decision.allowed) return { decision, receipt: undefined };
    const receipt: CounterReceipt = { window: this.window, forgiven: forgivenCount(this) };
    return { decision, receipt };
  }

  /**
   * Takes the permits off the count of the window they were counted in: the current count while
   * that window lasts, the previous count through the next one (removing exactly the weight still
   * counted), nothing after.
   */
  refund(nowMs: number, receipt: Receipt, permits: number): void {
    const { window, forgiven } = receipt as CounterReceipt;
    if (forgiven !== forgivenCount(this)) return;
    const index = Math.max(floorDiv(nowMs, this.rule.windowMs), this.window);
    if (window === this.window && index <= window + 1) this.current -= Math.min(permits, this.current);
    else if (window === this.window - 1 && index === this.window) this.previous -= Math.min(permits, this.previous);
  }

  isIdle(nowMs: number): boolean {
    const index = floorDiv(nowMs, this.rule.windowMs);
    if (index >= this.window + 2) return true;
    if (index === this.window + 1) return this.current === 0;
    return this.current === 0 && this.previous === 0;
  }

  /**
   * The whole permits this state counts as used at `nowMs`, debt included (rounded up): what
   * `reconfigure` carries over. Read by shape in limiter/carry-over.ts, not part of the public type.
   */
  private usedAt(nowMs: number): number {
    checkTime(nowMs);
    const w = this.rule.windowMs;
    const index = floorDiv(nowMs, w);
    if (index >= this.window + 2 || this.previous + this.current === 0) return 0;
    // Read as decide reads it: a reading earlier than the latest grant counts as no time passing.
    if (index > this.window) return mulDivCeil(this.current, w - (nowMs - index * w), w);
    return this.current + mulDivCeil(this.previous, w - Math.max(nowMs - this.window * w, this.offset), w);
  }

  /** A summary for logs and `JSON.stringify`: the algorithm and its rule (never the key's state). */
  override toJSON(): { algorithm: string; rule: Rule } {
    return { algorithm: 'sliding-window-counter', rule: this.rule };
  }

  /** The one place that decides; it writes only when `spend` is set and the request is allowed. */
  private decide(nowMs: number, permits: number, spend: boolean): Decision {
    const { limit, windowMs: w } = this.rule;
    checkTime(nowMs);
    const index = floorDiv(nowMs, w);
    const fresh = this.previous === 0 && this.current === 0;
    // A reading earlier than the latest grant counts as no time passing.
    const window = fresh || index > this.window ? index : this.window;
    const start = window * w;
    const elapsed = fresh || index > this.window ? nowMs - start : Math.max(nowMs - start, this.offset);
    const previous = window === this.window ? this.previous : window === this.window + 1 ? this.current : 0;
    const current = window === this.window ? this.current : 0;
    // Whole permits left: the limit less the count and the previous window's weight, rounded up.
    const available = limit - current - mulDivCeil(previous, w - elapsed, w);
    if (available < permits) {
      const retryAfterMs = retryAfter(previous, current, permits, limit, w, elapsed);
      return reject(limit, Math.max(0, available), retryAfterMs, resetAfter(previous, current, w, elapsed));
    }
    if (spend) {
      this.window = window;
      this.offset = elapsed;
      this.previous = previous;
      this.current = current + permits;
    }
    return allow(limit, available - permits, resetAfter(previous, current + permits, w, elapsed));
  }
}

/**
 * The first whole ms at which `permits` would fit. Within the current window the previous window's
 * weight falls by `previous / w` per ms; in the next one the current count becomes the previous and
 * falls the same way; two windows on, the key is as new and any permitted request fits.
 */
export function retryAfter(previous: number, current: number, permits: number, limit: number, w: number, elapsed: number): number {
  const untilNext = w - elapsed;
  // The weight may be at most `fits`: previous · (w - elapsed - wait) <= fits · w. With fits >= 0,
  // fits < previous, or the request would have been allowed.
  const fits = limit - current - permits;
  if (fits >= 0 && fits < previous) {
    const wait = untilNext - mulDivFloor(fits, w, previous);
    if (wait < untilNext) return Math.ceil(wait);
  }
  if (current === 0) return Math.ceil(untilNext);
  // In the next window the count carried over may weigh at most limit - permits.
  const intoNext = limit - permits >= current ? 0 : w - mulDivFloor(limit - permits, w, current);
  if (intoNext < w) return Math.ceil(untilNext + intoNext);
  return Math.ceil(untilNext + w);
}

export function resetAfter(previous: number, current: number, w: number, elapsed: number): number {
  if (current > 0) return Math.ceil(2 * w - elapsed);
  return previous > 0 ? Math.ceil(w - elapsed) : 0;
}
