import { allow, reject, type Decision } from '../core/decision';
import { floorDiv } from '../core/exact';
import { canonicalRule, type Rule } from '../core/rule';
import { Printable } from '../core/symbols';
import { checkPermits, checkTime } from '../core/validate';
import { checkCharge, forgive, forgivenCount, type Receipt, type Reserved, usageBound } from './accounting';
import type { AccountingAlgorithm } from './algorithm';

/** What a window's reservation remembers: the window it was counted in. */
interface WindowReceipt {
  readonly window: number;
  readonly forgiven: number;
}

/**
 * A fixed window: at most `limit` per window, with windows aligned to the clock's zero
 * (`start = now - now mod windowMs`), so every key's window ends at the same moment.
 * The cheapest algorithm, but a burst straddling a boundary can pass 2× the limit.
 *
 * @example
 * ```ts
 * import { FixedWindow, Rule } from 'ratekeeper';
 * const window = new FixedWindow(Rule.perSecond(3));
 * window.tryAcquire(900, 3).allowed; // true
 * window.tryAcquire(950).retryAfterMs; // 50: the next window opens at 1000
 * ```
 */
export class FixedWindow extends Printable implements AccountingAlgorithm {
  private readonly rule: Rule;
  /**
   * The index of the window `count` belongs to: window i covers [i·windowMs, (i+1)·windowMs).
   * Meaningless while `count` is zero; starting it at 0 rather than -Infinity keeps it a small
   * integer, which V8 stores inline instead of boxing (16 bytes less per key).
   */
  private window = 0;
  private count = 0;

  constructor(rule: Rule) {
    super();
    this.rule = canonicalRule(rule);
  }

  tryAcquire(nowMs: number, permits = 1): Decision {
    checkPermits(permits, this.rule.limit);
    return this.decide(nowMs, permits, true);
  }

  peek(nowMs: number, permits = 1): Decision {
    if (permits !== 0) checkPermits(permits, this.rule.limit);
    return this.decide(nowMs, permits, false);
  }

  /**
   * In debt the count passes the limit (up to twice it), which refuses every request until the
   * window ends, whatever the amount: a debt never outlives its window.
   */
  charge(nowMs: number, permits: number): Decision {
    checkCharge(permits);
    const { limit, windowMs } = this.rule;
    checkTime(nowMs);
    if (permits <= limit) {
      const granted = this.decide(nowMs, permits, true);
      if (granted.allowed) return granted;
    }
    const current = floorDiv(nowMs, windowMs);
    const window = current > this.window || this.count === 0 ? current : this.window;
    const now = Math.max(nowMs, window * windowMs);
    // What passes the bound is dropped, and voids the receipts issued before. With a bound of twice
    // the limit that changes no decision (the reservations still counted are at most the limit, so
    // giving them all back could not bring the count under it before the window ends); past 2^52
    // the bound is less than that, and a refund could.
    const used = window === this.window ? this.count : 0;
    const bound = usageBound(limit);
    if (used + permits > bound) forgive(this);
    this.window = window;
    this.count = used + permits > bound ? bound : used + permits;
    return allow(limit, 0, Math.ceil((window + 1) * windowMs - now));
  }

  reserve(nowMs: number, permits = 1): Reserved {
    const decision = this.tryAcquire(nowMs, permits);
    const receipt: WindowReceipt | undefined = decision.allowed ? { window: this.window, forgiven: forgivenCount(this) } : undefined;
    return { decision, receipt };
  }

  /** Only from the window the permits were counted in, and only while it lasts. */
  refund(nowMs: number, receipt: Receipt, permits: number): void {
    const { window, forgiven } = receipt as WindowReceipt;
    if (window !== this.window || forgiven !== forgivenCount(this) || floorDiv(nowMs, this.rule.windowMs) > window) return;
    this.count -= Math.min(permits, this.count);
  }

  isIdle(nowMs: number): boolean {
    return this.count === 0 || floorDiv(nowMs, this.rule.windowMs) > this.window;
  }

  /**
   * The whole permits this state counts as used at `nowMs`, debt included (rounded up): what
   * `reconfigure` carries over. Read by shape in limiter/carry-over.ts, not part of the public type.
   */
  private usedAt(nowMs: number): number {
    checkTime(nowMs);
    const current = floorDiv(nowMs, this.rule.windowMs);
    // A reading from an earlier window than the stored one counts as no time passing, as in decide.
    return current > this.window ? 0 : this.count;
  }

  /** A summary for logs and `JSON.stringify`: the algorithm and its rule (never the key's state). */
  override toJSON(): { algorithm: string; rule: Rule } {
    return { algorithm: 'fixed-window', rule: this.rule };
  }

  /** The one place that decides; it writes only when `spend` is set and the request is allowed. */
  private decide(nowMs: number, permits: number, spend: boolean): Decision {
    const { limit, windowMs } = this.rule;
    checkTime(nowMs);
    // A reading from an earlier window than the stored one counts as no time passing.
    const current = floorDiv(nowMs, windowMs);
    const window = current > this.window || this.count === 0 ? current : this.window;
    const now = Math.max(nowMs, window * windowMs);
    const used = window === this.window ? this.count : 0;
    const untilNext = Math.ceil((window + 1) * windowMs - now);
    if (used + permits > limit) {
      // `peek(now, 0)` of a key in debt: for a dashboard, simply none left.
      if (permits === 0) return allow(limit, 0, untilNext);
      return reject(limit, Math.max(0, limit - used), untilNext, untilNext);
    }
    if (spend) {
      this.window = window;
      this.count = used + permits;
    }
    return allow(limit, limit - used - permits, used + permits === 0 ? 0 : untilNext);
  }
}
