import { allow, reject, type Decision } from '../core/decision';
import { PackedWindows } from './packed-windows';
import type { SharedState } from './state';

/**
 * A fixed window in one 64-bit word: `window << b | count`, where b = the bits of a count up to
 * `limit` and `window` is the window's index counted from the one the buffer was created in. It
 * decides exactly as `FixedWindow`. The index has `64 - b` bits, so the word lasts
 * `2^(64 - b) · windowMs`: `perSecond(1000)` (b = 10) for 2^54 s (capped at 2^52 ms, 142 000 years, as every layout), `Rule(2^32, 1 ms)`
 * for 2^31 ms (24.9 days, so refused: layout.ts asks for ten years).
 */
export class FixedWindowWord extends PackedWindows implements SharedState {
  decide(slot: number, now: number, permits: number, spend: boolean): Decision {
    const words = this.words;
    const at = this.state(slot);
    const limit = this.limit;
    const w = this.windowMs;
    const t = now + this.offset;
    const current = Math.floor(t / w);
    for (;;) {
      const word = Atomics.load(words, at);
      const known = at === this.wroteAt && word === this.wrote;
      const count = known ? this.wroteCounts[0] : Number(word & this.mask);
      const stored = known ? this.wroteWindow : Number(word >> this.bits);
      // A reading from an earlier window than the stored one counts as no time passing.
      const window = current > stored || count === 0 ? current : stored;
      const used = window === stored ? count : 0;
      const untilNext = (window + 1) * w - Math.max(t, window * w);
      if (used + permits > limit) return reject(limit, limit - used, untilNext, untilNext);
      if (!spend) return allow(limit, limit - used - permits, untilNext);
      // The count is the low bits and stays within them: in the stored window, adding the permits is the new word.
      const next = window === stored ? word + this.permitsWord(permits) : (BigInt(window) << this.bits) | BigInt(used + permits);
      if (Atomics.compareExchange(words, at, word, next) === word) {
        this.remember(at, next, window, used + permits, 0);
        return allow(limit, limit - used - permits, untilNext);
      }
    }
  }

  isIdle(slot: number, now: number): boolean {
    const word = Atomics.load(this.words, this.state(slot));
    return (word & this.mask) === 0n || Math.floor((now + this.offset) / this.windowMs) > Number(word >> this.bits);
  }
}
