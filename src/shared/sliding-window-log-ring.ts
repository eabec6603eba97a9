import { allow, reject, type Decision } from '../core/decision';
import type { Rule } from '../core/rule';
import type { SharedState } from './state';

// A sliding log per slot: one word and a ring of `ring` timestamps (a power of two >= limit).
//
//   word:  S (23 bits: permits ever granted, mod 2^23) | full (1 bit: S has reached limit) | newest (40 bits)
//   entry: tag (24 bits: 1 + its permit's sequence number mod 2^23) | time (40 bits)
//
// Times are ms since the buffer's creation; 40 bits last 34.8 years. A grant moves the word by CAS
// (the commit: it checked the entries as of that word) and then writes its entries, each by CAS
// from the value it read before the commit, so a thread that wakes late never overwrites a newer lap.
// Until an entry is written its tag is a lap old, and it reads as `newest`: later than its real
// time, so a slow or stopped writer only ever makes a key stricter, and the log never needs a lock.

const TIME_BITS = 40n;
const TIME_MASK = (1n << TIME_BITS) - 1n;
const FULL = 1n << TIME_BITS;
const SEQ_SHIFT = TIME_BITS + 1n;
const SEQ_MOD = 2 ** 23;

/**
 * A sliding window log in shared memory, deciding exactly as `SlidingWindowLog`: at most `limit`
 * permits in any `(t - windowMs, t]`. Each permit is a timestamp, so the limit is capped at 4095
 * per key, and a slot takes `8 · ring` bytes beside its word.
 */
export class SlidingWindowLogRing implements SharedState {
  readonly #words: BigUint64Array;
  readonly #state: (slot: number) => number;
  readonly #entries: (slot: number) => number;
  readonly #limit: number;
  readonly #windowMs: number;
  readonly #ring: number;
  /** The entries a grant will write, read before its commit. */
  readonly #before: bigint[] = [];

  constructor(words: BigUint64Array, state: (slot: number) => number, entries: (slot: number) => number, rule: Rule, ring: number) {
    this.#words = words;
    this.#state = state;
    this.#entries = entries;
    this.#limit = rule.limit;
    this.#windowMs = rule.windowMs;
    this.#ring = ring;
  }

  decide(slot: number, now: number, permits: number, spend: boolean): Decision {
    const words = this.#words;
    const at = this.#state(slot);
    const base = this.#entries(slot);
    const limit = this.#limit;
    const w = this.#windowMs;
    for (;;) {
      const word = Atomics.load(words, at);
      const newest = Number(word & TIME_MASK);
      const full = (word & FULL) !== 0n;
      const seq = Number(word >> SEQ_SHIFT);
      const logged = full ? limit : seq; // the last `logged` permits are the only ones that can be live
      // A reading earlier than the newest hit counts as no time passing, which keeps the log in order.
      const t = logged > 0 && newest > now ? newest : now;
      const time = (i: number) => this.#time(base, seq - logged + i, newest);
      // How many of the logged permits have left: a binary search, since the log is in time order.
      let low = 0;
      let high = logged;
      while (low < high) {
        const mid = (low + high) >>> 1;
        if (time(mid) <= t - w) low = mid + 1;
        else high = mid;
      }
      const live = logged - low;
      if (live + permits > limit) {
        // The request fits once the (live + permits - limit)-th live permit has left.
        const leaving = time(logged + permits - limit - 1);
        return reject(limit, limit - live, leaving + w - t, newest + w - t);
      }
      if (!spend) return allow(limit, limit - live - permits, w);
      const before = this.#before;
      for (let j = 0; j < permits; j++) before[j] = Atomics.load(words, base + ((seq + j) & (this.#ring - 1)));
      const reached = full || seq + permits >= limit;
      const next = (BigInt((seq + permits) % SEQ_MOD) << SEQ_SHIFT) | (reached ? FULL : 0n) | BigInt(t);
      if (Atomics.compareExchange(words, at, word, next) !== word) continue;
      for (let j = 0; j < permits; j++) {
        const s = (seq + j) % SEQ_MOD;
        const entry = (BigInt(s + 1) << TIME_BITS) | BigInt(t);
        Atomics.compareExchange(words, base + (s & (this.#ring - 1)), before[j] as bigint, entry);
      }
      return allow(limit, limit - live - permits, w);
    }
  }

  isIdle(slot: number, now: number): boolean {
    const word = Atomics.load(this.#words, this.#state(slot));
    return word === 0n || Number(word & TIME_MASK) + this.#windowMs <= now;
  }

  /** The time of the permit with sequence number `s` (mod 2^23): `newest` while it is not yet written. */
  #time(base: number, s: number, newest: number): number {
    const seq = ((s % SEQ_MOD) + SEQ_MOD) % SEQ_MOD;
    const entry = Atomics.load(this.#words, base + (seq & (this.#ring - 1)));
    return Number(entry >> TIME_BITS) === seq + 1 ? Number(entry & TIME_MASK) : newest;
  }
}
