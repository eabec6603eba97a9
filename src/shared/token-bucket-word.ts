import { scaledUnits } from '../algorithms/token-bucket';
import { allow, reject, type Decision } from '../core/decision';
import { ceilDiv, floorDiv } from '../core/exact';
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
 * The word is exact while `uptime·perMs + capacity < 2^64` (layout.ts refuses rules that would not
 * last ten years): `Rule(1e9, 1000)` lasts 584 years, `perSecond(10)` for ever. The word is read and
 * swapped as a BigInt; what is measured against the capacity (at most twice it) is counted in plain
 * numbers when the capacity is below 2^52, the common case and much faster, else in BigInt. Turning
 * a number into a BigInt or back costs more than the CAS itself, so the hot path does neither: the
 * cost's BigInt is kept per permits, and a word equal to the one this thread last wrote there (at
 * this same reading) has that word's debt, known without subtracting and converting.
 */
export class TokenBucketWord implements SharedState {
  readonly #words: BigUint64Array;
  readonly #state: (slot: number) => number;
  readonly #limit: number;
  readonly #perMs: bigint;
  readonly #perToken: bigint;
  readonly #capacity: bigint;
  /** The same numbers as plain numbers, when the capacity is below 2^52 (so twice it is exact). */
  readonly #narrow: { perMs: number; perToken: number; capacity: number } | undefined;
  /** The last reading and its scaled units: a hot key is asked many times per millisecond. */
  #lastNow = -1;
  #lastUnits = 0n;
  /** The last call's permits and their cost in scaled units as a BigInt: converting a number to a BigInt costs more than the CAS. */
  #lastPermits = 0;
  #lastCost = 0n;
  /**
   * The word this thread last wrote (at index `#wroteAt`, at the reading `#lastNow`) and how far it
   * stands above that reading's units: a load that finds that same value there has that same debt,
   * whoever wrote it, so no BigInt subtraction and conversion is needed. Forgotten when the reading moves.
   */
  #wrote = 0n;
  #wroteAt = -1;
  #wroteDebt = 0;

  constructor(words: BigUint64Array, state: (slot: number) => number, rule: Rule) {
    const { perMs, perToken, limit } = scaledUnits(rule);
    this.#words = words;
    this.#state = state;
    this.#limit = limit;
    this.#perMs = BigInt(perMs);
    this.#perToken = BigInt(perToken);
    this.#capacity = BigInt(limit) * this.#perToken;
    this.#narrow = this.#capacity < 1n << 52n ? { perMs, perToken, capacity: limit * perToken } : undefined;
  }

  decide(slot: number, now: number, permits: number, spend: boolean): Decision {
    if (now !== this.#lastNow) {
      this.#lastUnits = BigInt(now) * this.#perMs;
      this.#lastNow = now;
      this.#wroteAt = -1;
    }
    const narrow = this.#narrow;
    if (narrow === undefined) return this.#decideWide(slot, this.#lastUnits, permits, spend);
    const words = this.#words;
    const at = this.#state(slot);
    const n = this.#lastUnits;
    const cost = permits * narrow.perToken;
    if (permits !== this.#lastPermits) {
      this.#lastCost = BigInt(cost);
      this.#lastPermits = permits;
    }
    const costWord = this.#lastCost;
    for (;;) {
      const x = Atomics.load(words, at);
      const known = at === this.#wroteAt && x === this.#wrote;
      // Units spent and not yet refilled (a known word's debt is at least one permit's cost, so it is
      // above n). A debt above the capacity means this reading is behind the one that wrote x: it
      // counts as no time passed since, the bucket empty, as at the earliest reading x allows.
      const debt = known ? this.#wroteDebt : x > n ? Math.min(Number(x - n), narrow.capacity) : 0;
      const used = debt + cost;
      if (used > narrow.capacity) {
        return reject(this.#limit, floorDiv(narrow.capacity - debt, narrow.perToken), ceilDiv(used - narrow.capacity, narrow.perMs), ceilDiv(debt, narrow.perMs));
      }
      if (!spend) return allow(this.#limit, floorDiv(narrow.capacity - used, narrow.perToken), ceilDiv(used, narrow.perMs));
      const next = (debt > 0 ? x : n) + costWord; // debt > 0 exactly when x > n (and a granted debt was not capped)
      if (Atomics.compareExchange(words, at, x, next) === x) {
        this.#wrote = next;
        this.#wroteAt = at;
        this.#wroteDebt = used;
        return allow(this.#limit, floorDiv(narrow.capacity - used, narrow.perToken), ceilDiv(used, narrow.perMs));
      }
    }
  }

  /** The same decision in BigInt throughout, for a capacity of 2^52 units or more. */
  #decideWide(slot: number, n: bigint, permits: number, spend: boolean): Decision {
    const words = this.#words;
    const at = this.#state(slot);
    const perMs = this.#perMs;
    const perToken = this.#perToken;
    const capacity = this.#capacity;
    const cost = BigInt(permits) * perToken;
    for (;;) {
      const x = Atomics.load(words, at);
      // As above: a reading behind the writer's counts as the earliest one x allows.
      const m = x - capacity > n ? x - capacity : n;
      const base = x > m ? x : m;
      const used = base - m + cost; // units spent once this request is granted
      if (used > capacity) {
        const debt = base - m;
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
