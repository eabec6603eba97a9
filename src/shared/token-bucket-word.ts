import { scaledUnits } from '../algorithms/token-bucket';
import { allow, reject, type Decision } from '../core/decision';
import type { Rule } from '../core/rule';
import type { SharedState } from './state';

/**
 * A token bucket (and leaky bucket, which decides alike) in one 64-bit word: X, the point in scaled
 * units (as `TokenBucket` counts them: `perMs` per ms, `perToken` per token) at which the bucket is
 * full again, counted from the buffer's creation. The GCRA form: at `now` the bucket holds
 * `capacity - max(0, X - now·perMs)` units; a grant of `cost` units sets X to `max(X, now·perMs) + cost`.
 * Zero is a full bucket, so a fresh slot needs no set-up; a refusal writes nothing; a reading
 * earlier than X only ever sees fewer tokens.
 *
 * The arithmetic is BigInt, exact while `uptime·perMs + capacity < 2^64` (layout.ts refuses rules
 * that would not last ten years): `Rule(1e9, 1000)` lasts 584 years, `perSecond(10)` for ever.
 */
export class TokenBucketWord implements SharedState {
  readonly #words: BigUint64Array;
  readonly #state: (slot: number) => number;
  readonly #limit: number;
  readonly #perMs: bigint;
  readonly #perToken: bigint;
  readonly #capacity: bigint;

  constructor(words: BigUint64Array, state: (slot: number) => number, rule: Rule) {
    const { perMs, perToken, limit } = scaledUnits(rule);
    this.#words = words;
    this.#state = state;
    this.#limit = limit;
    this.#perMs = BigInt(perMs);
    this.#perToken = BigInt(perToken);
    this.#capacity = BigInt(limit) * this.#perToken;
  }

  decide(slot: number, now: number, permits: number, spend: boolean): Decision {
    const words = this.#words;
    const at = this.#state(slot);
    const perMs = this.#perMs;
    const perToken = this.#perToken;
    const capacity = this.#capacity;
    const n = BigInt(now) * perMs;
    const cost = BigInt(permits) * perToken;
    for (;;) {
      const x = Atomics.load(words, at);
      const base = x > n ? x : n;
      const used = base - n + cost; // units spent once this request is granted
      if (used > capacity) {
        const debt = base - n;
        return reject(this.#limit, Number((capacity - debt) / perToken), ceil(used - capacity, perMs), ceil(debt, perMs));
      }
      if (!spend || Atomics.compareExchange(words, at, x, base + cost) === x) {
        return allow(this.#limit, Number((capacity - used) / perToken), ceil(used, perMs));
      }
    }
  }

  isIdle(slot: number, now: number): boolean {
    return Atomics.load(this.#words, this.#state(slot)) <= BigInt(now) * this.#perMs;
  }
}

/** ⌈a / d⌉ for a >= 0, as a number. */
function ceil(a: bigint, d: bigint): number {
  return Number((a + d - 1n) / d);
}
