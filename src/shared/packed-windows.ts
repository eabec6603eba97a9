import type { Rule } from '../core/rule';
import { countBits } from './layout';

/**
 * What the fixed window's and the sliding counter's words share: aligned windows counted from the
 * one the buffer was created in, and counts packed `bits` bits each, so a count up to `limit` fits.
 */
export abstract class PackedWindows {
  protected readonly words: BigUint64Array;
  protected readonly state: (slot: number) => number;
  protected readonly limit: number;
  protected readonly windowMs: number;
  /** The creation time's distance into its window: `now + offset` is ms since that window began. */
  protected readonly offset: number;
  protected readonly bits: bigint;
  protected readonly mask: bigint;
  /**
   * The word this thread last wrote, at index `wroteAt`, and its fields: a load that finds that same
   * value there decodes the same, whoever wrote it, so the hot key skips the BigInt shifts and conversions.
   */
  protected wrote = 0n;
  protected wroteAt = -1;
  protected wroteWindow = 0;
  protected wroteCounts = [0, 0] as [current: number, previous: number];
  #permits = 0;
  #permitsWord = 0n;

  constructor(words: BigUint64Array, state: (slot: number) => number, rule: Rule, epoch: number) {
    this.words = words;
    this.state = state;
    this.limit = rule.limit;
    this.windowMs = rule.windowMs;
    this.offset = epoch - Math.floor(epoch / rule.windowMs) * rule.windowMs;
    this.bits = BigInt(countBits(rule.limit));
    this.mask = (1n << this.bits) - 1n;
  }

  /** `permits` as a BigInt, kept from the last call: adding it to a word of the same window counts them. */
  protected permitsWord(permits: number): bigint {
    if (permits !== this.#permits) {
      this.#permitsWord = BigInt(permits);
      this.#permits = permits;
    }
    return this.#permitsWord;
  }

  /** Remembers a word this thread has just written, and its fields. */
  protected remember(at: number, word: bigint, window: number, current: number, previous: number): void {
    this.wrote = word;
    this.wroteAt = at;
    this.wroteWindow = window;
    this.wroteCounts[0] = current;
    this.wroteCounts[1] = previous;
  }
}
