import { resetAfter, retryAfter } from '../algorithms/sliding-window-counter';
import { allow, reject, type Decision } from '../core/decision';
import { mulDivCeil } from '../core/exact';
import { PackedWindows } from './packed-windows';
import type { SharedState } from './state';

/**
 * A sliding window counter in one 64-bit word: `window << 2b | previous << b | current`, where b =
 * the bits of a count up to `limit` and `window` is the current window's index counted from the
 * one the buffer was created in. It decides exactly as `SlidingWindowCounter`, with the same
 * exact integer arithmetic. A reading earlier than the word's window counts as no time passing; one
 * earlier within the window (another thread's clock a little behind) sees more of the previous
 * window's weight: stricter, never looser. The index has `64 - 2b` bits, so the word lasts `2^(64 - 2b) · windowMs`:
 * `perSecond(1000)` (b = 10) for 557 000 years, `perSecond(100_000)` (b = 17) for 34.8 years,
 * `perMinute(1_000_000)` (b = 20) for 31.9 years; `perSecond(1_000_000)` (b = 20) would last
 * 194 days and is refused (layout.ts asks for ten years): use the token bucket or fixed window there.
 */
export class SlidingWindowCounterWord extends PackedWindows implements SharedState {
  decide(slot: number, now: number, permits: number, spend: boolean): Decision {
    const words = this.words;
    const at = this.state(slot);
    const limit = this.limit;
    const w = this.windowMs;
    const t = now + this.offset;
    const index = Math.floor(t / w);
    for (;;) {
      const word = Atomics.load(words, at);
      const known = at === this.wroteAt && word === this.wrote;
      const storedCurrent = known ? this.wroteCounts[0] : Number(word & this.mask);
      const storedPrevious = known ? this.wroteCounts[1] : Number((word >> this.bits) & this.mask);
      const stored = known ? this.wroteWindow : Number(word >> (2n * this.bits));
      // A reading from an earlier window than the stored one counts as no time passing.
      const window = index > stored || (storedPrevious === 0 && storedCurrent === 0) ? index : stored;
      const start = window * w;
      const elapsed = Math.max(t, start) - start;
      const previous = window === stored ? storedPrevious : window === stored + 1 ? storedCurrent : 0;
      const current = window === stored ? storedCurrent : 0;
      // Whole permits left: the limit less the count and the previous window's weight, rounded up (as in memory).
      const available = limit - current - mulDivCeil(previous, w - elapsed, w);
      if (available < permits) {
        const retryAfterMs = retryAfter(previous, current, permits, limit, w, elapsed);
        return reject(limit, Math.max(0, available), retryAfterMs, resetAfter(previous, current, w, elapsed));
      }
      if (!spend) return allow(limit, available - permits, resetAfter(previous, current + permits, w, elapsed));
      // In the stored window only the current count (the low bits, staying within them) changes: add the permits.
      const next =
        window === stored
          ? word + this.permitsWord(permits)
          : (((BigInt(window) << this.bits) | BigInt(previous)) << this.bits) | BigInt(current + permits);
      if (Atomics.compareExchange(words, at, word, next) === word) {
        this.remember(at, next, window, current + permits, previous);
        return allow(limit, available - permits, resetAfter(previous, current + permits, w, elapsed));
      }
    }
  }

  isIdle(slot: number, now: number): boolean {
    const word = Atomics.load(this.words, this.state(slot));
    const index = Math.floor((now + this.offset) / this.windowMs);
    const stored = Number(word >> (2n * this.bits));
    const current = word & this.mask;
    if (index >= stored + 2) return true;
    if (index === stored + 1) return current === 0n;
    return (word & ((1n << (2n * this.bits)) - 1n)) === 0n;
  }
}
