import type { PeekableAlgorithm, RateLimitAlgorithm } from '../algorithms/algorithm';
import { partsOf } from '../algorithms/composite';

/**
 * Moves what a key has used from its state under the old rule into a fresh state under the new
 * one, at the moment of the switch; returns false, changing nothing, when either state cannot be
 * read without spending (an algorithm without `peek`).
 *
 * What is carried is the permits the old state still counts as used: its limit minus the whole
 * permits it has available now. They are spent in the new state at the switch, capped at the new
 * limit, so nothing already spent is forgiven and a raised limit is available at once. Composites
 * with as many parts are carried part by part, so the hourly part keeps its hour when only the
 * per-second part changes.
 */
export function carryOver(previous: RateLimitAlgorithm, next: RateLimitAlgorithm, nowMs: number): boolean {
  if (!isPeekable(previous) || !isPeekable(next)) return false;
  const before = partsOf(previous);
  const after = partsOf(next);
  if (before !== undefined && after !== undefined && before.length === after.length) {
    before.forEach((part, i) => spendUsed(part, after[i] as PeekableAlgorithm, nowMs));
  } else {
    spendUsed(previous, next, nowMs);
  }
  return true;
}

function spendUsed(previous: PeekableAlgorithm, next: PeekableAlgorithm, nowMs: number): void {
  const probe = previous.peek(nowMs, 1);
  const available = probe.allowed ? probe.remaining + 1 : probe.remaining;
  const used = Math.min(probe.limit - available, next.peek(nowMs, 1).limit);
  if (used > 0) next.tryAcquire(nowMs, used);
}

function isPeekable(state: RateLimitAlgorithm): state is PeekableAlgorithm {
  // A factory may hand back anything (null included): such a state is not carried over, never read.
  return typeof (state as Partial<PeekableAlgorithm> | null)?.peek === 'function';
}
