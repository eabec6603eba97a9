import { allow, reject, type Decision } from '../core/decision';
import { floorDiv } from '../core/exact';
import { canonicalRule, type Rule } from '../core/rule';
import { Printable } from '../core/symbols';
import { checkPermits, checkTime } from '../core/validate';
import type { PeekableAlgorithm } from './algorithm';

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
export class FixedWindow extends Printable implements PeekableAlgorithm {
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
    return this.decide(nowMs, permits, true);
  }

  peek(nowMs: number, permits = 1): Decision {
    return this.decide(nowMs, permits, false);
  }

  isIdle(nowMs: number): boolean {
    return this.count === 0 || floorDiv(nowMs, this.rule.windowMs) > this.window;
  }

  /** A summary for logs and `JSON.stringify`: the algorithm and its rule (never the key's state). */
  override toJSON(): { algorithm: string; rule: Rule } {
    return { algorithm: 'fixed-window', rule: this.rule };
  }

  /** The one place that decides; it writes only when `spend` is set and the request is allowed. */
  private decide(nowMs: number, permits: number, spend: boolean): Decision {
    const { limit, windowMs } = this.rule;
    checkTime(nowMs);
    checkPermits(permits, limit);
    // A reading from an earlier window than the stored one counts as no time passing.
    const current = floorDiv(nowMs, windowMs);
    const window = current > this.window || this.count === 0 ? current : this.window;
    const now = Math.max(nowMs, window * windowMs);
    const used = window === this.window ? this.count : 0;
    const untilNext = Math.ceil((window + 1) * windowMs - now);
    if (used + permits > limit) return reject(limit, limit - used, untilNext, untilNext);
    if (spend) {
      this.window = window;
      this.count = used + permits;
    }
    return allow(limit, limit - used - permits, untilNext);
  }
}
