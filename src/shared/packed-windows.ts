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

  constructor(words: BigUint64Array, state: (slot: number) => number, rule: Rule, epoch: number) {
    this.words = words;
    this.state = state;
    this.limit = rule.limit;
    this.windowMs = rule.windowMs;
    this.offset = epoch - Math.floor(epoch / rule.windowMs) * rule.windowMs;
    this.bits = BigInt(countBits(rule.limit));
    this.mask = (1n << this.bits) - 1n;
  }
}
